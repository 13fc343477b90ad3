"""Reporters turn a LintResult into text; they never analyse."""

from __future__ import annotations

from typing import Callable

from ckptlint.reporters import json_format, text

FORMATS: dict[str, Callable] = {
    "text": text.render,
    "json": json_format.render,
}
