"""mmcv.cnn.bricks (a stub: ckptlint/stubs/__init__.py)."""
from .activation import build_activation_layer
from .conv import build_conv_layer
from .conv_module import ConvModule, DepthwiseSeparableConvModule
from .norm import build_norm_layer
