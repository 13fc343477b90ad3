"""`build_norm_layer(cfg, num_features, postfix)`: the norm its `type` key names, and the name
mmcv registers it under (`'bn1'` for `dict(type='BN')`, postfix 1). A stub that replaces mmcv's
own, whose registry lookup the analysis does not follow (ckptlint/stubs/__init__.py)."""
import torch.nn as nn

NORM_LAYERS = {
    "BN": nn.BatchNorm2d,
    "BN1d": nn.BatchNorm1d,
    "BN2d": nn.BatchNorm2d,
    "BN3d": nn.BatchNorm3d,
    "SyncBN": nn.SyncBatchNorm,
    "MMSyncBN": nn.SyncBatchNorm,
    "GN": nn.GroupNorm,
    "LN": nn.LayerNorm,
    "IN": nn.InstanceNorm2d,
    "IN1d": nn.InstanceNorm1d,
    "IN2d": nn.InstanceNorm2d,
    "IN3d": nn.InstanceNorm3d,
}

ABBREVIATIONS = {
    "BN": "bn",
    "BN1d": "bn",
    "BN2d": "bn",
    "BN3d": "bn",
    "SyncBN": "bn",
    "MMSyncBN": "bn",
    "GN": "gn",
    "LN": "ln",
    "IN": "in",
    "IN1d": "in",
    "IN2d": "in",
    "IN3d": "in",
}


def build_norm_layer(cfg, num_features, postfix=""):
    layer_type = cfg.get("type")
    norm_layer = NORM_LAYERS[layer_type]
    name = ABBREVIATIONS[layer_type] + str(postfix)
    layer = norm_layer(num_features)
    return name, layer
