"""`--format sarif`: SARIF 2.1.0 for GitHub code scanning and other SARIF consumers.

Rules carry their documentation; results carry 1-based regions in code points
(`columnKind: unicodeCodePoints`), the checkpoint calls that reach them as related
locations, fixes, and a `partialFingerprints` entry that survives lines moving. The run's
invocation says whether every path could be read, and which could not.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ckptlint.version import __version__
from ckptlint.result import LintResult
from ckptlint.finding import Finding
from ckptlint.rules import ALL_RULES, rule_url

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SRCROOT = "%SRCROOT%"


def repository_root(start: Path) -> Path:
    """The enclosing git repository (URIs are relative to it), else the working directory."""
    for directory in (start, *start.parents):
        if (directory / ".git").exists():
            return directory
    return start


def _artifact(path: str, root: Path) -> dict[str, str]:
    absolute = Path(os.path.abspath(path))
    try:
        return {"uri": absolute.relative_to(root).as_posix(), "uriBaseId": SRCROOT}
    except ValueError:
        return {"uri": absolute.as_uri()}


def _rules() -> list[dict[str, Any]]:
    rules = []
    for rule in ALL_RULES:
        page = rule.document()
        rules.append(
            {
                "id": rule.code,
                "name": rule.name,
                "shortDescription": {"text": rule.summary},
                "fullDescription": {"text": " ".join(rule.explanation.split())},
                "help": {"text": page, "markdown": page},
                "helpUri": rule_url(rule.code),
                "defaultConfiguration": {"level": "error" if rule.level == "error" else "warning"},
            }
        )
    return rules


def _fingerprint(finding: Finding, line_text: str, occurrence: int) -> str:
    key = "\0".join([finding.code, finding.path, line_text.strip(), str(occurrence)])
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def _region(line: int, column: int, end_line: int, end_column: int) -> dict[str, int]:
    return {"startLine": line, "startColumn": column, "endLine": end_line, "endColumn": end_column}


def _invocation(result: LintResult, root: Path) -> dict[str, Any]:
    """The run itself: whether it could read everything it was given, and each path it could
    not (`toolExecutionNotifications`), which the findings alone would leave unsaid."""
    invocation: dict[str, Any] = {"executionSuccessful": not result.fatal}
    if result.problems:
        invocation["toolExecutionNotifications"] = [
            {
                "level": "error" if problem.fatal else "warning",
                "message": {"text": f"{problem.path}: {problem.message}"},
                "locations": [{"physicalLocation": {"artifactLocation": _artifact(problem.path, root)}}],
            }
            for problem in result.problems
        ]
    return invocation


def render(result: LintResult, **_: object) -> str:
    root = repository_root(Path.cwd())
    index = {rule.code: position for position, rule in enumerate(ALL_RULES)}
    occurrences: dict[tuple[str, str, str], int] = {}
    results = []
    for finding in result.findings:
        source = result.sources.get(finding.path)
        line_text = source.line(finding.line) if source is not None else ""
        key = (finding.code, finding.path, line_text.strip())
        occurrences[key] = occurrences.get(key, 0) + 1
        location = {"physicalLocation": {"artifactLocation": _artifact(finding.path, root), "region": _region(finding.line, finding.column, finding.end_line, finding.end_column)}}
        entry = {
            "ruleId": finding.code,
            "ruleIndex": index[finding.code],
            "level": {"error": "error", "note": "note"}.get(finding.severity or ("error" if finding.code == "CKP000" else "warning"), "warning"),
            "message": {"text": finding.message},
            "locations": [location],
            "partialFingerprints": {"ckptlint/v1": _fingerprint(finding, line_text, occurrences[key])},
        }
        if finding.condition:
            entry["properties"] = {"condition": finding.condition}
        if finding.sites:
            entry["relatedLocations"] = [
                {
                    "id": number,
                    "physicalLocation": {"artifactLocation": _artifact(site.path, root), "region": {"startLine": site.line, "startColumn": site.column}},
                    "message": {"text": site.describe()},
                }
                for number, site in enumerate(finding.sites, 1)
            ]
        if finding.fixes:
            entry["fixes"] = [
                {
                    "description": {"text": f"{fix.description} ({fix.applicability})"},
                    "artifactChanges": [
                        {
                            "artifactLocation": _artifact(finding.path, root),
                            "replacements": [
                                {"deletedRegion": _region(e.line, e.column, e.end_line, e.end_column), "insertedContent": {"text": e.content}}
                                for e in fix.edits
                            ],
                        }
                    ],
                    "properties": {"applicability": fix.applicability},
                }
                for fix in finding.fixes
            ]
        results.append(entry)
    log = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "ckptlint", "version": __version__, "informationUri": "https://github.com/ckptlint/ckptlint", "rules": _rules()}},
                "originalUriBaseIds": {SRCROOT: {"uri": root.as_uri() + "/"}},
                "columnKind": "unicodeCodePoints",
                "invocations": [_invocation(result, root)],
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n"
