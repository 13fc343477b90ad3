"""Applying fixes: text edits in code point columns, so every surface (--fix, --diff, SARIF,
the language server) applies the same edits. The edits themselves come from fix_builder.py.
"""

from __future__ import annotations

import re
from typing import Iterable

from ckptlint.finding import SAFE, UNSAFE, Edit, Finding, Fix

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


# -- applying ------------------------------------------------------------------


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    """Apply non-overlapping edits (overlapping ones after the first are skipped)."""
    starts = line_starts(text)

    def offset(line: int, column: int) -> int:
        return min(starts[min(line, len(starts)) - 1] + column - 1, len(text))

    chosen: list[tuple[int, int, str]] = []
    for edit in sorted(edits, key=lambda e: (e.line, e.column, e.end_line, e.end_column)):
        start, end = offset(edit.line, edit.column), offset(edit.end_line, edit.end_column)
        if chosen and start < chosen[-1][1]:
            continue
        chosen.append((start, end, edit.content))
    for start, end, content in reversed(chosen):
        text = text[:start] + content + text[end:]
    return text


def line_starts(text: str) -> list[int]:
    starts = [0]
    for match in _LINE_BREAK.finditer(text):
        starts.append(match.end())
    return starts


def chosen_fixes(findings: Iterable[Finding], unsafe: bool) -> list[Fix]:
    """One fix per finding: the unsafe one when allowed (it is the recommended change), else safe."""
    chosen = []
    for finding in findings:
        by_kind = {fix.applicability: fix for fix in finding.fixes}
        fix = (by_kind.get(UNSAFE) if unsafe else None) or by_kind.get(SAFE)
        if fix is not None:
            chosen.append(fix)
    return chosen
