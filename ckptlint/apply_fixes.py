"""Applying fixes and noqa comments to files: --fix, --diff, --add-noqa.

Edits come from the findings (computed with libcst by `fixes.py`); here they are applied
to the text the linter read and written back in the file's own encoding.
"""

from __future__ import annotations

import difflib
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path

from ckptlint.result import LintResult
from ckptlint.finding import Finding
from ckptlint.fixes import apply_edits, chosen_fixes
from ckptlint.noqa import noqa_edits


@dataclass
class Change:
    path: str  # the file system path
    display: str
    before: str
    after: str
    fixed: int  # findings fixed


def fixed_files(result: LintResult, unsafe: bool) -> list[Change]:
    by_path: dict[str, list[Finding]] = {}
    for finding in result.findings:
        if finding.fixes:
            by_path.setdefault(finding.path, []).append(finding)
    changes = []
    for display, findings in sorted(by_path.items()):
        source = result.sources[display]
        fixes = chosen_fixes(findings, unsafe)
        after = apply_edits(source.text, [edit for fix in fixes for edit in fix.edits])
        if after != source.text:
            changes.append(Change(source.path, display, source.text, after, len(fixes)))
    return changes


def unified_diff(changes: list[Change]) -> str:
    parts: list[str] = []
    for change in changes:
        parts.extend(
            difflib.unified_diff(
                change.before.splitlines(keepends=True),
                change.after.splitlines(keepends=True),
                fromfile=f"a/{change.display}",
                tofile=f"b/{change.display}",
            )
        )
    return "".join(parts)


def write(changes: list[Change]) -> int:
    for change in changes:
        _write_text(Path(change.path), change.after)
    return sum(change.fixed for change in changes)


def stdin_text(result: LintResult, changes: list[Change]) -> str:
    """What `-` becomes: the changed text, or the text as read when nothing changed."""
    if changes:
        return changes[0].after
    source = next(iter(result.sources.values()), None)
    return source.text if source is not None else ""


def noqa_changes(result: LintResult) -> list[Change]:
    """`# noqa: CODES` appended to the line of every finding (not to unparsable files)."""
    by_path: dict[str, list[Finding]] = {}
    for finding in result.findings:
        if finding.code != "CKP000":
            by_path.setdefault(finding.path, []).append(finding)
    changes = []
    for display, findings in sorted(by_path.items()):
        source = result.sources[display]
        after = apply_edits(source.text, noqa_edits(source, findings))
        if after != source.text:
            changes.append(Change(source.path, display, source.text, after, len(findings)))
    return changes


def _write_text(path: Path, text: str) -> None:
    """Write in the encoding the file declares (PEP 263), keeping a byte-order mark."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(path.read_bytes()).readline)
    except (OSError, SyntaxError):
        encoding = "utf-8"
    path.write_bytes(text.encode(encoding))
