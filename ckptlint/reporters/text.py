"""flake8-style lines: `path:line:col: CODE message`, optionally with the source line."""

from __future__ import annotations

from collections import Counter

from ckptlint.result import LintResult


def render(result: LintResult, show_source: bool = False, statistics: bool = False, quiet: bool = False, **_: object) -> str:
    lines: list[str] = []
    for finding in result.findings:
        lines.append(f"{finding.path}:{finding.line}:{finding.column}: {finding.code} {finding.message}")
        source = result.sources.get(finding.path)
        if show_source and source is not None:
            text = source.line(finding.line).expandtabs(1)
            lines.append(f"    {text}")
            width = max(1, (finding.end_column - finding.column) if finding.end_line == finding.line else len(text) - finding.column + 1)
            lines.append("    " + " " * (finding.column - 1) + "^" * width)
    if statistics and result.findings:
        counts = Counter(finding.code for finding in result.findings)
        for code in sorted(counts):
            lines.append(f"{counts[code]:<6} {code}")
    if not quiet and not (result.fatal and not result.files):  # nothing was read: the error says it all
        lines.append(summary(result))
    return "\n".join(lines) + ("\n" if lines else "")


def summary(result: LintResult) -> str:
    """mypy's wording: the files with findings, then the files checked (`in 4 files` alone
    read as 4 files with findings when it counted the files checked)."""
    checked = _count(result.files, "file")
    if not result.findings:
        return f"All checks passed ({checked})."
    with_findings = len({finding.path for finding in result.findings})
    return f"Found {_count(len(result.findings), 'finding')} in {_count(with_findings, 'file')} (checked {checked})."


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' if number != 1 else ''}"
