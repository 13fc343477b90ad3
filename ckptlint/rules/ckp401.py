"""CKP401: a collective inside a checkpointed region, replayed at recompute."""

from ckptlint.analysis.regions.summary import COLLECTIVE_OP
from ckptlint.rules.base import CheckpointCall, Effect, RegionRule

_REPEATED = (
    "repeated cost: the replay runs it again at recompute (doubled communication, "
    "and every rank must recompute in the same order)"
)


class CollectiveInRegion(RegionRule):
    code = "CKP401"
    name = "collective-in-region"
    summary = "The region runs a collective (`all_reduce`, `all_gather`, `reduce_scatter`, `all_to_all`, DTensor `redistribute`/`full_tensor`, framework wrappers)."
    explanation = """
        Checkpoint drops the region's activations in forward and runs the region again in
        backward. Every collective inside it runs again too: a tensor-parallel all-reduce,
        a sequence-parallel all-gather, an expert all-to-all, a DTensor `full_tensor()`
        communicate twice per step. That doubles the region's communication, and since a
        collective only completes when every rank of the group joins it, every rank must
        recompute the same regions in the same order: a rank that skips or reorders a
        recompute (a different checkpointing choice, an early exit) leaves the others
        waiting.

        Recognised by qualified name after import resolution: `torch.distributed`
        collectives, functional collectives (`torch.distributed._functional_collectives`),
        `torch.distributed.nn.functional`, `deepspeed.comm`, and Megatron's tensor-parallel
        mappings whose forward communicates (`reduce_from_tensor_model_parallel_region`,
        `gather_from_sequence_parallel_region`, ...; `copy_to_...` and `scatter_to_...` do
        not communicate in forward and are not flagged). DTensor's `.redistribute()` and
        `.full_tensor()` are flagged on any receiver that is not a project class defining
        the method. A selective-checkpoint policy (`context_fn=partial(
        create_selective_checkpoint_contexts, [...])`) that saves the `_c10d_functional` op a
        functional collective or DTensor method emits keeps it from replaying; plain c10d
        calls are not saved that way.
    """
    bad = """
        import torch
        import torch.distributed as dist
        from torch.utils.checkpoint import checkpoint


        class RowParallelMLP(torch.nn.Module):
            def forward(self, x):
                y = self.down(torch.relu(self.up(x)))
                dist.all_reduce(y)  # tensor-parallel reduction
                return y


        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.mlp = RowParallelMLP()

            def forward(self, x):
                return checkpoint(self.mlp, x, use_reentrant=False)
    """
    good = """
        import functools

        import torch
        import torch.distributed._functional_collectives as funcol
        from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

        SAVED = [torch.ops._c10d_functional.all_reduce.default]


        class RowParallelMLP(torch.nn.Module):
            def forward(self, x):
                y = self.down(torch.relu(self.up(x)))
                return funcol.all_reduce(y, "sum", self.group)


        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.mlp = RowParallelMLP()

            def forward(self, x):
                policy = functools.partial(create_selective_checkpoint_contexts, SAVED)
                return checkpoint(self.mlp, x, use_reentrant=False, context_fn=policy)
    """
    remedy = """
        Checkpoint around the compute and keep the collective outside the region (checkpoint
        the MLP's matmuls, reduce after the call), or use a functional collective with a
        selective-checkpoint policy that saves its `_c10d_functional` op
        (`torch.ops._c10d_functional.all_reduce.default`), so the replay reuses the forward's
        result instead of communicating again.
    """
    confirmed_by = frozenset({"communication"})
    kinds = frozenset({COLLECTIVE_OP})
    messages = {
        "collective": "`{callee}()` is a collective ({family}) inside the region: " + _REPEATED,
        "wrapper": "`{callee}()` communicates in its forward ({family}) inside the region: " + _REPEATED,
        "tensor-method": "`{callee}()` communicates ({family} of a DTensor) inside the region: " + _REPEATED,
    }

    def applies(self, call: CheckpointCall, effect: Effect) -> bool:
        return not effect.saved_by(call.saved_ops)
