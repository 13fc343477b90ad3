"""Where a region's cost is predictable, say so: hints read from what the cost replays
measured (the ops the plain forward ran, the bytes it saved by kind), nothing else."""

from __future__ import annotations

from typing import Any

from ckptlint.runtime.cost_text import human_bytes

EMBEDDING_OPS = frozenset({"aten.embedding", "aten.embedding_bag", "aten._embedding_bag"})


def hints(cost: dict[str, Any]) -> list[dict[str, str]]:
    """`[{"kind": ..., "message": ...}]` for the cost record `cost` (cost.cost_record)."""
    found: list[dict[str, str]] = []
    ops: dict[str, int] = cost["forward_ops"]
    plain = cost["saved_bytes"]["plain"]
    freed = cost["freed_bytes"]
    by_reference = plain["input"] + plain["parameter"] + plain["captured"]
    if ops and set(ops) <= EMBEDDING_OPS:
        found.append(_hint(
            "embedding",
            f"an embedding lookup saves nothing but its indices, by reference ({human_bytes(by_reference)}): "
            f"checkpointing it frees {human_bytes(freed)}; leave it out of the region",
        ))
    elif sum(ops.values()) == 1 and cost["forward_flops"] == 0:
        (op,) = ops
        found.append(_hint(
            "single-cheap-op",
            f"the region is one op ({op}), elementwise or a norm (no FLOPs counted): checkpointing it frees "
            f"{human_bytes(freed)} while the checkpoint keeps its inputs and adds a call and a recompute; "
            "checkpoint it together with the layers around it, or not at all",
        ))
    if plain["output"]:
        found.append(_hint(
            "output-saved",
            f"{human_bytes(plain['output'])} the region saves is its own output, which its caller holds anyway "
            "(the next block's input; for the last block, what the head or loss reads at once): not freed",
        ))
    if freed <= 0 and not any(h["kind"] == "embedding" for h in found):
        found.append(_hint(
            "frees-nothing",
            f"checkpointing frees nothing: the plain forward saves {human_bytes(by_reference)} by reference "
            f"(inputs, parameters, captured tensors) and {human_bytes(plain['output'])} of output",
        ))
    return found


def _hint(kind: str, message: str) -> dict[str, str]:
    return {"kind": kind, "message": message}
