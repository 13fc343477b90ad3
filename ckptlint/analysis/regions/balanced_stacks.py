"""Stacks a region pushes onto and pops off again: its replay leaves them as the forward did.

Megatron's NVTX helpers push a range name onto a module-level list on entry and pop it on
exit (`nvtx_range_push` / `nvtx_range_pop`), and check the list is not empty before popping.
In a region that does both, the replay pushes and pops once more and the list ends as it
began, so neither write nor the test on the list is a replay that changes something
(DESIGN.md). A stack the region only pushes onto (or pops first, then pushes: a rotating
buffer) is still reported.

Only under a reentrant checkpoint, whose replay runs the whole function: a non-reentrant
replay stops once it has recomputed the last tensor backward needs (torch's early stop, on
by default), so a pop after that point never runs in the replay and the stack grows by one
per step (the runtime companion shows it: fixtures/regions/hazards/balanced_stack.py).
"""

from __future__ import annotations

from ckptlint.analysis.regions.summary import UNSTABLE_BRANCH, Effect


def without_balanced_stacks(effects: list[Effect]) -> list[Effect]:
    """`effects` (one region's, in the order it runs them) without the pushes, pops and
    branches on a stack that the region pushes onto before it pops it."""
    first_push: dict[tuple[str, str], int] = {}
    first_pop: dict[tuple[str, str], int] = {}
    for index, effect in enumerate(effects):
        seen = first_push if effect.stack == "push" else first_pop if effect.stack == "pop" else None
        if seen is not None:
            for key in effect.state:
                seen.setdefault(key, index)
    balanced = {key for key, index in first_push.items() if key in first_pop and index < first_pop[key]}
    if not balanced:
        return effects
    return [effect for effect in effects if not _on_balanced(effect, balanced)]


def _on_balanced(effect: Effect, balanced: set[tuple[str, str]]) -> bool:
    if effect.stack:
        return bool(effect.state) and effect.state <= balanced
    return effect.kind == UNSTABLE_BRANCH and bool(effect.depends_on) and effect.depends_on <= balanced
