"""CKP502: an op packet (`torch.ops.aten.mm`) where a selective-checkpoint policy needs an overload."""

from __future__ import annotations

from typing import Iterator

from ckptlint.finding import Finding
from ckptlint.rules.base import Rule, RuleContext, finding_at

_MESSAGES = {
    "list": "`torch.ops.{packet}` is an op packet, not an overload, in a selective-checkpoint op list: torch raises "
    "`ValueError: Expected op in `op_list` to be an OpOverload` when the checkpointed forward builds the policy; "
    "write `torch.ops.{packet}.default`",
    "predicate": "`torch.ops.{packet}` is an op packet, not an overload, and the policy function compares ops with it: "
    "the dispatcher passes overloads (`torch.ops.{packet}.default`), so the test is never true and the op is silently "
    "recomputed instead of saved; write `torch.ops.{packet}.default`",
}


class OpPacketInPolicy(Rule):
    code = "CKP502"
    name = "op-packet-in-sac-policy"
    summary = "A selective-checkpoint policy names an op packet (`torch.ops.aten.mm`) instead of an overload (`torch.ops.aten.mm.default`)."
    explanation = """
        `create_selective_checkpoint_contexts` compares the op each dispatch runs, an
        `OpOverload` (`torch.ops.aten.mm.default`), with the ops the policy names. An
        `OpOverloadPacket` (`torch.ops.aten.mm`, every overload of `mm`) is not one. Measured
        on torch 2.13:

        - in the op list given to `create_selective_checkpoint_contexts` (directly or through
          `functools.partial`), torch checks the list's entries and raises `ValueError:
          Expected op in `op_list` to be an OpOverload but got: aten.mm of type <class
          'torch._ops.OpOverloadPacket'>` each time the checkpointed forward calls the
          `context_fn` (with or without grad);
        - in a collection a policy function tests with `func in OPS` or `func == OP`, nothing
          checks it: `torch.ops.aten.mm.default == torch.ops.aten.mm` is false, the policy
          never saves the op and the region recomputes it silently (the memory and compute
          trade-off is not the one chosen; a communication op meant to be saved is replayed).

        Reported at the entry, in any module that builds a policy, whether or not a checkpoint
        call uses it there (torchtitan builds its policies in a helper).
    """
    bad = """
        import functools

        import torch
        from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

        SAVE = [torch.ops.aten.mm, torch.ops.aten.addmm.default]


        def forward(block, x):
            policy = functools.partial(create_selective_checkpoint_contexts, SAVE)
            return checkpoint(block, x, use_reentrant=False, context_fn=policy)
    """
    good = """
        import functools

        import torch
        from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

        SAVE = [torch.ops.aten.mm.default, torch.ops.aten.addmm.default]


        def forward(block, x):
            policy = functools.partial(create_selective_checkpoint_contexts, SAVE)
            return checkpoint(block, x, use_reentrant=False, context_fn=policy)
    """
    remedy = """
        Name the overload: `torch.ops.aten.mm.default` (or the overload the op dispatches,
        `torch.ops.aten.sort.stable`); list each overload the policy should save.
    """
    confirmed_by = frozenset({"error"})

    def check(self, context: RuleContext) -> Iterator[Finding]:
        if context.composition is None:
            return
        for entry in context.composition.op_packets():
            yield finding_at(context.module, entry.node, self.code, _MESSAGES[entry.variant].format(packet=entry.packet))
