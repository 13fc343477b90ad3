"""`ConvModule`: a conv, then a norm when `norm_cfg` is given, then an activation when `act_cfg`
is (mmcv's default order); `DepthwiseSeparableConvModule`: two of them (a stub:
ckptlint/stubs/__init__.py)."""
import torch.nn as nn

from .activation import build_activation_layer
from .conv import build_conv_layer
from .norm import build_norm_layer


class ConvModule(nn.Module):
    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups=1,
        bias="auto",
        conv_cfg=None,
        norm_cfg=None,
        act_cfg=dict(type="ReLU"),
        inplace=True,
        with_spectral_norm=False,
        padding_mode="zeros",
        order=("conv", "norm", "act"),
    ):
        super().__init__()
        self.with_norm = norm_cfg is not None
        self.with_activation = act_cfg is not None
        self.conv = build_conv_layer(conv_cfg, in_channels, out_channels, kernel_size)
        if self.with_norm:
            self.norm_name, norm = build_norm_layer(norm_cfg, out_channels)
            self.add_module(self.norm_name, norm)
        if self.with_activation:
            self.activate = build_activation_layer(act_cfg)

    @property
    def norm(self):
        return getattr(self, self.norm_name)

    def forward(self, x, activate=True, norm=True):
        x = self.conv(x)
        if norm and self.with_norm:
            x = self.norm(x)
        if activate and self.with_activation:
            x = self.activate(x)
        return x


class DepthwiseSeparableConvModule(nn.Module):
    # mmcv lets `dw_norm_cfg`/`pw_norm_cfg` (and the act configs) replace `norm_cfg` per conv; the
    # stub passes `norm_cfg` to both, which is what their default ('default') means
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, norm_cfg=None, act_cfg=dict(type="ReLU"), **kwargs):
        super().__init__()
        self.depthwise_conv = ConvModule(in_channels, in_channels, kernel_size, norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.pointwise_conv = ConvModule(in_channels, out_channels, 1, norm_cfg=norm_cfg, act_cfg=act_cfg)

    def forward(self, x):
        x = self.depthwise_conv(x)
        x = self.pointwise_conv(x)
        return x
