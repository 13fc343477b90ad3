"""CKP304: checkpointed outputs differentiated by `autograd.grad`, `backward(inputs=...)` or `torch.func`."""

from __future__ import annotations

from typing import Iterator

from ckptlint.finding import Finding, Fix
from ckptlint.rules.base import Rule, RuleContext, finding_at


class CheckpointDifferentiatedByGrad(Rule):
    code = "CKP304"
    name = "checkpoint-differentiated-by-grad"
    summary = (
        "Outputs of a reentrant region are differentiated by `torch.autograd.grad` or `backward(inputs=...)`, "
        "or of any checkpointed region by a `torch.func` transform."
    )
    explanation = """
        Reentrant checkpoint runs its replay inside its own `backward()` and only supports a
        plain `.backward()`: `torch.autograd.grad(...)` and `.backward(inputs=...)` raise
        `When use_reentrant=True, torch.utils.checkpoint is incompatible with .grad() or
        passing an inputs parameter to .backward()`, and so do `torch.autograd.functional`'s
        `jacobian`, `hessian`, `vjp` and friends, which call `autograd.grad`.

        `torch.func` transforms fail on checkpointed regions in both modes (torch 2.13):
        `grad`, `grad_and_value`, `vjp`, `jacrev` and `hessian` raise on a reentrant region
        (an `autograd.Function` without `setup_context`) and on a non-reentrant one (`don't
        yet support saved tensor hooks`); `jacfwd` and `jvp` fail only on reentrant regions.

        Reported at the differentiating call, when what it differentiates is computed, in
        the same function, by a checkpoint call or by a model built from a project class
        that holds one (for `torch.func`: the function it transforms runs one); not through
        `.detach()` or `.data`. A model that reaches the function as an unannotated parameter
        is what this module's calls pass it (up to three calls out); when nothing here calls
        the function (its tests or another file do), the parameter is the module's model
        class it is named after (`critic` for `Critic`, `gen` for `Generator`), and `model`,
        `net` or `network` the one module class no other class here builds, when it builds
        another of them or the module differentiates something (a training script, not a
        layer library).
    """
    bad = """
        import torch
        from torch.utils.checkpoint import checkpoint


        def penalty(block, x):
            y = checkpoint(block, x, use_reentrant=True)
            (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
            return g.pow(2).mean()
    """
    good = """
        import torch
        from torch.utils.checkpoint import checkpoint


        def penalty(block, x):
            y = checkpoint(block, x, use_reentrant=False)
            (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
            return g.pow(2).mean()
    """
    fixable = True
    confirmed_by = frozenset({"differentiation"})  # runtime/differentiation.py, joined at the differentiating call
    remedy = """
        For `autograd.grad` and `backward(inputs=...)`: pass `use_reentrant=False` to the
        checkpoint call (or differentiate with a plain `.backward()`). `--fix
        --unsafe-fixes` adds `use_reentrant=False` when the checkpoint call is in the same
        file. For `torch.func` transforms: do not checkpoint inside the transformed function
        (checkpoint outside the transform, or use `jacfwd`/`jvp` with non-reentrant
        checkpointing).
    """

    def check(self, context: RuleContext) -> Iterator[Finding]:
        if context.composition is None:
            return
        for hazard in context.composition.differentiations():
            model = f" through {hazard.model}" if hazard.model else ""
            if hazard.every_mode:
                summary = (
                    f"{hazard.what} transforms a function that runs a checkpointed region{model}: torch.func's "
                    "grad, vjp, jacrev and hessian fail on checkpointed regions in either mode; checkpoint outside the transform"
                )
                fixes: tuple[Fix, ...] = ()
            else:
                summary = (
                    f"{hazard.what} differentiates the output of a reentrant checkpoint{model}: reentrant checkpoint "
                    "only supports .backward() and raises here; pass use_reentrant=False to the checkpoint call"
                )
                fixes = tuple(fix for call in hazard.checkpoints for fix in context.use_reentrant_false(call))
            yield finding_at(context.module, hazard.node, self.code, summary, {context.site(c) for c in hazard.checkpoints}, fixes)
