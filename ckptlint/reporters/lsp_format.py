"""`--format lsp`: `{file URI: [LSP Diagnostic, ...]}`, the diagnostics the language server publishes."""

from __future__ import annotations

import json
from typing import Any

from ckptlint.reporters.diagnostics import diagnostic, file_uri
from ckptlint.result import LintResult


def render(result: LintResult, **_: object) -> str:
    def line_text(path: str, line: int) -> str:
        source = result.sources.get(path)
        return source.line(line) if source is not None else ""

    files: dict[str, list[dict[str, Any]]] = {}
    for finding in result.findings:
        files.setdefault(file_uri(finding.path), []).append(diagnostic(finding, line_text))
    return json.dumps(files, indent=2, ensure_ascii=False) + "\n"
