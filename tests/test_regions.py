"""Region analysis: every hazard fixture has a safe twin, the twins are silent, messages name the call."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ckptlint.engine import lint_source
from ckptlint.rules import ALL_RULES
from ckptlint.rules.base import RegionRule
from conftest import FIXTURES, expectations, fixture_files, lint_fixture

HAZARDS = FIXTURES / "regions" / "hazards"
SAFE = FIXTURES / "regions" / "safe"
REGION_CODES = tuple(rule.code for rule in ALL_RULES if isinstance(rule, RegionRule))


def _cases(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.suffix == ".py" or p.is_dir())


def _lint(path: Path):
    return lint_fixture(path)


def test_every_hazard_has_a_safe_twin() -> None:
    hazards = _cases(HAZARDS)
    assert len(hazards) >= 40
    assert set(hazards) <= set(_cases(SAFE))


@pytest.mark.parametrize("name", _cases(HAZARDS))
def test_hazard_fixture_marks_region_findings(name: str) -> None:
    marked = {code for path in fixture_files(HAZARDS / name) if path.is_file() for code, _, _ in expectations(path)[0]}
    if (HAZARDS / name).is_file():
        marked = {code for code, _, _ in expectations(HAZARDS / name)[0]}
    # what the region does (CKP2xx), or how gradients reach it and leave it (CKP301/CKP302/CKP306)
    assert marked & {*REGION_CODES, "CKP301", "CKP302", "CKP306"}, f"{name} marks no region finding"


@pytest.mark.parametrize("name", _cases(SAFE))
def test_safe_twin_is_silent(name: str) -> None:
    path = SAFE / name
    files = [path] if path.is_file() else fixture_files(path)
    for file in files:
        assert not {code for code, _, _ in expectations(file)[0]}, f"{file} marks findings"
    result = _lint(path)
    assert [(f.path, f.line, f.code) for f in result.findings if f.code.startswith(("CKP2", "CKP3", "CKP401", "CKP402"))] == []


def test_messages_name_the_checkpoint_call_and_the_chain() -> None:
    result = _lint(HAZARDS / "two_calls_deep_bn.py")
    [finding] = result.findings
    assert finding.code == "CKP204"
    assert finding.message.endswith(
        "(in region checkpointed at fixtures/regions/hazards/two_calls_deep_bn.py:31 via Block.forward -> Mixer.route)"
    )
    assert [(s.path, s.line, s.chain) for s in finding.sites] == [
        ("fixtures/regions/hazards/two_calls_deep_bn.py", 31, ("Block.forward", "Mixer.route"))
    ]


def test_hazard_in_the_entry_has_no_chain() -> None:
    [finding] = [f for f in _lint(HAZARDS / "bound_method_region.py").findings if f.code == "CKP203"]
    assert finding.message.endswith("(in region checkpointed at fixtures/regions/hazards/bound_method_region.py:16)")


def test_one_finding_per_location_listing_every_site() -> None:
    source = """
import random
from torch.utils.checkpoint import checkpoint

def block(x):
    return x * random.random()

def a(x):
    return checkpoint(block, x, use_reentrant=False)

def b(x):
    return checkpoint(block, x, use_reentrant=True)
"""
    [finding] = lint_source(source)
    assert finding.code == "CKP201" and finding.line == 6
    assert [s.line for s in finding.sites] == [9, 12]
    assert re.search(r"checkpointed at example\.py:9; also checkpointed at example\.py:12\)$", finding.message)


def test_multifile_package_reports_in_the_block_modules() -> None:
    result = _lint(HAZARDS / "multifile_zoo")
    found = {(Path(f.path).name, f.line, f.code) for f in result.findings}
    assert found == {("blocks.py", 16, "CKP201"), ("blocks.py", 16, "CKP206"), ("mixer.py", 15, "CKP202"), ("mixer.py", 16, "CKP204")}
    chains = {f.code: f.sites[0].chain for f in result.findings}
    assert chains["CKP204"] == ("Block.forward", "Mixer.forward")


def test_grad_mode_branch_only_under_reentrant() -> None:
    template = """
import torch
from torch.utils.checkpoint import checkpoint

def block(x):
    if torch.is_grad_enabled():
        return x
    return x * 2

def run(x):
    return checkpoint(block, x{flag})
"""
    assert {f.code for f in lint_source(template.format(flag=""))} == {"CKP101", "CKP206"}
    assert {f.code for f in lint_source(template.format(flag=", use_reentrant=True"))} == {"CKP206"}
    assert lint_source(template.format(flag=", use_reentrant=False")) == []
    [finding] = [f for f in lint_source(template.format(flag="")) if f.code == "CKP206"]
    assert "reentrant by default" in finding.message


def test_ckp102_says_whether_the_region_is_stochastic() -> None:
    template = """
import torch
from torch.utils.checkpoint import checkpoint

def block(x):
    return {body}

def run(x):
    return checkpoint(block, x, use_reentrant=False, preserve_rng_state=False)
"""
    [stochastic] = lint_source(template.format(body="torch.nn.functional.dropout(x, 0.1)"))
    assert "the region has stochastic torch ops (`torch.nn.functional.dropout()` at example.py:6), so gradients change" in stochastic.message
    [deterministic] = lint_source(template.format(body="x * 2"))
    assert "no stochastic torch op was found in the region" in deterministic.message


def _sites_of(name: str) -> dict[tuple[int, str], list[int]]:
    result = _lint(HAZARDS / name)
    return {(f.line, f.code): [s.line for s in f.sites] for f in result.findings}


def test_every_grown_container_construction_reaches_the_norm() -> None:
    """append, extend, insert, `+=` with a slice, a generator, `d[key] = m`, `nn.Sequential(*layers)`: one site each."""
    assert _sites_of("grown_containers.py") == {(13, "CKP204"): [39, 40, 41, 43, 45, 46, 47]}


def test_iterated_submodules_reach_the_norm_and_modules_includes_the_norm_itself() -> None:
    sites = _sites_of("iterated_children.py")
    assert sites == {(13, "CKP204"): [41, 43, 45, 47, 52], (52, "CKP204"): [52]}


def test_constructor_arguments_are_bound_per_instance() -> None:
    """`Residual(nn.BatchNorm1d(w))`, `norm_layer=nn.BatchNorm1d`, and a subclass's `super().__init__(block=...)`."""
    assert _sites_of("constructor_arguments.py") == {(13, "CKP204"): [48], (23, "CKP204"): [49, 50]}
    result = _lint(HAZARDS / "constructor_arguments.py")
    [via_stage] = [s for f in result.findings for s in f.sites if s.line == 50]
    assert via_stage.chain == ("Stage.forward", "Block.forward")


def test_module_returning_methods_keep_the_module() -> None:
    assert _sites_of("module_returning_methods.py") == {(13, "CKP204"): [29, 30, 31], (32, "CKP204"): [32]}


def test_sequential_subclass_norm_is_reported_at_the_call_that_runs_it() -> None:
    """A norm with no call line of its own: at the checkpoint call (the region) or at the container's call."""
    result = _lint(HAZARDS / "sequential_subclass.py")
    assert sorted((f.line, f.column) for f in result.findings) == [(28, 24), (29, 37)]
    assert {f.message.split(",")[0] for f in result.findings} >= {"the region is a BatchNorm2d"}


def test_name_patterns_meet_as_registration_and_lookup_can() -> None:
    from ckptlint.analysis.semantics.modules import name_pattern, patterns_meet
    import ast

    def pattern(text: str):
        return name_pattern(ast.parse(text, mode="eval").body)

    assert pattern('f"layer{i}"') == ("layer", "")
    assert pattern('"norm"') == "norm"
    assert pattern("name") == ("", "")
    assert patterns_meet(pattern('f"layer{i}"'), "layer3")
    assert not patterns_meet(pattern('f"layer{i}"'), "norm")
    assert patterns_meet(pattern('f"layer{i}_a"'), pattern('f"layer{j}{k}"'))
    assert not patterns_meet(pattern('f"conv{i}"'), pattern('f"norm{i}"'))
    assert patterns_meet(pattern("name"), "anything")


def test_constructor_arguments_keep_values_they_do_not_follow() -> None:
    """An instance built with a module argument still holds the norm its `__init__` builds from other
    parameters in a shape the per-instance binding does not follow (a conditional on widths)."""
    source = """
from torch import nn
from torch.utils.checkpoint import checkpoint

class Rep(nn.Module):
    def __init__(self, c_in, c_out, act=nn.ReLU):
        super().__init__()
        self.identity = nn.BatchNorm2d(c_in) if c_in == c_out else None
        self.act = act()

    def forward(self, x):
        return self.act(self.identity(x))

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rep = Rep(8, 8, act=nn.GELU)

    def forward(self, x):
        return checkpoint(self.rep, x, use_reentrant=False)
"""
    [finding] = lint_source(source)
    assert (finding.code, finding.line) == ("CKP204", 12)


@pytest.mark.parametrize(
    "code, stored",
    [
        ("m.flag = True\n", True),
        ("m.flag += 1\n", True),
        ("self.flag = True\nfor m in mods:\n    m.flag |= x\n", True),  # the second store counts
        (".flag = 1\n", True),  # at the very start
        ("self.flag = True\n", False),
        ("myself.flag = True\n", False),  # read as `self.flag`: only the four letters before the dot are looked at
        ("if m.flag == x:\n    pass\n", False),
        ("m.flags = 1\nx = m.flag\n", False),
    ],
)
def test_a_store_on_another_object_is_told_from_one_on_self(code: str, stored: bool) -> None:
    """`for m in self.modules(): m.is_first_chunk = flag` sets an attribute from outside the
    class (fixtures/regions/*/flag_set_from_outside.py): read from the module's text."""
    from types import SimpleNamespace

    from ckptlint.analysis.semantics.evaluator import TypeInference

    module = SimpleNamespace(source=SimpleNamespace(code=code))
    inference = SimpleNamespace(_outside_stores={})
    assert TypeInference._stored_from_outside(inference, module, "flag") is stored  # type: ignore[arg-type]
