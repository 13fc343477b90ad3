"""diffusers: every exported model class with `_supports_gradient_checkpointing`, built from
its `__init__` defaults with sizes shrunk to tiny. Inputs (latents, timestep, text states, ...)
are named after the forward's parameters; where their shape is ambiguous (image-shaped or
packed-sequence latents) each candidate is tried in a no-grad forward of a copy of the model.
Reentrant mode: `enable_gradient_checkpointing(partial(torch checkpoint, use_reentrant=...))`,
so the checkpoint call is still made from diffusers' own code."""

from __future__ import annotations

import copy
import functools
import inspect
from typing import Any, Callable

import torch

from realmodels.zoo_common import Built

BATCH, SIZE, TOKENS, FRAMES = 2, 16, 8, 2
MAX_PARAMETERS = 40_000_000
_WIDTHS = {"cross_attention_dim", "joint_attention_dim", "caption_projection_dim", "pooled_projection_dim",
           "text_embed_dim", "caption_channels", "encoder_hid_dim", "text_dim", "hidden_size", "inner_dim",
           "embed_dim", "attention_dim", "time_embed_dim", "text_hidden_dim", "context_dim", "cond_dim",
           "encoder_hidden_size", "projection_dim", "addition_time_embed_dim"}  # fmt: skip
_LAYERS = {"num_layers", "num_single_layers", "layers_per_block", "transformer_layers_per_block", "num_res_blocks",
           "depth", "num_blocks", "num_refiner_layers", "num_encoder_layers", "num_decoder_layers"}  # fmt: skip


def enumerate_models() -> list[dict[str, Any]]:
    import diffusers

    found = []
    for name in sorted(dir(diffusers)):
        if name.startswith("_"):
            continue
        try:
            value = getattr(diffusers, name)
        except Exception as exc:  # noqa: BLE001 - a missing backend is recorded, not fatal
            found.append({"name": name, "arch": name, "skip": f"{type(exc).__name__}: {str(exc).strip()[:160]}"})
            continue
        if isinstance(value, type) and issubclass(value, diffusers.ModelMixin) and getattr(value, "_supports_gradient_checkpointing", False):
            found.append({"name": name, "arch": f"{value.__module__}.{value.__qualname__}"})
    return found


def shrink(defaults: dict[str, Any]) -> dict[str, Any]:
    values = dict(defaults)
    for key, value in defaults.items():
        if isinstance(value, bool) or value is None:
            continue
        if key == "block_out_channels" and isinstance(value, (tuple, list)):
            values[key] = tuple(32 for _ in value)
        elif key == "attention_head_dim":
            values[key] = tuple(8 for _ in value) if isinstance(value, (tuple, list)) else 8
        elif key == "num_attention_heads":
            values[key] = tuple(2 for _ in value) if isinstance(value, (tuple, list)) else 2
        elif key in _LAYERS:
            values[key] = tuple(1 for _ in value) if isinstance(value, (tuple, list)) else min(int(value), 1 if "block" in key else 2)
        elif key in _WIDTHS and isinstance(value, int):
            values[key] = min(value, 32)
        elif key == "sample_size" and isinstance(value, int):
            values[key] = min(value, SIZE)
        elif key == "axes_dims_rope" and isinstance(value, (tuple, list)):
            values[key] = (2, 2, 4)  # sums to the tiny head dim
    return values


def build(name: str) -> Built:
    import diffusers

    model_class = getattr(diffusers, name)
    defaults = {k: p.default for k, p in inspect.signature(model_class.__init__).parameters.items()
                if p.default is not inspect.Parameter.empty and k != "self"}  # fmt: skip
    errors = []
    for variant, kwargs in (("tiny", shrink(defaults)), ("default", {})):
        try:
            with torch.device("meta"):
                count = sum(p.numel() for p in model_class(**kwargs).parameters())
        except Exception as exc:  # noqa: BLE001 - try the next configuration
            errors.append(f"{variant}: {type(exc).__name__}: {str(exc).strip()[:200]}")
            continue
        if count > MAX_PARAMETERS:
            errors.append(f"{variant}: {count} parameters")
            continue
        model = model_class(**kwargs)
        make_inputs = _choose_inputs(model)
        return Built(model, make_inputs, lambda reentrant, m=model: _enable(m, reentrant),
                     f"{model_class.__module__}.{model_class.__qualname__}", variant, {"parameters": count})  # fmt: skip
    raise RuntimeError("no tiny configuration builds: " + "; ".join(errors))


def _enable(model: Any, reentrant: bool) -> None:
    model.enable_gradient_checkpointing(functools.partial(torch.utils.checkpoint.checkpoint, use_reentrant=reentrant))


def _config(model: Any, *keys: str, default: Any = None) -> Any:
    for key in keys:
        value = model.config.get(key) if hasattr(model.config, "get") else getattr(model.config, key, None)
        if value is not None:
            return value
    return default


def _candidates(model: Any) -> list[Callable[[], dict[str, Any]]]:
    parameters = inspect.signature(model.forward).parameters
    channels = int(_config(model, "in_channels", "latent_channels", "num_channels", default=4))
    width = int(_config(model, "cross_attention_dim", "joint_attention_dim", "caption_channels", "text_embed_dim",
                        "encoder_hid_dim", "text_dim", "context_dim", default=32))  # fmt: skip
    video = any(word in type(model).__name__ for word in ("3D", "Video", "Motion", "Temporal", "Wan", "Hunyuan", "Mochi", "LTX", "Cog", "Allegro", "Cosmos"))

    def shared() -> dict[str, Any]:
        inputs: dict[str, Any] = {}
        if "timestep" in parameters or "timesteps" in parameters:
            inputs["timestep" if "timestep" in parameters else "timesteps"] = torch.full((BATCH,), 10.0)
        if "encoder_hidden_states" in parameters:
            inputs["encoder_hidden_states"] = torch.randn(BATCH, TOKENS, width)
        if "pooled_projections" in parameters:
            inputs["pooled_projections"] = torch.randn(BATCH, int(_config(model, "pooled_projection_dim", default=32)))
        if "class_labels" in parameters and _config(model, "num_embeds_ada_norm", "num_class_embeds") is not None:
            inputs["class_labels"] = torch.randint(0, int(_config(model, "num_embeds_ada_norm", "num_class_embeds")), (BATCH,))
        if "guidance" in parameters and _config(model, "guidance_embeds"):
            inputs["guidance"] = torch.full((BATCH,), 3.5)
        if "txt_ids" in parameters:
            inputs["txt_ids"] = torch.zeros(TOKENS, 3)
        return inputs

    first = "sample" if "sample" in parameters else "hidden_states" if "hidden_states" in parameters else "x" if "x" in parameters else None
    if first is None:
        return []
    image = (BATCH, channels, FRAMES, SIZE, SIZE) if video else (BATCH, channels, SIZE, SIZE)
    shapes = [image, (BATCH, channels, SIZE, SIZE) if video else (BATCH, channels, FRAMES, SIZE, SIZE), (BATCH, SIZE, channels)]

    def make(shape: tuple[int, ...]) -> Callable[[], dict[str, Any]]:
        def inputs() -> dict[str, Any]:
            values = {first: torch.randn(*shape), **shared()}
            if "img_ids" in parameters:
                values["img_ids"] = torch.zeros(shape[1], 3)
            return values

        return inputs

    return [make(shape) for shape in shapes]


def _choose_inputs(model: Any) -> Callable[[], dict[str, Any]]:
    candidates = _candidates(model)
    errors = []
    for make_inputs in candidates:
        trial = copy.deepcopy(model).eval()
        try:
            with torch.no_grad():
                trial(**make_inputs())
            return make_inputs
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{type(exc).__name__}: {str(exc).strip()[:160]}")
    raise TypeError("no input shape works: " + " | ".join(errors) if errors else "no known latent input among the forward's parameters")
