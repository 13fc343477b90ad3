"""Every rule's documented bad example triggers it, and its good example does not."""

from __future__ import annotations

import textwrap

import pytest

from pathlib import Path

from ckptlint.config import Config
from ckptlint.engine import lint_source
from ckptlint.rules import ALL_RULES, RULES_BY_CODE


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
