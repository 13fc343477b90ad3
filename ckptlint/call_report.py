"""`ckptlint calls`: what ckptlint recognised as checkpoint calls, for humans and tests."""

from __future__ import annotations

import ast
from collections import Counter
from typing import Any

from ckptlint.analysis.regions.coverage import CallEdge, shown_path, unresolved
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


def describe_coverage(edges: list[CallEdge]) -> dict[str, Any]:
    """How many calls the region makes (directly or through its callees), how many the analysis
    followed, and where and why it stopped at the others."""
    return {
        "calls": len(edges),
        "resolved": sum(edge.resolved for edge in edges),
        "unresolved": [
            {"path": shown_path(e), "line": e.node.lineno, "column": e.node.col_offset + 1, "callee": e.callee, "reason": e.reason}
            for e in unresolved(edges)
        ],
    }


def describe_call(call: CheckpointCall, hints: list[dict[str, str]] | None = None, coverage: dict[str, Any] | None = None) -> dict[str, Any]:
    """The call as `ckptlint calls` shows it: where, which API, its region, its mode and what
    decided the mode (`mode_source`: `use_reentrant=False`, `transformers 4.57.0 from the environment`);
    with `hints`, its static cost hints (analysis/regions/cost_hints.py: `kind`, `message`); with
    `coverage`, which calls in its region the analysis followed (`describe_coverage`)."""
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
    if coverage is not None:
        described["coverage"] = coverage
    return described


def coverage_totals(described: list[dict[str, Any]]) -> tuple[int, int, Counter[str]]:
    """Over the described calls: the calls in their regions (a helper counts once in each
    region that reaches it), how many of them resolved, and the unresolved ones' reasons."""
    total, resolved, reasons = 0, 0, Counter[str]()
    for item in described:
        coverage = item.get("coverage", {})
        total += coverage.get("calls", 0)
        resolved += coverage.get("resolved", 0)
        reasons.update(call["reason"] for call in coverage.get("unresolved", ()))
    return total, resolved, reasons


def coverage_line(described: list[dict[str, Any]]) -> str:
    """`coverage: 412 of 430 calls in 12 regions resolved (0.958); unresolved: 10 callee value unknown, ...`"""
    total, resolved, reasons = coverage_totals(described)
    share = f"{resolved / total:.3f}" if total else "n/a"
    why = ", ".join(f"{n} {reason}" for reason, n in reasons.most_common())
    return f"coverage: {resolved} of {total} calls in {len(described)} regions resolved ({share})" + (f"; unresolved: {why}" if why else "")
