"""CKP101: the checkpoint mode depends on an omitted `use_reentrant`."""

from __future__ import annotations

import ast
from typing import Iterator

from ckptlint.catalogue import NONE, OMITTED
from ckptlint.finding import Finding
from ckptlint.rules.base import CheckpointCall, Rule, RuleContext, finding_at


class ImplicitUseReentrant(Rule):
    code = "CKP101"
    name = "implicit-use-reentrant"
    summary = "A checkpoint call relies on the default of `use_reentrant` (omitted, or `None`)."
    explanation = """
        `torch.utils.checkpoint.checkpoint` and `checkpoint_sequential` have two
        implementations with different semantics. When `use_reentrant` is not passed
        (or is `None`, which torch treats the same), every torch 2.x release picks the
        reentrant one and warns that the default will change. The two differ in what a
        replay sees: the reentrant variant runs the forward under `torch.no_grad()`,
        ignores gradients of inputs that are not tensors with `requires_grad`, does not
        support `torch.autograd.grad`, and drops gradients for tensors the region stores
        outside its outputs. A training script that relies on the default changes
        behaviour the day the default flips.

        Calls that pass `use_reentrant` as a variable, or pass `**kwargs` that may carry
        it, count as explicit. Wrappers whose mode is fixed by their library (torch's
        `checkpoint_wrapper`, DeepSpeed, Megatron, Hugging Face layers) are not flagged.
    """
    bad = """
        from torch.utils.checkpoint import checkpoint

        def forward(self, x):
            return checkpoint(self.block, x)
    """
    good = """
        from torch.utils.checkpoint import checkpoint

        def forward(self, x):
            return checkpoint(self.block, x, use_reentrant=False)
    """
    fixable = True
    remedy = """
        Pass `use_reentrant=False` (recommended by torch; check that nothing relies on
        reentrant behaviour) or `use_reentrant=True` to keep today's behaviour exactly.
        `ckptlint --fix` inserts `use_reentrant=True` (safe: no change in behaviour);
        `--fix --unsafe-fixes` inserts `use_reentrant=False`. A call where gradients
        already fail in reentrant mode (CKP301 or CKP302 at the same call) gets only the
        unsafe `use_reentrant=False`: keeping today's behaviour would keep the bug. A call
        that passes `**kwargs` gets no fix (it is not flagged either).
    """
    under_contexts = """
        Under `torch.compile` the omitted `use_reentrant` has no effect: compile runs the region
        non-reentrant (measured on torch 2.14 CPU), so the finding is a note there, naming the compile
        call (`checkpointed at model.py:21 under torch.compile(fullgraph=True) at train.py:7: no effect
        under compile`). The same call run eagerly elsewhere keeps the warning. A SAC `context_fn`
        needs `use_reentrant=False` anyway. See [regions.md](../regions.md#execution-contexts) for how the context is read; the finding's site says it and the severity follows.
    """

    def check(self, context: RuleContext) -> Iterator[Finding]:
        for call in context.calls:
            if not call.api.checks_use_reentrant:
                continue
            flag = call.use_reentrant
            if flag not in (OMITTED, NONE):
                continue
            callee = _callee_text(call)
            if flag == NONE:
                what = f"`use_reentrant=None` counts as not passed to {callee}"
            else:
                what = f"{callee} called without `use_reentrant`"
            summary = (
                f"{what}: torch 2.x falls back to the reentrant implementation with a warning; "
                "pass use_reentrant=False (recommended) or use_reentrant=True to keep today's behaviour"
            )
            # where gradients already fail in reentrant mode (CKP301/CKP302), keeping it is no fix
            fixes = context.non_reentrant_fix(call) if context.gradients_fail(call) else context.fixes_for(call)
            yield finding_at(call.module, call.node, self.code, summary, fixes=fixes)


def _callee_text(call: CheckpointCall) -> str:
    """`checkpoint()`, or `self._ckpt()` (a partial of checkpoint) when spelled otherwise."""
    api = call.api.name.rpartition(".")[2]
    func = getattr(call.node, "func", None)
    spelled = ast.unparse(func) if func is not None else api
    if len(spelled) > 40:
        spelled = spelled[:37] + "..."
    if spelled.rpartition(".")[2] == api:
        return f"{spelled}()"
    return f"{spelled}() (a {api})"
