"""mmpretrain (OpenMMLab): every backbone that takes `with_cp`, built through its registry from
its own defaults (`MODELS.build(dict(type=name, with_cp=True))`), with mmcv-lite and mmengine
from pip, on CPU. Its blocks call `torch.utils.checkpoint.checkpoint(_inner_forward, x)` without
`use_reentrant`, so torch's default (reentrant, with a warning) is the default mode; the opt-in
mode sets that default to False for the step (the keyword-only default of torch's function:
the companion intercepts below it, where both modes pass)."""

from __future__ import annotations

import copy
import inspect
from typing import Any

import torch

from realmodels.zoo_common import Built, torchvision_without_native_ops

BATCH = 2
SIZES = (64, 224)  # the first a no-grad forward accepts
MAX_PARAMETERS = 100_000_000


def _backbones() -> dict[str, type]:
    torchvision_without_native_ops()
    from mmpretrain.models import backbones

    return {name: cls for name, cls in sorted(vars(backbones).items()) if inspect.isclass(cls) and issubclass(cls, torch.nn.Module)}


def _build(name: str) -> torch.nn.Module:
    """The backbone with its defaults; a required `depth`/`arch` takes the first its table lists
    (ResNet 18, RegNet 'regnetx_400mf')."""
    from mmpretrain.registry import MODELS

    cls = _backbones()[name]
    config: dict[str, Any] = dict(type=name, with_cp=True)
    table = getattr(cls, "arch_settings", None) or getattr(cls, "arch_zoo", None) or {}
    for _ in range(2):
        try:
            model: torch.nn.Module = MODELS.build(config)
            return model
        except TypeError as exc:
            missing = next((r for r in ("depth", "arch") if f"argument: '{r}'" in str(exc)), None)
            if missing is None or not table:
                raise
            config[missing] = next(iter(table))
    raise TypeError(f"{name}: no default configuration builds")


def _checkpoints(model: torch.nn.Module) -> bool:
    return any(getattr(module, "with_cp", False) is True for module in model.modules())


def enumerate_models() -> list[dict[str, Any]]:
    """The backbones whose default build accepts `with_cp=True` and passes it to some block."""
    found = []
    for name, cls in _backbones().items():
        if "with_cp" not in str(inspect.signature(cls.__init__)) and "kwargs" not in str(inspect.signature(cls.__init__)):
            continue
        try:
            model = _build(name)  # on CPU: several compute drop-path rates with `.item()` on init
        except Exception:  # noqa: BLE001 - no with_cp, or no default configuration
            continue
        if _checkpoints(model):
            found.append({"name": name, "arch": f"{cls.__module__}.{cls.__qualname__}", "parameters": sum(p.numel() for p in model.parameters())})
    return found


def build(name: str) -> Built:
    _backbones()
    model = _build(name)
    count = sum(p.numel() for p in model.parameters())
    if count > MAX_PARAMETERS:
        raise MemoryError(f"too large: {count} parameters")
    size = _smallest_working(model)
    shape = (BATCH, 3, size, size)
    return Built(
        model,
        lambda: {"x": torch.randn(*shape)},
        _enable,
        f"{type(model).__module__}.{type(model).__qualname__}",
        name,
        {"input_shape": list(shape), "parameters": count},
    )


def _smallest_working(model: torch.nn.Module) -> int:
    """The first of SIZES a no-grad eval forward of a copy accepts (the model itself stays as built)."""
    trial = copy.deepcopy(model).eval()
    for size in SIZES:
        try:
            with torch.no_grad():
                trial(torch.randn(1, 3, size, size))
            return size
        except Exception:  # noqa: BLE001
            continue
    return SIZES[-1]


def _enable(reentrant: bool) -> None:
    """`with_cp=True` was set at build; the mode is torch's default for an omitted `use_reentrant`."""
    defaults = inspect.unwrap(torch.utils.checkpoint.checkpoint).__kwdefaults__  # under torch's dynamo-disabling wrapper
    assert defaults is not None and "use_reentrant" in defaults
    defaults["use_reentrant"] = reentrant
