"""CKP505: selective checkpointing under an outer saved-tensors hook, whose saved outputs bypass it."""

from __future__ import annotations

import ast
from typing import Iterator

from ckptlint.finding import Finding, Fix
from ckptlint.rules.base import Rule, RuleContext, finding_at

RESPECTING_TORCH = (2, 14)  # the release that added `respect_saved_tensors_hooks` (pytorch#190581)
_BYPASS = (
    "the tensors the selective-checkpoint policy saves are kept by its own cache and never pass the outer `{hook}` "
    "pack hook (torch 2.13: only the region's inputs reach it)"
)
_MESSAGES = {
    "has-parameter": _BYPASS + "; {torch} has `respect_saved_tensors_hooks`: pass `respect_saved_tensors_hooks=True` "
    "so they are packed by the hook too",
    "no-parameter": _BYPASS + "; {torch} has no `respect_saved_tensors_hooks` (added in 2.14), so nothing can be passed: "
    "offload without SAC, save fewer ops, or upgrade",
    "unknown": _BYPASS + "; torch 2.14 and later take `respect_saved_tensors_hooks=True` to pack them too, "
    "earlier releases cannot (set `target-versions = {{ torch = \"...\" }}` to say which)",
}


class SacBypassesSavedTensorHooks(Rule):
    code = "CKP505"
    name = "sac-bypasses-saved-tensors-hooks"
    summary = "A selective-checkpoint call runs inside `save_on_cpu` / `saved_tensors_hooks` without `respect_saved_tensors_hooks=True`: the outputs the policy saves bypass the outer hook."
    explanation = """
        Non-reentrant checkpointing installs its own saved-tensor hooks for the region; the
        outputs a selective-checkpoint policy saves go into the policy's own cache. Neither
        passes through a `torch.autograd.graph.save_on_cpu()` or `saved_tensors_hooks(pack,
        unpack)` context around the call. Measured on torch 2.13 CPU: with a pack hook around
        `checkpoint(relu(mm(x, w)), context_fn=<save aten.mm>)`, the hook sees only the
        region's input `(3, 5)`; without checkpointing it sees the weight, the input and the
        mm output. Under `save_on_cpu` the saved matmul outputs therefore stay on the
        accelerator: the memory the offload was meant to free is not freed, and a hook that
        quantises or records saved tensors misses them.

        torch 2.14 adds `checkpoint(..., respect_saved_tensors_hooks=...)` (pytorch#190581;
        requires `use_reentrant=False`): `True` sends the cached outputs through the outer
        hooks, `None` (the default) keeps the old behaviour and warns when hooks are active.
        The torch version comes from `target-versions`, the environment or the project's pins
        (versions.py). Reported at the checkpoint call, when the hook is a `with` around it in
        the same function or, through the call's execution context, around a module that
        holds it.
    """
    bad = """
        import functools

        import torch
        from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

        SAVE_MM = functools.partial(create_selective_checkpoint_contexts, [torch.ops.aten.mm.default])


        def forward(block, x):
            with torch.autograd.graph.save_on_cpu(pin_memory=True):
                return checkpoint(block, x, use_reentrant=False, context_fn=SAVE_MM)
    """
    good = """
        import functools

        import torch
        from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

        SAVE_MM = functools.partial(create_selective_checkpoint_contexts, [torch.ops.aten.mm.default])


        def forward(block, x):
            with torch.autograd.graph.save_on_cpu(pin_memory=True):
                return checkpoint(block, x, use_reentrant=False)  # plain checkpointing: nothing cached
    """
    remedy = """
        On torch 2.14 or later pass `respect_saved_tensors_hooks=True` (`--fix --unsafe-fixes`
        adds it where the torch version is known to have it). On earlier releases there is
        nothing to pass: drop the policy under the hook, save fewer ops, or upgrade.
    """
    confirmed_by = frozenset()

    def check(self, context: RuleContext) -> Iterator[Finding]:
        if context.composition is None:
            return
        for found in context.composition.hooked_selective_calls(context.execution_context):
            if found.respects is not None and found.respects != "None":
                continue  # chosen explicitly (True: respected; False: the legacy behaviour, on purpose)
            call = found.call
            torch = call.versions.get("torch")
            fixes: tuple[Fix, ...] = ()
            if torch is None:
                variant, described = "unknown", ""
            elif torch.within(RESPECTING_TORCH, None):
                variant, described = "has-parameter", torch.describe()
                if isinstance(call.node, ast.Call):
                    fixes = context.keyword_fix(call.module, call.node, "respect_saved_tensors_hooks", "True", False, "Pass `respect_saved_tensors_hooks=True`")
            elif torch.within(None, RESPECTING_TORCH):
                variant, described = "no-parameter", torch.describe()
            else:
                variant, described = "unknown", ""
            message = _MESSAGES[variant].format(hook=found.hook, torch=described)
            yield finding_at(call.module, call.node, self.code, message, (), fixes)
