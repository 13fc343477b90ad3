"""Every rule's documented bad example triggers it, and its good example does not."""

from __future__ import annotations

import textwrap

import pytest

from pathlib import Path

from ckptlint.config import Config
from ckptlint.engine import lint_source
from ckptlint.rules import ALL_RULES, RULES_BY_CODE
from ckptlint.rules.base import RegionRule


def _lint(rule, text: str):
    return lint_source(textwrap.dedent(text), config=Config(root=Path.cwd(), **rule.options))


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_bad_example_triggers_the_rule(rule) -> None:
    codes = {f.code for f in _lint(rule, rule.bad)}
    assert rule.code in codes


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_good_example_does_not(rule) -> None:
    codes = {f.code for f in _lint(rule, rule.good)}
    assert rule.code not in codes


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_rule_is_documented(rule) -> None:
    assert rule.code.startswith("CKP") and len(rule.code) == 6
    assert rule.name and rule.summary and rule.explanation.strip() and rule.remedy.strip()
    page = rule.document()
    assert page.startswith(f"# {rule.code}: {rule.name}\n")
    assert "## Why" in page and "## Bad" in page and "## Good" in page and "## Suppress" in page


def test_codes_are_unique_and_sorted() -> None:
    codes = [rule.code for rule in ALL_RULES]
    assert codes == sorted(set(codes))
    assert set(RULES_BY_CODE) == set(codes)


def test_committed_rule_pages_are_current() -> None:
    from ckptlint.rule_docs import pages
    from conftest import REPO

    folder = REPO / "docs" / "rules"
    for name, text in pages().items():
        assert (folder / name).read_text(encoding="utf-8") == text, f"run: python -m ckptlint.rule_docs docs/rules ({name})"
    assert {p.name for p in folder.glob("*.md")} == set(pages())


def test_readme_rules_table_is_current() -> None:
    from ckptlint.rule_docs import readme_with_table
    from conftest import REPO

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert readme_with_table(readme) == readme, "run: python -m ckptlint.rule_docs docs/rules"


def test_every_rule_module_is_registered() -> None:
    """Each rules/ckpNNN.py contributes exactly its own code to ALL_RULES, and nothing else does."""
    from conftest import REPO

    files = sorted(path.stem.upper() for path in (REPO / "ckptlint" / "rules").glob("ckp[0-9]*.py"))
    assert [rule.code for rule in ALL_RULES] == files
    assert all(type(rule).__module__ == f"ckptlint.rules.{rule.code.lower()}" for rule in ALL_RULES)
    assert len(files) >= 10


@pytest.mark.parametrize("rule", [r for r in ALL_RULES if isinstance(r, RegionRule)], ids=lambda r: r.code)
def test_region_rule_words_every_example_finding(rule, monkeypatch: pytest.MonkeyPatch) -> None:
    """Region rules own their wording: change the rule's templates and its finding changes
    (the analysis supplies facts, never sentences)."""
    reworded = {variant: "reworded by the rule: " + text for variant, text in rule.messages.items()}
    monkeypatch.setattr(type(rule), "messages", reworded)
    [finding] = [f for f in _lint(rule, rule.bad) if f.code == rule.code][:1]
    assert finding.summary.startswith("reworded by the rule: "), finding.summary


def test_runtime_confirmations_name_observable_divergences() -> None:
    """Rule.confirmed_by names only categories the runtime companion reports."""
    observable = {
        "output", "input-grad", "parameter-grad", "buffer", "rng-python", "rng-torch", "container", "global", "attribute",
        "closure", "error", "recompute",
    }  # fmt: skip
    from ckptlint.runtime.ddp import DDP_CATEGORY
    from ckptlint.runtime.differentiation import DIFFERENTIATION_CATEGORY
    from ckptlint.runtime.communication import COMMUNICATION_CATEGORY, HANG_CATEGORY
    from ckptlint.runtime.gradflow import CONFIRMS_NO_GRAD_INPUT, CONFIRMS_NON_POSITIONAL, CONFIRMS_UNTRACKED_OUTPUT

    # gradient flow (runtime/gradflow.py, ddp.py, differentiation.py)
    observable |= {CONFIRMS_NO_GRAD_INPUT, CONFIRMS_NON_POSITIONAL, CONFIRMS_UNTRACKED_OUTPUT, DDP_CATEGORY, DIFFERENTIATION_CATEGORY}
    observable |= {COMMUNICATION_CATEGORY, HANG_CATEGORY}  # communication (runtime/communication.py)
    for rule in ALL_RULES:
        assert rule.confirmed_by <= observable, rule.code


def test_public_api_is_the_package_face() -> None:
    import ckptlint
    import ckptlint.engine

    assert sorted(ckptlint.__all__) == ["Config", "Finding", "LintResult", "Linter", "__version__", "lint_source"]
    assert ckptlint.Linter is ckptlint.engine.Linter and ckptlint.lint_source is lint_source
    [finding] = ckptlint.lint_source("import random\nfrom torch.utils.checkpoint import checkpoint\n\ndef f(x):\n    return x * random.random()\n\ncheckpoint(f, 1, use_reentrant=False)\n")
    assert (finding.code, finding.line, finding.column) == ("CKP201", 5, 16)
