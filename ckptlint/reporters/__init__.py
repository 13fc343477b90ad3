"""Reporters turn a LintResult into text; they never analyse."""

from __future__ import annotations

from typing import Callable

from ckptlint.reporters import github, json_format, lsp_format, sarif, text

FORMATS: dict[str, Callable[..., str]] = {
    "text": text.render,
    "json": json_format.render,
    "sarif": sarif.render,
    "github": github.render,
    "lsp": lsp_format.render,
}
