"""Library stubs (ckptlint/stubs): OpenMMLab's `with_cp` blocks build their norms with mmcv's
`build_norm_layer` and `ConvModule`. The BatchNorm they build by default is found whether mmcv is
installed or not; a `dict(type='LN')` block or a `norm_cfg=None` ConvModule is not reported; and an
installed mmcv whose builders choose through a registry the analysis cannot follow is read through
the stub instead."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES
from test_libraries import fake_python

from ckptlint.config import Config
from ckptlint.engine import Linter
from ckptlint.project import Project
from ckptlint.stubs import OVERRIDING_STUBS, STUBS

HAZARDS = FIXTURES / "regions" / "hazards" / "openmmlab_with_cp_block.py"
SAFE = FIXTURES / "regions" / "safe" / "openmmlab_with_cp_block.py"
EXPECTED = [("CKP204", 35, 19), ("CKP204", 38, 19), ("CKP204", 57, 19)]

# an installed mmcv laid out as the real one: builders that look the type up in a registry
# switched in a `with` block, and a ConvModule whose forward takes a branch no default takes
INSTALLED_NORM = '''
from mmengine.registry import MODELS


def build_norm_layer(cfg, num_features, postfix=""):
    cfg_ = cfg.copy()
    layer_type = cfg_.pop("type")
    with MODELS.switch_scope_and_registry(None) as registry:
        norm_layer = registry.get(layer_type)
    name = infer_abbr(norm_layer) + str(postfix)
    return name, norm_layer(num_features, **cfg_)
'''
INSTALLED_CONV_MODULE = '''
import torch.nn as nn
from .norm import build_norm_layer


class ConvModule(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, norm_cfg=None, act_cfg=dict(type="ReLU"), efficient_conv_bn_eval=False):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.efficient_conv_bn_eval = efficient_conv_bn_eval
        self.norm_name, norm = build_norm_layer(norm_cfg, out_channels)
        self.add_module(self.norm_name, norm)

    def forward(self, x):
        if self.efficient_conv_bn_eval:
            del self.conv.forward
        return self.conv(x)
'''


def _installed_mmcv(site: Path) -> None:
    bricks = site / "mmcv" / "cnn" / "bricks"
    bricks.mkdir(parents=True)
    (site / "mmcv" / "__init__.py").write_text("")
    (site / "mmcv" / "cnn" / "__init__.py").write_text("from .bricks import ConvModule, build_conv_layer, build_norm_layer\n")
    (bricks / "__init__.py").write_text("from .conv import build_conv_layer\nfrom .conv_module import ConvModule\nfrom .norm import build_norm_layer\n")
    (bricks / "conv.py").write_text("from mmengine.registry import MODELS\n\n\ndef build_conv_layer(cfg, *args, **kwargs):\n    return MODELS.build(cfg)\n")
    (bricks / "norm.py").write_text(INSTALLED_NORM)
    (bricks / "conv_module.py").write_text(INSTALLED_CONV_MODULE)


def _lint(tmp_path: Path, source: Path, site: Path | None) -> list[tuple[str, int, int]]:
    root = tmp_path / "project"
    root.mkdir(exist_ok=True)
    shutil.copy(source, root / "blocks.py")
    config = "[tool.ckptlint]\n"
    if site is not None:
        config += f'python = "{fake_python(tmp_path / "env" / "bin", "", site)}"\n'
    (root / "pyproject.toml").write_text(config)
    from ckptlint.config import load_config

    linter = Linter(load_config(root / "pyproject.toml", root), base=root, jobs=1)
    result = linter.lint_files([root / "blocks.py"], project_root=root)
    return [(f.code, f.line, f.column) for f in result.findings]


def _site(tmp_path: Path, installed: bool) -> Path | None:
    """A site-packages holding the installed-mmcv look-alike, or None for no mmcv at all."""
    if not installed:
        return None
    site = tmp_path / "env" / "lib" / "site-packages"
    _installed_mmcv(site)
    return site


@pytest.mark.parametrize("installed", [False, True], ids=["mmcv-not-installed", "mmcv-installed"])
def test_the_default_batchnorm_of_openmmlab_blocks_is_found(tmp_path: Path, installed: bool) -> None:
    assert _lint(tmp_path, HAZARDS, _site(tmp_path, installed)) == EXPECTED


@pytest.mark.parametrize("installed", [False, True], ids=["mmcv-not-installed", "mmcv-installed"])
def test_layernorm_groupnorm_and_no_norm_blocks_are_not_reported(tmp_path: Path, installed: bool) -> None:
    assert _lint(tmp_path, SAFE, _site(tmp_path, installed)) == []


def test_a_stub_answers_only_for_what_is_not_installed_unless_it_overrides(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    _installed_mmcv(site)
    project = Project([tmp_path / "project"], libraries=[site])
    assert project.module_path("mmcv.cnn") == site / "mmcv" / "cnn" / "__init__.py"  # the installed package
    assert project.module_path("mmcv.cnn.bricks.norm") == STUBS / "mmcv" / "cnn" / "bricks" / "norm.py"  # overridden
    bare = Project([tmp_path / "project"], libraries=[])
    assert bare.module_path("mmcv.cnn") == STUBS / "mmcv" / "cnn" / "__init__.py"
    assert bare.module_path("mmengine.model") == STUBS / "mmengine" / "model" / "__init__.py"


def test_every_overriding_stub_exists() -> None:
    for name in OVERRIDING_STUBS:
        assert STUBS.joinpath(*name.split(".")).with_suffix(".py").is_file(), name


def test_a_hazard_in_a_stub_is_reported_at_the_project_line_with_the_chain_into_it(tmp_path: Path) -> None:
    """A stub is library code: the ConvModule's BatchNorm is reported at the block's call of it,
    naming the stub's line in the chain, never at a path inside ckptlint/stubs."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(HAZARDS, root / "blocks.py")
    (root / "pyproject.toml").write_text("[tool.ckptlint]\n")
    result = Linter(Config(root=root), base=root, jobs=1).lint_files([root / "blocks.py"], project_root=root)
    assert {f.path for f in result.findings} == {"blocks.py"}
    through_stub = [f for f in result.findings if f.line == 57]
    assert len(through_stub) == 1 and "ConvModule.forward (mmcv/cnn/bricks/conv_module.py:" in through_stub[0].message


def test_a_package_linted_inside_site_packages_reads_its_neighbours_through_the_stubs(tmp_path: Path) -> None:
    """Linting an installed mmpretrain makes site-packages its import root, so mmcv beside it
    resolves as if it were project code; it is still installed code, and the stub overrides it
    (the real-model corpus's mmpretrain backbones: every `with_cp` BatchNorm was missed)."""
    site = tmp_path / "env" / "lib" / "site-packages"
    _installed_mmcv(site)
    package = site / "zoo"
    package.mkdir()
    (package / "__init__.py").write_text("")
    shutil.copy(HAZARDS, package / "blocks.py")
    python = fake_python(tmp_path / "env" / "bin", "", site)
    (tmp_path / "ckptlint.toml").write_text(f'python = "{python}"\nexclude = ["__pycache__"]\n')  # as the corpus lints: site-packages not excluded
    from ckptlint.config import load_config

    linter = Linter(load_config(tmp_path / "ckptlint.toml", package), base=package, jobs=1)
    result = linter.lint_files([package / "blocks.py"])
    assert [(f.code, f.line, f.column) for f in result.findings] == EXPECTED


def test_registrations_by_call_give_each_key_its_class() -> None:
    import ast

    from ckptlint.analysis.semantics.registries import call_registrations
    from ckptlint.source import SourceFile
    from ckptlint.symbols import ModuleSymbols

    source = """
import torch.nn as nn
from .registry import NORM_LAYERS

NORM_LAYERS.register_module('BN', module=nn.BatchNorm2d)
NORM_LAYERS.register_module(name=['BN2d', 'BatchNorm2d'], module=nn.BatchNorm2d)
if HAS_SYNC:
    NORM_LAYERS.register_module('SyncBN', module=nn.SyncBatchNorm)
NORM_LAYERS.register_module('GN')(nn.GroupNorm)


def later():
    NORM_LAYERS.register_module('IN', module=nn.InstanceNorm2d)
"""
    module = ModuleSymbols("m", SourceFile("m.py", "m.py", source), ast.parse(source))
    found = [(ast.unparse(registry), key, ast.unparse(registered)) for registry, key, registered in call_registrations(module)]
    assert found == [
        ("NORM_LAYERS", "BN", "nn.BatchNorm2d"),
        ("NORM_LAYERS", "BN2d", "nn.BatchNorm2d"),
        ("NORM_LAYERS", "BatchNorm2d", "nn.BatchNorm2d"),
        ("NORM_LAYERS", "SyncBN", "nn.SyncBatchNorm"),
    ]  # not a decorator call applied to a class, nor a registration run only when a function is called
