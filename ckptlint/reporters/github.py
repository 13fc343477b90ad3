"""`--format github`: GitHub Actions workflow commands, one annotation per finding."""

from __future__ import annotations

from ckptlint.result import LintResult
from ckptlint.rules import RULES_BY_CODE


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render(result: LintResult, **_: object) -> str:
    lines = []
    for finding in result.findings:
        rule = RULES_BY_CODE.get(finding.code)
        severity = finding.severity or (rule.level if rule is not None else "warning")
        command = {"error": "error", "note": "notice"}.get(severity, "warning")
        properties = ",".join(
            [
                f"file={_escape_property(finding.path)}",
                f"line={finding.line}",
                f"col={finding.column}",
                f"endLine={finding.end_line}",
                f"endColumn={finding.end_column}",
                f"title={_escape_property(f'ckptlint ({finding.code})')}",
            ]
        )
        lines.append(f"::{command} {properties}::{_escape_data(finding.message)}")
    return "\n".join(lines) + ("\n" if lines else "")
