"""What ckptlint reads for a library's builders when it cannot read the library itself.

As type checkers ship stubs, ckptlint ships small Python modules that say what the builders of
common model zoos build, for each configuration key: OpenMMLab's `build_norm_layer(dict(type='BN'),
c)` returns `('bn1', nn.BatchNorm2d(c))`, its `ConvModule` runs a conv, a norm and an activation.
The analysis reads them as library code (never reported in, never imported): where the library is
not installed at all, and, for the modules in OVERRIDING_STUBS, also where it is, because the
installed code chooses through machinery the analysis does not follow (a registry switched in a
`with` block). Each stub is written from the library's documented behaviour, not copied.
"""

from __future__ import annotations

from pathlib import Path

STUBS = Path(__file__).resolve().parent

# dotted module names whose stub is read even when the library is installed
OVERRIDING_STUBS = frozenset(
    {
        "mmcv.cnn.bricks.norm",  # build_norm_layer: `MODELS.switch_scope_and_registry(None)` then `registry.get(type)`
        "mmcv.cnn.bricks.conv",  # build_conv_layer: the same registry switch
        "mmcv.cnn.bricks.activation",  # build_activation_layer: the same
        # ConvModule: its forward branches on padding, spectral-norm and efficient-eval options whose
        # builders go through the same registry (a `del self.conv.forward` path no default takes)
        "mmcv.cnn.bricks.conv_module",
    }
)
