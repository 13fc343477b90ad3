"""Region analysis: every hazard fixture has a safe twin, the twins are silent, messages name the call."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ckptlint.config import find_config, load_config
from ckptlint.engine import Linter, lint_source
from ckptlint.rules import ALL_RULES
from ckptlint.rules.base import RegionRule
from conftest import FIXTURES, REPO, expectations, fixture_files

HAZARDS = FIXTURES / "regions" / "hazards"
SAFE = FIXTURES / "regions" / "safe"
REGION_CODES = tuple(rule.code for rule in ALL_RULES if isinstance(rule, RegionRule))


def _cases(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.suffix == ".py" or p.is_dir())


def _lint(path: Path):
    return Linter(load_config(find_config(path), REPO), base=REPO).lint_paths([path], project_root=FIXTURES)


def test_every_hazard_has_a_safe_twin() -> None:
    hazards = _cases(HAZARDS)
    assert len(hazards) >= 40
    assert set(hazards) <= set(_cases(SAFE))


@pytest.mark.parametrize("name", _cases(HAZARDS))
def test_hazard_fixture_marks_region_findings(name: str) -> None:
    marked = {code for path in fixture_files(HAZARDS / name) if path.is_file() for code, _, _ in expectations(path)[0]}
    if (HAZARDS / name).is_file():
        marked = {code for code, _, _ in expectations(HAZARDS / name)[0]}
    assert marked & set(REGION_CODES), f"{name} marks no region finding"


@pytest.mark.parametrize("name", _cases(SAFE))
def test_safe_twin_is_silent(name: str) -> None:
    path = SAFE / name
    files = [path] if path.is_file() else fixture_files(path)
    for file in files:
        assert not {code for code, _, _ in expectations(file)[0]}, f"{file} marks findings"
    result = _lint(path)
    assert [(f.path, f.line, f.code) for f in result.findings if f.code.startswith("CKP2")] == []


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
