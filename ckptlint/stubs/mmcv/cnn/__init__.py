"""mmcv.cnn's builders and bricks (a stub: ckptlint/stubs/__init__.py)."""
from .bricks import (
    ConvModule,
    DepthwiseSeparableConvModule,
    build_activation_layer,
    build_conv_layer,
    build_norm_layer,
)
