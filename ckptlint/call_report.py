"""`ckptlint calls`: what ckptlint recognised as checkpoint calls, for humans and tests."""

from __future__ import annotations

import ast
from typing import Any

from ckptlint.calls import CheckpointCall


def region_text(call: CheckpointCall) -> str:
    region = call.region
    if region is None:
        return "?"
    if isinstance(region, ast.ClassDef):
        return f"{region.name}.forward"
    if isinstance(region, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return region.name
    text = ast.unparse(region)
    return text if len(text) <= 60 else text[:57] + "..."


def describe_call(call: CheckpointCall, hints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """The call as `ckptlint calls` shows it: where, which API, its region, its mode and what
    decided the mode (`mode_source`: `use_reentrant=False`, `transformers 4.57.0 from the environment`);
    with `hints`, its static cost hints (analysis/regions/cost_hints.py: `kind`, `message`)."""
    mode = call.mode
    described: dict[str, Any] = {
        "path": call.path,
        "line": call.line,
        "column": call.column,
        "api": call.api.name,
        "region": region_text(call),
        "mode": mode.name,
        "mode_defaulted": mode.by_default,
        "mode_source": mode.source,
    }
    if hints is not None:
        described["hints"] = hints
    return described
