"""CKP405: reentrant checkpointing of a module sharded by FSDP2 `fully_shard`."""

from __future__ import annotations

from typing import Iterator

from ckptlint.catalogue import CALLABLE
from ckptlint.finding import Finding
from ckptlint.rules.base import Rule, RuleContext, context_place, finding_at


class ReentrantCheckpointUnderFullyShard(Rule):
    code = "CKP405"
    name = "reentrant-checkpoint-fully-shard"
    summary = "Reentrant activation checkpointing of a module sharded by FSDP2 `fully_shard`."
    explanation = """
        `fully_shard` (FSDP2) unshards a module's parameters in a forward pre-hook and
        schedules their resharding and gradient reduce-scatter from autograd hooks it
        registers on the forward's tensors. Reentrant checkpointing runs the forward under
        `torch.no_grad()` and replays it inside backward with a separate `autograd.backward`
        call: the hooks FSDP2 relies on are not attached in the first forward, and the
        recompute can start before the unit's backward pre-hook has run, so FSDP2 must tell
        a recompute from a forward by whether an autograd graph task is running. Where that
        fails (several forwards before one backward, nested units resharded by an earlier
        post-backward) the recompute finds parameters still sharded (`got mixed
        torch.Tensor and DTensor`, pytorch/pytorch#153354) or leaves them unsharded after
        backward. FSDP2's maintainers support only non-reentrant checkpointing with it
        (`use_reentrant=False`, `CheckpointImpl.NO_REENTRANT`, composable `checkpoint`),
        which keeps the region in the forward's graph. (On torch 2.13, one forward and one
        backward per step through `fully_shard` units with reentrant checkpointing trained
        bit-identically to no checkpointing in ckptlint's two-rank test; the finding is
        about the configurations above and torch releases that do not special-case it.)

        Reported at the checkpoint call or wrapper: `checkpoint_wrapper(block,
        checkpoint_impl=CheckpointImpl.REENTRANT)` with `fully_shard(block)` in the same
        function (either order: the wrapper replays when the sharded module runs),
        `checkpoint(block, x, use_reentrant=True)` (or with `use_reentrant` omitted, which
        torch 2.x treats as reentrant) after `fully_shard(block)`, and a reentrant
        `apply_activation_checkpointing` whose `check_fn` selects `FSDPModule` or the class of
        modules sharded before it. `fully_shard(model)` of a model built from a project class
        whose own code (or a registered submodule's) checkpoints reentrantly is reported at each
        of those checkpoint calls, naming the `fully_shard(...)` call, and so is a reentrant
        checkpoint of a container attribute's blocks that a setup function shards from outside
        (`for block in model.layers: fully_shard(block)`; CKP403 says when). Reentrant checkpointing around
        a sharded module is both this and CKP403.
    """
    bad = """
        import torch.nn as nn
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
        from torch.distributed.fsdp import fully_shard


        def parallelize(model: nn.Module):
            for index, block in enumerate(model.layers):
                block = checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.REENTRANT)
                model.layers[index] = block
                fully_shard(block)
            fully_shard(model)
    """
    good = """
        import torch.nn as nn
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
        from torch.distributed.fsdp import fully_shard


        def parallelize(model: nn.Module):
            for index, block in enumerate(model.layers):
                block = checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
                model.layers[index] = block
                fully_shard(block)
            fully_shard(model)
    """
    remedy = """
        Use non-reentrant checkpointing: `checkpoint_impl=CheckpointImpl.NO_REENTRANT` (the
        wrapper's default), `use_reentrant=False` for `torch.utils.checkpoint.checkpoint`, or
        composable `torch.distributed._composable.checkpoint(block)` before `fully_shard(block)`.
    """

    def check(self, context: RuleContext) -> Iterator[Finding]:
        if context.composition is None:
            return
        reported: set[int] = set()
        for found in context.composition.sharded_checkpoints():
            call = found.call
            if not found.fsdp2 or call.reentrant is not True or id(call.node) in reported:
                continue
            if call.api.region_kind == CALLABLE and not found.sharded_first:
                continue  # `checkpoint(block, x)` runs now: a later fully_shard does not shard what it ran
            reported.add(id(call.node))
            sharding = found.sharding
            where = f"{found.what}, sharded by fully_shard at {context_place(context, found.call, sharding.node)}" if sharding is not None else found.what
            summary = (
                f"reentrant checkpointing ({context.reentrant_because(call)}) of a module sharded by fully_shard ({where}): "
                "FSDP2's unshard, reshard and reduce-scatter hooks do not run under a reentrant replay; use non-reentrant checkpointing"
            )
            yield finding_at(call.module, call.node, self.code, summary)
        for hazard in context.composition.reentrant_sharded_models():
            sharded_at = f"{context.module.source.display_path}:{hazard.node.lineno}"
            for call in hazard.checkpoints:  # reported at the checkpoint call, as the contract says, wherever it is
                summary = (
                    f"reentrant checkpointing ({context.reentrant_because(call)}) in {hazard.model}, which fully_shard shards "
                    f"at {sharded_at}: FSDP2's unshard, reshard and reduce-scatter hooks do not run under a reentrant replay; "
                    "use non-reentrant checkpointing (use_reentrant=False)"
                )
                yield finding_at(call.module, call.node, self.code, summary)

