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


def describe_call(call: CheckpointCall) -> dict[str, Any]:
    reentrant = call.reentrant
    return {
        "path": call.path,
        "line": call.line,
        "column": call.column,
        "api": call.api.name,
        "region": region_text(call),
        "mode": {True: "reentrant", False: "non-reentrant", None: "unknown"}[reentrant],
        "mode_defaulted": call.reentrant_by_default,
    }
