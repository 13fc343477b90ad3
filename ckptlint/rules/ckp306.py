"""CKP306: a reentrant region returns its tensors inside a dict, a dataclass or a ModelOutput."""

from __future__ import annotations

from typing import Iterator

from ckptlint.finding import Finding
from ckptlint.rules.base import Rule, RuleContext, finding_at


class UntrackedRegionOutput(Rule):
    code = "CKP306"
    name = "untracked-region-output"
    summary = "A reentrant region returns its tensors inside a dict, a dataclass or a ModelOutput: they come back detached."
    explanation = """
        The reentrant implementation is an `autograd.Function` applied to the region. It
        connects its output to the graph only for a returned tensor or the tensors of a
        returned tuple. A tensor returned inside anything else (a dict, a dataclass, a
        Hugging Face `ModelOutput` or a diffusers `BaseOutput`, both dict subclasses) comes
        back as the forward computed it, under `torch.no_grad()`: detached. Nothing before it
        gets a gradient: not the region's parameters, not its inputs, not the layers that
        produced them. torch raises nothing; with other outputs in the loss the step trains on.

        The common shape: a block checkpointed through a helper that cannot pass keywords
        (reentrant checkpoint rejects them), so `return_dict` keeps its default `True`.
        Reported when every return of the region that the call's arguments allow builds such
        a container (parameter tests such as `if not return_dict:` are followed, with the
        parameters bound to what the call passes or to their defaults).
    """
    bad = """
        import torch
        from torch.utils.checkpoint import checkpoint

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = torch.nn.Linear(16, 16)

            def forward(self, x, return_dict=True):
                out = self.proj(x)
                if not return_dict:
                    return (out,)
                return {"sample": out}

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Block()

            def forward(self, x):
                return checkpoint(self.block, x, use_reentrant=True)["sample"]
    """
    good = """
        import torch
        from torch.utils.checkpoint import checkpoint

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = torch.nn.Linear(16, 16)

            def forward(self, x, return_dict=True):
                out = self.proj(x)
                if not return_dict:
                    return (out,)
                return {"sample": out}

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Block()

            def forward(self, x):
                return checkpoint(self.block, x, False, use_reentrant=True)[0]
    """
    fixable = True
    remedy = """
        Have the region return a tensor or a tuple (pass `return_dict=False` positionally, or
        wrap the block in a function that returns `block(x).sample`), or use
        `use_reentrant=False`, which tracks tensors wherever the region returns them.

        `ckptlint --fix --unsafe-fixes` passes `use_reentrant=False` where the call's API takes
        it; unsafe because it changes how the region is replayed.
    """
    confirmed_by = frozenset({"parameter-grad-missing:untracked-output"})  # runtime/gradflow.py CONFIRMS_UNTRACKED_OUTPUT

    def check(self, context: RuleContext) -> Iterator[Finding]:
        for call in context.calls:
            found = context.untracked_output(call)
            if found is None:
                continue
            chosen = ", ".join(f"`{name}`" for name in found.defaulted)
            defaulted = f", with {chosen} left at its default" if chosen else ""
            summary = (
                f"reentrant checkpoint ({context.reentrant_because(call)}) of a region that returns its tensors inside a "
                f"`{found.container}` (`{found.region}` at {found.path}:{found.line}{defaulted}): reentrant checkpoint's "
                f"autograd.Function tracks only a returned tensor or a tuple's tensors, so the output comes back detached "
                f"and nothing before it gets a gradient; return a tuple or pass use_reentrant=False"
            )
            yield finding_at(call.module, call.node, self.code, summary, fixes=context.non_reentrant_fix(call))
