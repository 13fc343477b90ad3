"""CKP302: a tensor needing grad reaches a reentrant region other than as a positional input."""

from __future__ import annotations

import ast
from typing import Iterator

from ckptlint.finding import Finding
from ckptlint.rules.base import Rule, RuleContext, finding_at

ROUTES = {
    "keyword": "the keyword argument `{name}`",
    "partial": "`{name}`, bound by `functools.partial`,",
    "closure": "`{name}`, captured from the enclosing function,",
    "global": "the module-level `{name}`",
    "layer-keyword": "the keyword argument `{name}`, which the checkpointing layer binds into a `functools.partial`,",
    "container": "`{name}`, a list, tuple or dict passed positionally (only top-level tensors are inputs), holding a tensor that",
}
WHY = {
    "trainable-output": "the output of `{detail}` ({at}), a layer with trainable parameters",
    "parameter": "an `nn.Parameter` ({at})",
    "requires-grad": "created with requires_grad (`{detail}`, {at})",
}
CONSEQUENCES = {
    "raises": "torch's reentrant checkpoint accepts no keyword arguments for the region: it raises "
    "`ValueError: Unexpected keyword arguments: {name}`; pass it positionally or use use_reentrant=False",
    "dropped": "no positional input requires grad, so the region's output is detached and the gradient "
    "to it (and to the region's parameters) is dropped; pass it positionally or use use_reentrant=False",
    "graph-reused": "it is not a checkpoint input: the region's inner backward runs through its graph and "
    "frees it, so its other use fails with \"Trying to backward through the graph a second time\"; "
    "pass it positionally or use use_reentrant=False",
}


class TensorOutsidePositionalInputs(Rule):
    code = "CKP302"
    name = "tensor-outside-positional-inputs"
    summary = "A tensor that needs grad reaches a reentrant region by keyword, closure, `partial` or global."
    explanation = """
        The reentrant implementation tracks only the call's positional tensor inputs. A tensor
        that reaches the region any other way is invisible to it:

        - keyword arguments: torch's `checkpoint(fn, x, mask=m, use_reentrant=True)` raises
          `ValueError: Unexpected keyword arguments: mask` (every torch 2.x release);
        - `functools.partial(fn, t)`, a closure or lambda capturing `t`, a module-level `t`:
          the forward runs under `torch.no_grad()`, and backward recomputes the region and
          calls an inner `backward` through `t`'s own graph, freeing it. If `t`'s graph is
          used again (a residual, the next layer of a loop, another region), backward fails
          with "Trying to backward through the graph a second time"; if no positional input
          requires grad, the region's output is detached and `t` gets no gradient at all.

        A checkpointing layer (`GradientCheckpointingLayer`) checkpoints the positional
        arguments of each call of an instance and binds its keyword arguments into
        `partial(forward, self, **kwargs)`: a keyword tensor is captured the same way. So is a
        tensor inside a list, tuple or dict passed positionally: only top-level tensors are
        inputs.

        Reported when the tensor is known to be able to require grad (the output of a layer
        with trainable parameters, an `nn.Parameter` or a layer's weight, `requires_grad=True`,
        or a value computed from one, here or by a caller of the function) and the failure
        is known: keyword arguments to torch's checkpoint always fail; a captured tensor when
        it is used again or no positional input requires grad. Parameters the region reads as
        `self.<attr>` are not captured tensors: their gradients arrive.
    """
    bad = """
        import torch
        from torch.utils.checkpoint import checkpoint

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.bias = torch.nn.Linear(16, 16)
                self.layers = torch.nn.ModuleList([torch.nn.Linear(16, 16) for _ in range(2)])

            def forward(self, x):
                bias = self.bias(x)
                for layer in self.layers:
                    x = checkpoint(lambda h: layer(h) + bias, x, use_reentrant=True)
                return x
    """
    good = """
        import torch
        from torch.utils.checkpoint import checkpoint

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.bias = torch.nn.Linear(16, 16)
                self.layers = torch.nn.ModuleList([torch.nn.Linear(16, 16) for _ in range(2)])

            def forward(self, x):
                bias = self.bias(x)
                for layer in self.layers:
                    x = checkpoint(lambda h, b: layer(h) + b, x, bias, use_reentrant=True)
                return x
    """
    fixable = True
    remedy = """
        Pass the tensor as a positional argument of the checkpoint call (the region takes it as
        a parameter), or use `use_reentrant=False`, which tracks every tensor the region uses
        and accepts keyword arguments. For Hugging Face layers, pass tensors that need grad
        positionally (`layer(hidden_states, position_bias)`), or enable gradient checkpointing
        with `gradient_checkpointing_kwargs={"use_reentrant": False}`.

        `ckptlint --fix --unsafe-fixes` passes `use_reentrant=False` where the call's API takes
        it; unsafe because it changes how the region is replayed.
    """
    confirmed_by = frozenset({"parameter-grad-missing:non-positional"})  # runtime/gradflow.py CONFIRMS_NON_POSITIONAL

    def check(self, context: RuleContext) -> Iterator[Finding]:
        for call in context.calls:
            found = context.untracked_tensors(call)
            if not found:
                continue
            parts = []
            for tensor in found:
                route = ROUTES[tensor.route].format(name=tensor.name)
                if tensor.reason is None:
                    parts.append(f"{route}: {CONSEQUENCES[tensor.consequence].format(name=tensor.name)}")
                    continue
                why = WHY[tensor.reason.kind].format(detail=tensor.reason.detail, at=tensor.reason.at())
                # a computed tensor that needs grad because of one of these is not itself a leaf
                verb = "derives from" if not tensor.reason.leaf and tensor.reason.kind != "trainable-output" else "is"
                parts.append(f"{route} {verb} {why}; {CONSEQUENCES[tensor.consequence]}")
            keywords_only = all(tensor.consequence == "raises" for tensor in found)  # any keyword raises, tensor or not
            what = "a keyword argument for the region" if keywords_only else "a tensor that is not a positional input"
            node = found[0].called_at or call.node  # a checkpointing layer: at the call of the instance
            layer = f" of the checkpointing layer `{call.node.name}`" if found[0].called_at is not None and isinstance(call.node, ast.ClassDef) else ""
            summary = f"reentrant checkpoint{layer} ({context.reentrant_because(call)}) reached by {what}: " + "; ".join(parts)
            yield finding_at(call.module, node, self.code, summary, fixes=context.non_reentrant_fix(call))
