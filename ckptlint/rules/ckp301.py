"""CKP301: no positional input of a reentrant region can require grad."""

from __future__ import annotations

import ast
from typing import Iterator

from ckptlint.finding import Finding
from ckptlint.rules.base import Rule, RuleContext, finding_at

# why an input cannot require grad, by the analysis's reason kind (analysis/usage/grad_flow.py)
WHY = {
    "detached": "is detached (`{detail}` at {at})",
    "no-grad-block": "is computed under `{detail}` ({at})",
    "created": "is created by `{detail}` without `requires_grad` ({at})",
    "integer": "comes from an integer tensor (`{detail}`, {at}), which cannot require grad",
    "tokens": "holds token ids from the tokenizer (`{detail}`, {at})",
    "frozen-embedding": "is the output of `{detail}`, an embedding frozen at {at}",
    "embedding-indices": "is what the region embeds (the indices of `{detail}`, {at}): an integer tensor, which cannot require grad",
    "buffer": "is the buffer `{detail}` (registered at {at}); buffers never require grad",
    "model-input": "is {detail} ({at})",
}


class NoInputRequiresGrad(Rule):
    code = "CKP301"
    name = "no-input-requires-grad"
    summary = "A reentrant checkpoint call none of whose positional tensor inputs can require grad."
    explanation = """
        The reentrant implementation (`use_reentrant=True`, and what torch 2.x falls back to
        when `use_reentrant` is not passed; Hugging Face's `_gradient_checkpointing_func`
        before transformers 5) is an autograd function of the call's *positional tensor
        inputs*. It runs the region under `torch.no_grad()` and connects the output to the
        graph only through those inputs. When none of them requires grad (token ids, the
        output of a frozen or `requires_grad_(False)` embedding, a `.detach()`ed tensor, a
        value computed under `torch.no_grad()`, a freshly created tensor), the output does not
        require grad: the parameters inside the region get `.grad is None`. torch only warns
        ("None of the inputs have requires_grad=True. Gradients will be None"), or `backward()`
        fails later with "element 0 of tensors does not require grad". This is the classic
        failure of fine-tuning a model with a frozen base (PEFT/LoRA) under gradient
        checkpointing.

        Reported only when the analysis knows every positional input cannot require grad; the
        message names each input and why. A parameter of the calling function is followed to
        every call of its method, in its module and the modules beside it (all of them must
        pass such a value), and up to the model's own input: the data an entry model is
        trained on (transformers' `main_input_name`, a diffusers model's first input, a timm
        model's input). So a vision model whose first checkpointed stage holds the patch
        embedding is reported: the stage receives the pixels. A checkpointing layer
        (`GradientCheckpointingLayer`) is judged at each call of an instance; a value carried
        from one reentrant region to the next in a loop is detached too, and a call whose
        later passes receive something else is reported for the loop's first pass. Calls under
        `torch.no_grad()` run no backward and are never reported.
    """
    bad = """
        import torch
        from torch.utils.checkpoint import checkpoint

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = torch.nn.Embedding(100, 16)
                self.embed.requires_grad_(False)
                self.block = torch.nn.Linear(16, 16)

            def forward(self, ids):
                h = self.embed(ids)
                return checkpoint(self.block, h, use_reentrant=True)
    """
    good = """
        import torch
        from torch.utils.checkpoint import checkpoint

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = torch.nn.Embedding(100, 16)
                self.embed.requires_grad_(False)
                self.block = torch.nn.Linear(16, 16)

            def forward(self, ids):
                h = self.embed(ids)
                return checkpoint(self.block, h, use_reentrant=False)
    """
    fixable = True
    remedy = """
        Use the non-reentrant implementation, `use_reentrant=False`, which tracks gradients to
        the parameters used inside the region whatever its inputs (torch recommends it). For
        Hugging Face models, `model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=
        {"use_reentrant": False})`, or `model.enable_input_require_grads()` to keep reentrant
        mode. Alternatively make an input require grad (`h.requires_grad_(True)`).

        `ckptlint --fix --unsafe-fixes` passes `use_reentrant=False` at calls whose API takes it
        (torch's `checkpoint` and partials of it). The fix is marked unsafe because it changes
        behaviour: the region's parameters start receiving gradients, which is the point, but it
        also overrides a mode that may have been written deliberately (`use_reentrant=True`).
    """
    confirmed_by = frozenset({"parameter-grad-missing:no-grad-input"})  # runtime/gradflow.py CONFIRMS_NO_GRAD_INPUT

    def check(self, context: RuleContext) -> Iterator[Finding]:
        for call in context.calls:
            inputs = context.no_grad_inputs(call)
            if not inputs:
                continue
            described = "; ".join(f"`{i.text}` " + WHY[i.reason.kind].format(detail=i.reason.detail, at=i.reason.at()) for i in inputs)
            loop = inputs[0].first_pass
            when = f" on the first pass of the loop at line {loop}" if loop is not None else ""
            layer = f" of the checkpointing layer `{call.node.name}`" if inputs[0].called_at is not None and isinstance(call.node, ast.ClassDef) else ""
            summary = (
                f"reentrant checkpoint{layer} ({context.reentrant_because(call)}) whose positional inputs cannot require grad{when}: "
                f"{described}; the output is detached and the region's parameters get no gradient "
                f"(torch warns \"None of the inputs have requires_grad=True\"); pass use_reentrant=False"
            )
            node = inputs[0].called_at or call.node  # a checkpointing layer: at the call of the instance
            yield finding_at(call.module, node, self.code, summary, fixes=context.non_reentrant_fix(call))
