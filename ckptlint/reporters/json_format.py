"""`--format json`: one object with the findings and the paths that could not be read.

The schema is documented in docs/json-output.md and versioned by `schema_version`.
"""

from __future__ import annotations

import json
from typing import Any

from ckptlint.version import __version__
from ckptlint.finding import Finding
from ckptlint.result import LintResult
from ckptlint.rules import RULES_BY_CODE

SCHEMA_VERSION = 1


def to_data(result: LintResult) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "ckptlint", "version": __version__},
        "files_checked": result.files,
        "findings": [_finding(finding) for finding in result.findings],
        "problems": [{"path": p.path, "message": p.message, "fatal": p.fatal} for p in result.problems],
    }


def _finding(finding: Finding) -> dict[str, Any]:
    """The finding's JSON, with a `severity` always (its rule's level where no context set one)."""
    data = finding.to_dict()
    if "severity" not in data:
        rule = RULES_BY_CODE.get(finding.code)
        data["severity"] = rule.level if rule is not None else "warning"
    return data


def render(result: LintResult, **_: object) -> str:
    return json.dumps(to_data(result), indent=2, ensure_ascii=False) + "\n"
