"""The `--cost` section of `ckptlint confirm`'s report: one paragraph per measured call site."""

from __future__ import annotations

from typing import Any, Iterable

from ckptlint.project import display_path


def human_bytes(count: int) -> str:
    """Binary units, as memory is allocated: 16384 -> '16.0 KiB'."""
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def render(records: Iterable[Any]) -> str:
    """The section, for the records that carry a cost (Record.cost); empty when none does."""
    lines: list[str] = []
    for record in records:
        cost = getattr(record, "cost", None)
        if cost is None:
            continue
        site = record.site
        lines.append(f"{display_path(site['path'])}:{site['line']}:{site['column']}: region {record.region['name']} [{record.api}]")
        lines.extend(f"    {line}" for line in describe(cost))
    if not lines:
        return ""
    return "\n".join(["what each checkpoint costs (--cost):", *lines])


def describe(cost: dict[str, Any]) -> list[str]:
    if "error" in cost:
        return [f"not measured: {cost['error']}", *static_lines(cost)]
    plain, checkpointed = cost["saved_bytes"]["plain"], cost["saved_bytes"]["checkpointed"]
    by_reference = plain["input"] + plain["parameter"] + plain["captured"]
    ratio = cost["mib_per_gflop"]
    still = checkpointed["activation"] + checkpointed["output"]
    lines = [
        f"frees {human_bytes(cost['freed_bytes'])} of activations: the plain forward saves {human_bytes(plain['activation'])} "
        f"of activations, {human_bytes(plain['output'])} of its own output and {human_bytes(by_reference)} by reference "
        f"(inputs, parameters, captured tensors), the checkpointed one {human_bytes(sum(checkpointed.values()) - still)} by reference"
        + (f" and {human_bytes(still)} it made" if still else ""),
        f"recomputes {cost['recomputed_flops']:,} FLOPs (the forward: {cost['forward_flops']:,}): "
        + (f"{ratio:.3g} MiB freed per GFLOP" if ratio is not None else "no FLOPs counted (FlopCounterMode counts matmuls, convolutions, attention)"),
    ]
    for saved in cost["largest_saved"]:
        shape = "x".join(map(str, saved["shape"])) or "scalar"
        lines.append(f"- saved {shape} {saved['dtype']} {human_bytes(saved['bytes'])} ({saved['kind']}) by {', '.join(saved['saved_by']) or 'an unnamed node'}")
    lines.extend(f"hint ({hint['kind']}): {hint['message']}" for hint in cost["hints"])
    return [*lines, *static_lines(cost)]


def static_lines(cost: dict[str, Any]) -> list[str]:
    """The hints the code gives (`static_hints`, joined from `--lint`: analysis/regions/cost_hints.py), measured or not."""
    return [f"static hint ({hint['kind']}): {hint['message']}" for hint in cost.get("static_hints", ())]
