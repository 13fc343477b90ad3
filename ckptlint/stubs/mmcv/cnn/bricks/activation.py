"""`build_activation_layer(cfg)`: the activation its `type` key names (a stub:
ckptlint/stubs/__init__.py)."""
import torch.nn as nn

ACTIVATION_LAYERS = {
    "ReLU": nn.ReLU,
    "LeakyReLU": nn.LeakyReLU,
    "PReLU": nn.PReLU,
    "RReLU": nn.RReLU,
    "ReLU6": nn.ReLU6,
    "ELU": nn.ELU,
    "Sigmoid": nn.Sigmoid,
    "Tanh": nn.Tanh,
    "GELU": nn.GELU,
    "SiLU": nn.SiLU,
    "Swish": nn.SiLU,
    "HSigmoid": nn.Hardsigmoid,
    "HSwish": nn.Hardswish,
}


def build_activation_layer(cfg):
    layer = ACTIVATION_LAYERS[cfg.get("type")]
    return layer()
