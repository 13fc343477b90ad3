"""Hugging Face transformers: every model type whose base model class supports gradient
checkpointing, built from its configuration class's defaults with every size shrunk to tiny,
random weights, no download. Inputs are chosen by the forward's parameter names."""

from __future__ import annotations

import copy
import inspect
from typing import Any, Callable

import torch

from realmodels.zoo_common import Built

MAX_PARAMETERS = 80_000_000  # a tiny build larger than this means the shrink missed a size

_LAYERS = {"num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
           "num_encoder_layers", "num_decoder_layers", "depth", "num_blocks", "text_layers", "vision_layers",
           "num_text_layers", "num_vision_layers", "audio_layers", "num_decoder_layer", "n_layers_decoder"}  # fmt: skip
_WIDTH = {"hidden_size", "d_model", "n_embd", "embed_dim", "dim", "word_embed_proj_dim", "projection_dim",
          "text_embed_dim", "vision_embed_dim", "encoder_hidden_size", "decoder_hidden_size", "n_embed",
          "embedding_size", "d_embed", "hidden_dim", "model_dim"}  # fmt: skip
_HEADS = {"num_attention_heads", "n_head", "num_heads", "encoder_attention_heads", "decoder_attention_heads",
          "n_heads", "num_attention_heads_text", "decoder_num_attention_heads"}  # fmt: skip
_KV_HEADS = {"num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num", "n_head_kv"}
_HEAD_DIM = {"head_dim", "d_kv", "attention_head_dim", "kv_channels", "qk_nope_head_dim", "v_head_dim", "qk_head_dim"}
_FFN = {"intermediate_size", "d_ff", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "n_inner", "moe_intermediate_size",
        "shared_expert_intermediate_size", "ffn_hidden_size", "mlp_dim", "decoder_intermediate_size",
        "encoder_intermediate_size", "feed_forward_size", "dim_feedforward"}  # fmt: skip
_EXPERTS = {"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_experts_total"}
_EXPERTS_PER_TOKEN = {"num_experts_per_tok", "moe_topk", "top_k", "num_selected_experts", "moe_k"}
_DERIVED_LISTS = {"layer_types", "mlp_only_layers", "layers_block_type", "attention_layers", "block_types",
                  "sliding_window_pattern", "no_rope_layers", "full_attention_idxs", "layer_type"}  # fmt: skip

TINY_WIDTH, TINY_HEADS, TINY_KV_HEADS, TINY_HEAD_DIM, TINY_FFN = 64, 4, 2, 16, 128
BATCH, SEQUENCE = 2, 16


def enumerate_models() -> list[dict[str, Any]]:
    """One entry per model type with a base model class that supports gradient checkpointing."""
    import transformers
    from transformers.models.auto import modeling_auto

    found = []
    for model_type, class_name in sorted(modeling_auto.MODEL_MAPPING_NAMES.items()):
        if isinstance(class_name, (tuple, list)):
            class_name = class_name[0]
        try:
            model_class = getattr(transformers, class_name)
            supported = bool(getattr(model_class, "supports_gradient_checkpointing", False))
        except Exception as exc:  # noqa: BLE001 - a missing backend is recorded, not fatal
            found.append({"name": model_type, "arch": class_name, "skip": f"{type(exc).__name__}: {str(exc).strip()[:160]}"})
            continue
        if supported:
            found.append({"name": model_type, "arch": f"{model_class.__module__}.{class_name}"})
    return found


def _special_ids(values: dict[str, Any]) -> list[int]:
    return [v for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool) and (k.endswith("_token_id") or k.endswith("_token_index") or k.endswith("_id") and "token" in k)]


def shrink(values: dict[str, Any]) -> dict[str, Any]:
    """Every size in a configuration dictionary made tiny; nested configurations too."""
    result: dict[str, Any] = {}
    layers = [v for k, v in values.items() if k in _LAYERS and isinstance(v, int) and not isinstance(v, bool) and v > 2]
    for key, value in values.items():
        if isinstance(value, (list, tuple)) and layers and len(value) in layers and key != "depths":
            continue  # a per-layer list (layer types, mlp types): recomputed from the new layer count
        if key.endswith("layer_types") or key in ("out_features", "out_indices"):
            continue  # derived from the layer count, or naming stages a tiny backbone no longer has
        if isinstance(value, dict) and ("model_type" in value or key.endswith("_config") or key in ("encoder", "decoder")):
            result[key] = shrink(value)
            continue
        if key in _DERIVED_LISTS:
            continue  # recomputed by the configuration from the (new) layer count
        if isinstance(value, bool) or not isinstance(value, int):
            if key == "depths" and isinstance(value, (list, tuple)):
                result[key] = [1 for _ in value]
                continue
            result[key] = value
            continue
        if key in _LAYERS:
            result[key] = min(value, 2)
        elif key in _WIDTH:
            result[key] = min(value, TINY_WIDTH)
        elif key in _HEADS:
            result[key] = min(value, TINY_HEADS)
        elif key in _KV_HEADS:
            result[key] = min(value, TINY_KV_HEADS)
        elif key in _HEAD_DIM:
            result[key] = min(value, TINY_HEAD_DIM)
        elif key in _FFN:
            result[key] = min(value, TINY_FFN)
        elif key in _EXPERTS:
            result[key] = min(value, 4)
        elif key in _EXPERTS_PER_TOKEN:
            result[key] = min(value, 2)
        elif key == "vocab_size":
            result[key] = max([min(value, 1024), *(i + 1 for i in _special_ids(values))])
        else:
            result[key] = value
    return result


def _configurations(model_type: str) -> list[tuple[str, Any]]:
    """(variant, configuration or the exception that building it raised), tiniest first."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config_class = CONFIG_MAPPING[model_type]
    default = config_class()
    values = {k: v for k, v in default.to_dict().items() if k not in ("transformers_version", "architectures", "model_type")}
    candidates: list[tuple[str, Any]] = []
    try:
        candidates.append(("tiny", config_class(**shrink(values))))
    except Exception as exc:  # noqa: BLE001 - some configurations validate sizes together; fall back
        candidates.append(("tiny", exc))
    try:
        candidates.append(("tiny-for_model", AutoConfig.for_model(model_type, **{k: v for k, v in shrink(values).items() if not isinstance(v, dict)})))
    except Exception as exc:  # noqa: BLE001
        candidates.append(("tiny-for_model", exc))
    candidates.append(("default", default))
    return candidates


def _parameter_count(model_class: Any, config: Any) -> int:
    with torch.device("meta"):
        model = model_class(config)
    return sum(p.numel() for p in model.parameters())


def build(model_type: str) -> Built:
    import transformers
    from transformers.models.auto import modeling_auto

    class_name = modeling_auto.MODEL_MAPPING_NAMES[model_type]
    if isinstance(class_name, (tuple, list)):
        class_name = class_name[0]
    model_class = getattr(transformers, class_name)
    errors = []
    for variant, config in _configurations(model_type):
        if isinstance(config, Exception):
            errors.append(f"{variant} configuration: {type(config).__name__}: {' '.join(str(config).split())[:200]}")
            continue
        try:
            count = _parameter_count(model_class, config)
        except Exception as exc:  # noqa: BLE001 - try the next configuration
            errors.append(f"{variant}: {type(exc).__name__}: {str(exc).strip()[:200]}")
            continue
        if count > MAX_PARAMETERS:
            errors.append(f"{variant}: {count} parameters")
            continue
        model = model_class(config)
        return Built(model, _choose_inputs(model), lambda reentrant, m=model: _enable(m, reentrant),
                     f"{model_class.__module__}.{class_name}", variant, {"parameters": count})  # fmt: skip
    raise RuntimeError("no tiny configuration builds: " + "; ".join(errors))


def _enable(model: Any, reentrant: bool) -> None:
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})


def _sub(config: Any, *names: str) -> Any:
    for name in names:
        sub = getattr(config, name, None)
        if sub is not None:
            return sub
    return config


def _image(config: Any) -> torch.Tensor:
    vision = _sub(config, "vision_config", "backbone_config")
    size = getattr(vision, "image_size", None) or getattr(config, "image_size", 224)
    if isinstance(size, (list, tuple)):
        height, width = int(size[0]), int(size[-1])
    else:
        height = width = int(size)
    channels = getattr(vision, "num_channels", None) or getattr(config, "num_channels", 3)
    return torch.randn(BATCH, int(channels), height, width)


def _input_sets(model: Any) -> list[dict[str, Any]]:
    """Candidate inputs named after the forward's parameters: text, text and image (dual
    encoders), image, audio, seq2seq, embeddings."""
    config = model.config
    parameters = inspect.signature(model.forward).parameters
    text = _sub(config, "text_config", "decoder")
    vocab = int(getattr(text, "vocab_size", None) or getattr(config, "vocab_size", 100) or 100)
    ids = torch.randint(3, max(4, min(vocab, 1000)), (BATCH, SEQUENCE))
    seq2seq = "decoder_input_ids" in parameters and bool(getattr(config, "is_encoder_decoder", False))
    decoder = {"decoder_input_ids": ids} if seq2seq else {}
    sets: list[dict[str, Any]] = []
    if "input_ids" in parameters:
        sets.append({"input_ids": ids, **decoder})
        if "pixel_values" in parameters:
            sets.append({"input_ids": ids, "pixel_values": _image(config), **decoder})
    if "pixel_values" in parameters:
        sets.append({"pixel_values": _image(config)})
    if "input_values" in parameters:
        sets.append({"input_values": torch.randn(BATCH, 16000)})
    if "input_features" in parameters:
        bins = getattr(config, "num_mel_bins", None) or getattr(config, "feature_size", 80)
        frames = 2 * int(getattr(config, "max_source_positions", 1500) or 1500)
        sets.append({"input_features": torch.randn(BATCH, int(bins), frames), **({"decoder_input_ids": ids} if "decoder_input_ids" in parameters else {})})
    if "inputs_embeds" in parameters:
        sets.append({"inputs_embeds": torch.randn(BATCH, SEQUENCE, int(getattr(config, "hidden_size", TINY_WIDTH))), **decoder})
    return sets


def _choose_inputs(model: Any) -> Callable[[], dict[str, Any]]:
    """The first candidate a no-grad eval forward of a copy accepts (the copy keeps any lazily
    built state out of the model under test); the inputs are drawn afresh for the real step."""
    errors = []
    for index, inputs in enumerate(_input_sets(model)):
        trial = copy.deepcopy(model).eval()
        try:
            with torch.no_grad():
                trial(**inputs)
        except Exception as exc:  # noqa: BLE001 - try the next candidate
            errors.append(f"{'+'.join(inputs)}: {type(exc).__name__}: {str(exc).strip()[:160]}")
            continue
        return lambda m=model, i=index: _input_sets(m)[i]
    raise TypeError("no input set works: " + " | ".join(errors) if errors else "no known input among the forward's parameters")
