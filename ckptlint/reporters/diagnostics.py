"""Findings as LSP `Diagnostic` objects (plain dicts): what the language server publishes and
`--format lsp` prints, built in one place so both are the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ckptlint.finding import Finding
from ckptlint.positions import convert_column
from ckptlint.rules import RULES_BY_CODE, rule_url

ERROR, WARNING, INFORMATION = 1, 2, 3
SEVERITY = {"error": ERROR, "warning": WARNING, "note": INFORMATION}  # a finding's severity (finding.py)


def file_uri(path: str) -> str:
    return Path(path).resolve().as_uri()


def lsp_range(line_text: Callable[[int], str], line: int, column: int, end_line: int, end_column: int, encoding: str) -> dict[str, Any]:
    return {
        "start": {"line": line - 1, "character": convert_column(line_text(line), column, encoding)},
        "end": {"line": end_line - 1, "character": convert_column(line_text(end_line), end_column, encoding)},
    }


def diagnostic(
    finding: Finding,
    line_text: Callable[[str, int], str],
    encoding: str = "utf-16",
    uri_for: Callable[[str], str] = file_uri,
) -> dict[str, Any]:
    """`line_text(path, line)` gives a file's line (for column conversion); `uri_for` turns
    a finding's display path into a URI (relative paths are relative to the caller's base)."""
    rule = RULES_BY_CODE.get(finding.code)

    def own(number: int) -> str:
        return line_text(finding.path, number)

    data: dict[str, Any] = {
        "range": lsp_range(own, finding.line, finding.column, finding.end_line, finding.end_column, encoding),
        "severity": SEVERITY.get(finding.severity or (rule.level if rule is not None else ""), WARNING),
        "code": finding.code,
        "codeDescription": {"href": rule_url(finding.code)},
        "source": "ckptlint",
        "message": finding.message,
    }
    related = []
    for site in finding.sites:
        text = line_text(site.path, site.line)
        character = convert_column(text, site.column, encoding)
        related.append(
            {
                "location": {
                    "uri": uri_for(site.path),
                    "range": {"start": {"line": site.line - 1, "character": character}, "end": {"line": site.line - 1, "character": len(text)}},
                },
                "message": site.describe(),
            }
        )
    if related:
        data["relatedInformation"] = related
    if finding.fixes:
        data["data"] = {"fixes": [fix.to_dict() for fix in finding.fixes]}
    return data
