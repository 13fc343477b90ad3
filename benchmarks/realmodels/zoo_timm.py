"""timm: one entrypoint per model class (the one with the fewest parameters), built with
`pretrained=False`; the reentrant mode is timm's own switch, `timm.layers.set_reentrant_ckpt`,
read by every checkpoint call timm makes (`timm.models._manipulate.checkpoint`/`checkpoint_seq`)."""

from __future__ import annotations

import collections
import copy
from typing import Any

import torch

from realmodels.zoo_common import Built, torchvision_without_native_ops

BATCH = 2
SMALL_IMAGE = 64
MAX_PARAMETERS = 100_000_000  # the smallest variant of a few classes is huge: a CPU step would outlast the timeout


_SMALL_WORDS = ("pico", "atto", "femto", "nano", "zepto", "xxxs", "xxs", "tiny", "xs", "mini", "micro", "small", "s0",
                "b0", "lite0", "t0", "a0", "18", "d0", "s1", "s", "t", "b", "base")  # fmt: skip
TRIES_PER_MODULE = 4  # entrypoints built (on the meta device) per module, smallest-looking first


def _size_rank(name: str) -> tuple[int, int, int]:
    """Smallest-looking first: a size word early in the list, no resolution suffix, short."""
    words = name.replace(".", "_").split("_")
    rank = min((_SMALL_WORDS.index(w) for w in words if w in _SMALL_WORDS), default=len(_SMALL_WORDS))
    resolution = any(w.isdigit() and int(w) >= 256 for w in words)
    return (rank, int(resolution), len(name))


def enumerate_models() -> list[dict[str, Any]]:
    """Per timm model module, the smallest of a few smallest-looking entrypoints, one per model
    class found among them (built on the meta device: no memory, no weights)."""
    torchvision_without_native_ops()
    import timm
    from timm.models import _registry

    by_module: dict[str, list[str]] = collections.defaultdict(list)
    for name in timm.list_models():
        by_module[_registry._model_to_module.get(name, "?")].append(name)
    found: dict[str, dict[str, Any]] = {}
    for module, names in sorted(by_module.items()):
        built_any = False
        for name in sorted(names, key=_size_rank)[:TRIES_PER_MODULE]:
            try:
                with torch.device("meta"):
                    model = timm.create_model(name, pretrained=False)
            except Exception:  # noqa: BLE001 - some entrypoints compute on init
                continue
            built_any = True
            if not hasattr(model, "set_grad_checkpointing"):
                continue
            arch = f"{type(model).__module__}.{type(model).__qualname__}"
            count = sum(p.numel() for p in model.parameters())
            if arch not in found or count < found[arch]["parameters"]:
                found[arch] = {"name": name, "arch": arch, "parameters": count}
        if not built_any:  # none built on meta: run the smallest-looking one for real
            found[f"timm.models.{module}"] = {"name": sorted(names, key=_size_rank)[0], "arch": f"timm.models.{module}"}
    return sorted(found.values(), key=lambda entry: entry["name"])


def build(name: str) -> Built:
    torchvision_without_native_ops()
    import timm

    try:
        with torch.device("meta"):
            count = sum(p.numel() for p in timm.create_model(name, pretrained=False).parameters())
    except Exception:  # noqa: BLE001 - some entrypoints compute on init: no size check for them
        count = 0
    if count > MAX_PARAMETERS:
        raise MemoryError(f"too large: {count} parameters")
    size = None
    try:
        model = timm.create_model(name, pretrained=False, img_size=SMALL_IMAGE)
        size = SMALL_IMAGE
    except Exception:  # noqa: BLE001 - not every model takes img_size
        model = timm.create_model(name, pretrained=False)
    channels, height, width = model.pretrained_cfg.get("input_size", (3, 224, 224))
    if size is None:
        size = _smallest_working(model, channels, (height, width))
    shape = (BATCH, channels, *((size, size) if isinstance(size, int) else size))
    return Built(
        model,
        lambda: {"x": torch.randn(*shape)},
        lambda reentrant, m=model: _enable(m, reentrant),
        f"{type(model).__module__}.{type(model).__qualname__}",
        name,
        {"input_shape": list(shape), "parameters": sum(p.numel() for p in model.parameters())},
    )


def _smallest_working(model: torch.nn.Module, channels: int, default: tuple[int, int]) -> Any:
    """64x64 when the model accepts it (a no-grad eval forward of a copy, so that lazily built
    state of the model itself stays as built), else its default size."""
    if max(default) <= SMALL_IMAGE:
        return default
    trial = copy.deepcopy(model).eval()
    try:
        with torch.no_grad():
            trial(torch.randn(1, channels, SMALL_IMAGE, SMALL_IMAGE))
        return SMALL_IMAGE
    except Exception:  # noqa: BLE001
        return default


def _enable(model: Any, reentrant: bool) -> None:
    from timm.layers import set_reentrant_ckpt

    set_reentrant_ckpt(reentrant)
    model.set_grad_checkpointing(True)
