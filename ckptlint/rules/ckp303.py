"""CKP303: reentrant checkpointing in a model wrapped by `DistributedDataParallel(find_unused_parameters=True)`."""

from __future__ import annotations

from typing import Iterator

from ckptlint.finding import Finding
from ckptlint.rules.base import Rule, RuleContext, finding_at


class ReentrantUnderDdpUnusedParameters(Rule):
    code = "CKP303"
    name = "reentrant-checkpoint-ddp-find-unused"
    summary = (
        "A model that checkpoints reentrantly is wrapped by `DistributedDataParallel(find_unused_parameters=True)`, "
        "or reaches a region's parameters outside it too without `static_graph=True`."
    )
    explanation = """
        With `find_unused_parameters=True`, DDP walks the autograd graph after each forward
        and marks every parameter it cannot reach as ready. A reentrant checkpoint hides
        its region's parameters from that walk (the forward ran under `no_grad`), so DDP
        marks them ready at once; the replay in backward then computes their gradients and
        DDP's hooks mark them ready a second time: backward fails with `Expected to mark a
        variable ready only once`. Non-reentrant checkpointing keeps the region in the
        graph and works with DDP.

        Reported at the `DistributedDataParallel(...)` call when the wrapped model is built
        from a project class whose methods, or those of the modules it registers, hold a
        reentrant checkpoint call (`use_reentrant=True`, or omitted, which torch 2.x treats
        as reentrant). A checkpoint call under a flag that is off at run time still counts.
        Without `find_unused_parameters` (and without `static_graph=True`) the same error
        comes from a parameter reached twice: a module that is a reentrant region
        (`checkpoint(self.norm, x)`) and is also called outside any region in the same class
        (`self.norm(y)`), checkpointed again in another call, or checkpointed on every pass
        of a loop, is marked ready by more than one backward pass. That is reported too, for
        regions named `self.<module>`; a different module on each pass
        (`for block in self.blocks`) is not a parameter reached twice.
    """
    bad = """
        import torch
        from torch.nn.parallel import DistributedDataParallel
        from torch.utils.checkpoint import checkpoint


        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.block = torch.nn.Linear(8, 8)

            def forward(self, x):
                return checkpoint(self.block, x, use_reentrant=True)


        def setup():
            return DistributedDataParallel(Net(), find_unused_parameters=True)
    """
    good = """
        import torch
        from torch.nn.parallel import DistributedDataParallel
        from torch.utils.checkpoint import checkpoint


        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.block = torch.nn.Linear(8, 8)

            def forward(self, x):
                return checkpoint(self.block, x, use_reentrant=False)


        def setup():
            return DistributedDataParallel(Net(), find_unused_parameters=True)
    """
    fixable = True
    confirmed_by = frozenset({"ddp"})  # runtime/ddp.py DDP_CATEGORY, joined where the DDP was built
    remedy = """
        Pass `use_reentrant=False` to the checkpoint call, or drop
        `find_unused_parameters=True` if every parameter is used in every step (or use
        `static_graph=True`, which also lets a parameter be reached twice). `--fix --unsafe-fixes` adds `use_reentrant=False` when the
        checkpoint call is in the same file (unsafe: it changes the implementation for every
        user of the model, not only this DDP run).
    """

    def check(self, context: RuleContext) -> Iterator[Finding]:
        if context.composition is None:
            return
        for hazard in context.composition.ddp_wrappings():
            if hazard.reached_twice:
                summary = (
                    f"DistributedDataParallel wraps {hazard.model}, which checkpoints reentrantly and reaches a parameter twice: "
                    f"{hazard.reached_twice}; the outer backward and the region's reentrant backward both mark its parameters "
                    "ready, and backward fails with \"Expected to mark a variable ready only once\"; pass use_reentrant=False "
                    "to the checkpoint call or static_graph=True to DistributedDataParallel"
                )
            else:
                summary = (
                    f"DistributedDataParallel(find_unused_parameters=True) wraps {hazard.model}, which checkpoints reentrantly: backward fails with \"Expected to mark a variable ready only once\"; "
                    "pass use_reentrant=False to the checkpoint call or drop find_unused_parameters"
                )
            fixes = tuple(fix for call in hazard.checkpoints for fix in context.use_reentrant_false(call))
            yield finding_at(context.module, hazard.node, self.code, summary, {context.site(c) for c in hazard.checkpoints}, fixes)
