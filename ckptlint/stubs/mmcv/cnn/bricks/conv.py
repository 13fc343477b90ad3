"""`build_conv_layer(cfg, *args, **kwargs)`: `nn.Conv2d` when `cfg` is None (a stub:
ckptlint/stubs/__init__.py)."""
import torch.nn as nn

CONV_LAYERS = {"Conv1d": nn.Conv1d, "Conv2d": nn.Conv2d, "Conv3d": nn.Conv3d, "Conv": nn.Conv2d}


def build_conv_layer(cfg, *args, **kwargs):
    if cfg is None:
        return nn.Conv2d(*args, **kwargs)
    layer = CONV_LAYERS[cfg.get("type")]
    return layer(*args, **kwargs)
