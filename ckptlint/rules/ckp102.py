"""CKP102: `preserve_rng_state=False`."""

from __future__ import annotations

import ast
from typing import Iterator

from ckptlint.analysis.regions.summary import TORCH_RANDOM, Effect
from ckptlint.finding import Finding
from ckptlint.rules.base import Rule, RuleContext, finding_at


class RngStateNotPreserved(Rule):
    code = "CKP102"
    name = "rng-state-not-preserved"
    summary = "A checkpoint call passes `preserve_rng_state=False`."
    explanation = """
        By default checkpoint saves the torch RNG state (CPU, and the devices of the
        inputs) before the forward and restores it before the replay, so dropout and
        other random torch ops draw the same numbers twice. With
        `preserve_rng_state=False` the replay draws fresh numbers: the dropout mask
        used to compute gradients is not the mask used in the forward, and the
        gradients are those of a different network. Nothing fails; the loss curve only
        looks a little worse.

        The message says whether the region contains stochastic torch ops (dropout,
        `torch.rand*`, `bernoulli`, ...): without them the flag is only a speed-up.
    """
    bad = """
        from torch.utils.checkpoint import checkpoint

        def forward(self, x):
            return checkpoint(self.block, x, use_reentrant=False, preserve_rng_state=False)
    """
    good = """
        from torch.utils.checkpoint import checkpoint

        def forward(self, x):
            return checkpoint(self.block, x, use_reentrant=False)
    """
    remedy = """
        Remove `preserve_rng_state=False` (the default is `True`). Keep it only for a
        region with no random op, where it saves the cost of saving RNG state.
    """
    under_contexts = """
        Under `torch.compile`, `preserve_rng_state=False` is ignored: the compiled region keeps its RNG
        state and dropout masks match (torch 2.13 and 2.14 CPU, with `use_reentrant` either way), so the
        finding is a note there ("no effect under compile"). See [regions.md](../regions.md#execution-contexts) for how the context is read; the finding's site says it and the severity follows.
    """
    confirmed_by = frozenset({"rng-torch", "output", "input-grad", "parameter-grad", "recompute"})

    def check(self, context: RuleContext) -> Iterator[Finding]:
        for call in context.calls:
            given = call.false_preserve_rng_state()
            if given is None:
                continue
            module, node, named = given
            summary = (
                f"preserve_rng_state=False{named}: the replay does not restore torch's RNG, so dropout "
                "and random torch ops draw different numbers in backward than in forward"
            )
            summary += _stochastic_note(context.region_effects(call))
            sites = () if module is call.module and _inside(node, call.node) else (context.site(call),)
            yield finding_at(module, node, self.code, summary, sites)


# how the note names a stochastic torch op, by the effect's variant
_RANDOM_OPS = {"function": "`{callee}()`", "method": "`.{method}()`", "module": "`{callee}` ({module_class})"}


def _stochastic_note(effects: list[Effect]) -> str:
    """Whether the region draws from torch's RNG, which decides if gradients change."""
    random_ops = [e for e in effects if e.kind == TORCH_RANDOM]
    if random_ops:
        first = random_ops[0]
        op = _RANDOM_OPS[first.variant].format_map(first.fact_map)
        where = f"{first.module.source.display_path}:{first.node.lineno}"  # type: ignore[attr-defined]  # effects and calls point at expressions, statements or keywords, which have positions
        more = f" and {len(random_ops) - 1} more" if len(random_ops) > 1 else ""
        return f"; the region has stochastic torch ops ({op} at {where}{more}), so gradients change"
    return "; no stochastic torch op was found in the region, so today only speed is affected"


def _inside(inner: ast.AST, outer: ast.AST) -> bool:
    start = (inner.lineno, inner.col_offset)  # type: ignore[attr-defined]  # keywords and calls have positions
    return (outer.lineno, outer.col_offset) <= start <= (outer.end_lineno, outer.end_col_offset)  # type: ignore[attr-defined]  # keywords and calls have positions
