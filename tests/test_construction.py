"""Module construction (builders, registries, factories, wrappers): what the messages say,
what a literal key narrows, and where flow sensitivity stops."""

from __future__ import annotations

from pathlib import Path

from conftest import FIXTURES, lint_fixture

from ckptlint.config import load_config
from ckptlint.engine import Linter, lint_source

HAZARDS = FIXTURES / "regions" / "hazards"


def _lint(path: Path):
    return lint_fixture(path)


def test_over_approximated_module_is_named_in_the_message() -> None:
    [finding] = _lint(HAZARDS / "builder_stage_definitions.py").findings
    assert finding.code == "CKP204" and finding.line == 14
    assert finding.summary.endswith("(for `self.blocks` built by `StageBuilder._make_block`)")


def test_registry_object_with_unknown_config_is_named_in_the_message() -> None:
    [finding] = _lint(HAZARDS / "registry_class_build.py").findings
    assert finding.summary.endswith("(for `self.block` built by `BLOCKS.build`)")


def test_exactly_known_modules_carry_no_note() -> None:
    [finding] = _lint(HAZARDS / "norm_registry_config.py").findings
    assert "built by" not in finding.message


REGISTRY = """
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

NORMS = {{"BN": nn.BatchNorm1d, "LN": nn.LayerNorm, "GN": nn.GroupNorm}}


def build_norm(cfg, width):
    return NORMS[cfg["type"]](width)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.norm = build_norm(cfg, 8)

    def forward(self, x):
        return self.norm(x)


def run(x, cfg):
    return checkpoint(Block({argument}), x, use_reentrant=False)
"""


def test_literal_registry_key_builds_only_that_class() -> None:
    assert lint_source(REGISTRY.format(argument='dict(type="LN")')) == []
    assert lint_source(REGISTRY.format(argument='{"type": "GN"}')) == []
    [bn] = lint_source(REGISTRY.format(argument='dict(type="BN")'))
    assert (bn.code, bn.line) == ("CKP204", 19) and "built by" not in bn.message


def test_unknown_registry_key_builds_every_class_and_says_so() -> None:
    [finding] = lint_source(REGISTRY.format(argument="cfg"))
    assert (finding.code, finding.line) == ("CKP204", 19)
    assert "(for `self.norm` built by `build_norm`)" in finding.message


BRANCHED = """
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Counter(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.inner(x)


def step(x, wrap):
    model = nn.Linear(4, 4)
{rebinding}
    return checkpoint(model, x, use_reentrant=False)
"""


def test_rebinding_under_a_branch_keeps_every_binding() -> None:
    [finding] = lint_source(BRANCHED.format(rebinding="    if wrap:\n        model = Counter(model)"))
    assert (finding.code, finding.line) == ("CKP203", 14)


def test_rebinding_after_the_call_is_not_the_region() -> None:
    source = BRANCHED.replace("    return checkpoint(model, x, use_reentrant=False)\n", "    y = checkpoint(model, x, use_reentrant=False)\n    model = Counter(model)\n    return model(y)\n")
    assert lint_source(source.format(rebinding="")) == []
    straight = BRANCHED.format(rebinding="    model = Counter(model)")
    assert [(f.code, f.line) for f in lint_source(straight)] == [("CKP203", 14)]


def test_wrapper_parameter_region_follows_every_call_in_the_module() -> None:
    source = """
import random
from torch.utils.checkpoint import checkpoint


def noisy(x):
    return x * random.random()


def quiet(x):
    return x


def run_checkpointed(fn, x):
    return checkpoint(fn, x, use_reentrant=False)


def step(x):
    return run_checkpointed(quiet, run_checkpointed(noisy, x))
"""
    [finding] = lint_source(source)
    assert (finding.code, finding.line) == ("CKP201", 7)
    assert [s.line for s in finding.sites] == [15]


UNPACKED = """
import json
from torch import nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, width, norm_layer=nn.BatchNorm1d):
        super().__init__()
        self.norm = norm_layer(width)

    def forward(self, x):
        return self.norm(x)


def tweak(args):
    pass


def build(width, deep, text):
{filling}
    return Block(**ba)


def run(x, text):
    return checkpoint(build(8, True, text), x, use_reentrant=False)
"""

UNPACKED_KNOWN = {
    "item": 'ba = dict(width=width)\nba["norm_layer"] = nn.LayerNorm',
    "dict call": "ba = dict(width=width, norm_layer=nn.LayerNorm)",
    "literal": 'ba = {"width": width, "norm_layer": nn.LayerNorm}',
    "update keywords": "ba = {}\nba.update(width=width, norm_layer=nn.LayerNorm)",
    "update literal": 'ba = dict(width=width)\nba.update({"norm_layer": nn.LayerNorm})',
    "unknown start": 'ba = dict(json.loads(text))\nba["width"] = width\nba["norm_layer"] = nn.LayerNorm',
    "read and logged": 'ba = dict(width=width, norm_layer=nn.LayerNorm)\nif "width" in ba and ba.get("deep"):\n    print("{}".format(str(ba)))',
}

UNPACKED_DEFAULT_MAY_STAY = {
    "never set": 'ba = dict(width=width)\nba["act_layer"] = nn.GELU',
    "set under a branch": 'ba = dict(width=width)\nif deep:\n    ba["norm_layer"] = nn.LayerNorm',
    "popped under a branch": 'ba = dict(width=width, norm_layer=nn.LayerNorm)\nif deep:\n    ba.pop("norm_layer")',
    "other value under a branch": 'ba = dict(width=width, norm_layer=nn.LayerNorm)\nif deep:\n    ba["norm_layer"] = nn.BatchNorm1d',
    "passed to a call": 'ba = dict(width=width, norm_layer=nn.LayerNorm)\ntweak(ba)',
    "computed key": 'ba = dict(width=width, norm_layer=nn.LayerNorm)\nba[text] = None',
    "unknown mapping merged": 'ba = dict(width=width, norm_layer=nn.LayerNorm)\nba.update(json.loads(text))',
}


def _unpacked(filling: str) -> str:
    return UNPACKED.format(filling="\n".join("    " + line for line in filling.splitlines()))


def test_keys_written_into_an_unpacked_dict_are_passed() -> None:
    for name, filling in UNPACKED_KNOWN.items():
        assert lint_source(_unpacked(filling)) == [], name


def test_unpacked_dict_that_may_miss_the_key_keeps_the_default() -> None:
    for name, filling in UNPACKED_DEFAULT_MAY_STAY.items():
        assert [(f.code, f.line) for f in lint_source(_unpacked(filling))] == [("CKP204", 13)], name


def test_rebinding_under_a_later_branch_is_not_the_region() -> None:
    """A binding after the call, even under a branch, cannot be what the call wraps."""
    source = BRANCHED.replace("    return checkpoint(model, x, use_reentrant=False)\n",
                              "    y = checkpoint(model, x, use_reentrant=False)\n    if wrap:\n        model = Counter(model)\n    return model(y)\n")  # fmt: skip
    assert lint_source(source.format(rebinding="")) == []


def test_builder_returning_none_for_the_default_builds_nothing() -> None:
    """`get_norm_layer(None)` returns at its first test: its table's BatchNorm is not built."""
    assert _lint(FIXTURES / "regions" / "safe" / "norm_builder_none_default.py").findings == []
    [finding] = _lint(HAZARDS / "norm_builder_none_default.py").findings
    assert (finding.code, finding.line, finding.column) == ("CKP204", 23, 16)
    assert "BatchNorm1d" in finding.message and "built by" not in finding.message


# a builder (not a module) whose blocks take the norm its constructor was given, and a model that builds one
BUILDER = '''
from torch import nn


def norm_of(norm_layer):
    if norm_layer is None:
        return None
    return norm_layer


class Block(nn.Module):
    def __init__(self, norm_layer):
        super().__init__()
        self.norm = norm_of(norm_layer)(4)

    def forward(self, x):
        return self.norm(x)


class Builder:
    def __init__(self, norm_layer=None):
        self.norm_layer = norm_layer

    def block(self):
        return Block(self.norm_layer)
'''
BUILT_MODEL = '''
from torch import nn
from torch.utils.checkpoint import checkpoint

from pkg.builder import Builder


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Builder({arguments}).block()

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False)
'''


def builder_package(root: Path, arguments: str = "") -> Path:
    """`pkg/` under `root`: the builder's module, and a model that builds it with `arguments`."""
    package = root / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "builder.py").write_text(BUILDER)
    (package / "model.py").write_text(BUILT_MODEL.format(arguments=arguments))
    return package


def test_a_constructor_argument_passed_in_another_module_counts() -> None:
    """`Builder(norm_layer=nn.BatchNorm2d)` in the model's module is what the builder's module
    sees, not only its `norm_layer=None` default (timm's EfficientNetBuilder)."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "pyproject.toml").write_text("")
        builder_package(root, "norm_layer=nn.BatchNorm2d")
        result = Linter(load_config(None, root), base=root).lint_paths([root], project_root=root)
        assert [(f.path, f.code, f.line) for f in result.findings] == [("pkg/builder.py", "CKP204", 17)]


def test_the_files_beside_a_builder_that_are_read_are_those_whose_code_names_it_and_its_module(tmp_path: Path) -> None:
    """A file beside the builder's module is read for its constructor sites when its code (its
    strings too, not its comments) spells the class and the module as whole words; the files
    read are the model's dependencies. Bytes that hold both only in a comment or inside longer
    words are passed over before their words are split."""
    from test_cache import _dependencies

    (tmp_path / "pyproject.toml").write_text("")
    package = builder_package(tmp_path)
    (package / "named.py").write_text("from pkg.builder import Builder\n\nBUILT = Builder()\n")
    (package / "commented.py").write_text("# Builder, from pkg.builder\nx = 1\n")
    (package / "longer.py").write_text("from pkg import builder_utils\n\nBuilderish = builder_utils\n")
    (package / "quoted.py").write_text('NOTE = "see Builder in builder.py"\n')
    (model,) = _dependencies(tmp_path, ["pkg/model.py"])
    assert model == {"model.py", "builder.py", "named.py", "quoted.py"}


GUARDED = """
from torch import nn
from torch.utils.checkpoint import checkpoint


class Cache:
    def update(self, x):
        self.x = x


class Attention(nn.Module):
    def forward(self, x, cache=None):
        if cache is not None:
            cache.update(x)
        return x


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()

    def forward(self, x, cache=None):
        return checkpoint(self.attn, x, {cache}, use_reentrant=False)
"""


def test_a_finding_under_an_optional_argument_says_what_the_call_must_pass() -> None:
    """Hugging Face layers update a cache only when one is passed (checkpointed training passes none)."""
    [finding] = lint_source(GUARDED.format(cache="cache"))
    assert (finding.code, finding.line) == ("CKP203", 14)
    assert finding.summary.endswith("the replay does it again (only when `cache` is not None)")


def test_an_argument_known_to_be_given_carries_no_condition() -> None:
    given = GUARDED.replace("return checkpoint(self.attn, x, {cache}, use_reentrant=False)",
                            "return checkpoint(self.step, x, use_reentrant=False)\n\n    def step(self, x):\n        return self.attn(x, self.cache)")
    given = given.replace("self.attn = Attention()", "self.attn = Attention()\n        self.cache = Cache()")  # fmt: skip
    [finding] = lint_source(given)
    assert (finding.code, finding.line) == ("CKP203", 14)
    assert "only when" not in finding.message
    assert lint_source(GUARDED.format(cache="None")) == []


def test_a_test_on_a_value_the_function_rebinds_from_unknown_code_is_not_decided() -> None:
    """`norm = resolve(norm)` with `resolve` unknown: `if norm is None: return None` may not run."""
    source = """
from torch import nn
from torch.utils.checkpoint import checkpoint
from elsewhere import resolve


def get_norm(norm=None):
    norm = resolve(norm)
    if norm is None:
        return None
    return nn.BatchNorm1d


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = (get_norm() or nn.LayerNorm)(4)

    def forward(self, x):
        return checkpoint(self.norm, x, use_reentrant=False)
"""
    [finding] = lint_source(source)
    assert finding.code == "CKP204"


HELPER_METHOD = """
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.{norm}(8)

    def forward(self, x):
        return self.norm(x)


class Hybrid(nn.Module):
    def __init__(self, mixer):
        super().__init__()
        self.mixer = mixer

    def forward(self, x):
        return self.mixer(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        mixers = iter([Mixer(), Mixer()])
        self.layers = nn.ModuleList(self.get_layers(mixers))

    def get_layers(self, mixers):
        return [Hybrid(next(mixers)), Hybrid(next(mixers))]

    def forward(self, x):
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=False)
        return x
"""


def test_a_helper_method_parameter_holds_what_the_class_passes_it() -> None:
    """transformers' Zamba2 builds its hybrid layers in `get_layers(blocks, linears, mamba_layers)`
    from `next(mamba_layers)` over `iter([...])`: the layers hold the modules the class made."""
    [finding] = lint_source(HELPER_METHOD.format(norm="BatchNorm1d"))
    assert (finding.code, finding.line, finding.column) == ("CKP204", 13, 16)
    assert lint_source(HELPER_METHOD.format(norm="LayerNorm")) == []


def test_a_builders_sites_are_those_beside_it_whatever_was_analysed_before(tmp_path: Path) -> None:
    """A builder's constructor sites come from the modules beside it that use it, never from
    whatever modules the worker loaded for earlier files: `other/user.py` (another directory)
    building `Builder(norm_layer=nn.BatchNorm2d)` gave `pkg/model.py`'s region a BatchNorm only
    when the worker happened to have analysed `user.py` first (timm's efficientformer_v2 gained
    a site from mobilenetv5's builder configuration, depending on `-j`)."""
    model = BUILT_MODEL.format(arguments="")
    user = "from torch import nn\n\nfrom pkg.builder import Builder\n\nBLOCK = Builder(norm_layer=nn.BatchNorm2d).block()\n"
    (tmp_path / "pyproject.toml").write_text("")
    for folder, files in {"pkg": {"builder.py": BUILDER, "model.py": model}, "other": {"user.py": user}}.items():
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
        for name, text in files.items():
            (tmp_path / folder / name).write_text(text)
    user_path, model_path = str(tmp_path / "other" / "user.py"), str(tmp_path / "pkg" / "model.py")
    found = [_findings_after(tmp_path, order) for order in ([model_path], [user_path, model_path])]
    assert found == [[], []]


def _findings_after(root: Path, order: list[str]) -> list[tuple[str, str, int]]:
    """The last file's findings when one fresh worker analyses `order` in that order (with the
    names a whole run of `root` finds), as (path, code, line)."""
    from ckptlint.engine import worker
    from ckptlint.engine.run import Run
    from ckptlint.prefilter import Names

    linter = Linter(load_config(None, root), base=root, jobs=1)
    run = Run(linter, [str(path) for path in sorted(root.rglob("*.py"))], [])
    run.execute()
    worker.forget()
    try:
        outcomes, _ = worker.run_job(run.settings, Names.of(linter.catalogue), run.roots, order, [])
    finally:
        worker.forget()
    return [(f.path, f.code, f.line) for f in outcomes[-1].findings]


def test_a_builders_result_for_one_call_does_not_depend_on_the_calls_analysed_before(tmp_path: Path) -> None:
    """`norm(kind)` is evaluated with the key each call passes. A budget of such evaluations per
    function, spent by the 40 files a worker analysed first, made the 41st file's
    `norm("layer_x")` fall back to every entry of the table, BatchNorm included (timm's
    `get_norm_act_layer`: EvoNorm in efficientformer_v2, depending on the order of the run)."""
    keys = [f"layer_{index}" for index in range(40)] + ["layer_x"]
    table = ", ".join(f'"{key}": nn.LayerNorm' for key in keys)
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "norms.py").write_text(f"from torch import nn\n\nTABLE = {{{table}, \"batch\": nn.BatchNorm2d}}\n\n\ndef norm(kind):\n    return TABLE[kind]\n")
    model = (
        "from torch import nn\nfrom torch.utils.checkpoint import checkpoint\n\nfrom pkg.norms import norm\n\n\n"
        "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.norm = norm({key!r})(4)\n\n"
        "    def forward(self, x):\n        return checkpoint(self.norm, x, use_reentrant=False)\n"
    )
    paths = []
    for index, key in enumerate(keys):
        path = tmp_path / "pkg" / f"model_{index}.py"
        path.write_text(model.format(key=key))
        paths.append(str(path))
    target = paths[-1]
    assert _findings_after(tmp_path, [target]) == []
    assert _findings_after(tmp_path, paths) == []
