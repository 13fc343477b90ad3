"""CKP403: checkpointing applied around a module FSDP already sharded, rather than inside it."""

from __future__ import annotations

import ast
from typing import Iterator

from ckptlint.finding import Finding
from ckptlint.rules.base import Rule, RuleContext, context_place, finding_at


class CheckpointAroundShardedModule(Rule):
    code = "CKP403"
    name = "checkpoint-around-fsdp-unit"
    summary = "Activation checkpointing wraps a module that FSDP (`FullyShardedDataParallel` or `fully_shard`) has already sharded, instead of running inside it."
    explanation = """
        FSDP all-gathers a unit's parameters in the unit's forward pre-hook, frees them after
        its forward and all-gathers them again in backward for the gradient. A checkpoint
        placed *around* the FSDP unit replays the unit's whole forward in backward, FSDP's
        hooks included, while FSDP is in its backward state. FSDP treats that as a special
        case: its pre- and post-forward hooks return early in the recompute (torch 2.13:
        `_pre_forward` in `PRE_BACKWARD` state, FSDP1's `BACKWARD_PRE` handle state), so on
        current torch the recompute issues no extra all-gather (the runtime companion
        measures it: `communication.recompute` stays empty). What the early return skips is
        the problem: up to torch 2.12 the recompute skipped FSDP2's mixed-precision input
        cast, so the replay ran in another dtype than the forward (`CheckpointError`
        metadata mismatches, dtype errors in matmul); FSDP1 rejected checkpoint wrappers
        around its units outright in older releases; the order of prefetches FSDP records
        in the first iteration includes the recompute; and with several forwards before one
        backward the parameters of a unit already resharded by a post-backward are gathered
        again for the recompute. Checkpointing *inside* the unit (checkpoint each block
        first, then shard the wrapped block, as torchtitan does; or FSDP with an
        `auto_wrap_policy` and `apply_activation_checkpointing` whose `check_fn` selects the
        inner block class) never takes that path: the recompute runs only the block's own
        computation while the unit's parameters are gathered for backward anyway.

        Reported at the checkpoint call or wrapper (`checkpoint_wrapper(block)`,
        `checkpoint(block, x)`, composable `checkpoint(block)`) when, earlier in the same
        function (not in the other arm of an `if`), `fully_shard(block)` sharded the same module (in place, or bound to a name:
        `m = FullyShardedDataParallel(block)` then `checkpoint_wrapper(m)`; fairscale's
        `FullyShardedDataParallel` and its `wrap(module)` count as FSDP1, and so do a project
        subclass of an FSDP class and a project function, named for it (`fsdp_wrap`,
        `shard_layer`), that returns one of these applied to its first parameter), and at
        `apply_activation_checkpointing` whose `check_fn` selects `FullyShardedDataParallel` or
        `FSDPModule` instances, or the class of modules `fully_shard` sharded before it. A
        module is followed through the bindings of its name in the function (a later
        `block = Block()` is another module) and through loops over the same modules
        (`for block in model.layers`); sharding *after* checkpointing is the correct order and
        is silent when what is sharded is the wrapper (`fully_shard(checkpoint_wrapper(block))`,
        torchtitan's order), as is a module sharded in another function, with one exception:
        a model's own forward checkpointing the blocks of a container attribute (`for layer in
        self.layers: x = checkpoint(layer, x)`, `self.blocks[i]`) whose blocks a setup function
        shards with `fully_shard` (a loop over `model.layers`, `model.blocks[0]`; the model read
        as CKP304 reads a model parameter) is reported at the forward's checkpoint call, since
        sharding runs before any forward; so is a checkpoint in the model's code (its classes and
        the modules they build) whose region is an instance of a class that
        `FullyShardedDataParallel(model, auto_wrap_policy=...)` makes a unit of, the policy named
        literally (`ModuleWrapPolicy({Block})`, `functools.partial(transformer_auto_wrap_policy,
        transformer_layer_cls={Block})`, or a name bound to one), or a wrap function whose body
        tests `isinstance(module, Block)` (a def, a lambda given to `lambda_auto_wrap_policy`, or
        each function a call such as `model.get_fsdp_wrap_policy(strategy)` may return: one
        per strategy, any of which may be configured); a size-based policy is not followed.
        A transformers model's `gradient_checkpointing_enable()` (the model from `from_pretrained`
        or a PEFT wrap, as CKP305 reads it) is reported when the same function shards its decoder
        layers with `fully_shard` (`for layer in model.model.layers`, `model.model.layers[0]`):
        transformers checkpoints each layer's `__call__`, FSDP2's hooks included; sharding only
        the root is silent. Sharding the module a
        `checkpoint_wrapper` already holds (`wrapped = checkpoint_wrapper(block)` then
        `fully_shard(block)`) shards it in place inside the wrapper: reported at the wrapper. Lightning's
        `FSDPStrategy(auto_wrap_policy={A}, activation_checkpointing_policy={C})` shards the A
        modules first and then checkpoint-wraps each C: reported at the `FSDPStrategy(...)` call
        when a C holds an A (`{torch.nn.Linear}` sharded, `{Block}` checkpointed), not when C is
        itself in `auto_wrap_policy` (the checkpoint then runs inside the unit).
    """
    bad = """
        import torch.nn as nn
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
        from torch.distributed.fsdp import fully_shard


        def parallelize(model: nn.Module):
            for index, block in enumerate(model.layers):
                fully_shard(block)
                model.layers[index] = checkpoint_wrapper(block)
            fully_shard(model)
    """
    good = """
        import torch.nn as nn
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
        from torch.distributed.fsdp import fully_shard


        def parallelize(model: nn.Module):
            for index, block in enumerate(model.layers):
                block = checkpoint_wrapper(block)
                model.layers[index] = block
                fully_shard(block)
            fully_shard(model)
    """
    confirmed_by = frozenset({"communication"})  # collectives observed in the recompute (runtime companion)
    remedy = """
        Checkpoint first, then shard what checkpointing returned: `block =
        checkpoint_wrapper(block)` (or composable `checkpoint(block)`), then
        `fully_shard(block)`. With FSDP1, wrap with an `auto_wrap_policy` and call
        `apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, Block))`,
        selecting the inner block class rather than `FullyShardedDataParallel`.
    """

    def check(self, context: RuleContext) -> Iterator[Finding]:
        if context.composition is None:
            return
        reported: set[int] = set()
        for found in context.composition.sharded_checkpoints():
            if not found.wraps_unit or id(found.call.node) in reported:
                continue
            reported.add(id(found.call.node))
            sharding = found.sharding
            if sharding is None:
                where = found.what
            elif found.sharded_first:
                where = f"{found.what}, already sharded by {sharding.what} at {context_place(context, found.call, sharding.node)}"
            else:
                where = f"{found.what}, which {sharding.what} at {context_place(context, found.call, sharding.node)} shards in place inside the wrapper"
            summary = (
                f"checkpointing wraps an FSDP unit ({where}): the recompute in backward re-runs the unit's forward hooks in FSDP's "
                "backward state, a special case that skips their work (up to torch 2.12 the mixed-precision input cast: the replay "
                "runs in another dtype); checkpoint the module first, then shard it"
            )
            yield finding_at(found.call.module, found.call.node, self.code, summary)
        for layers in context.composition.hf_sharded_layers():
            summary = (
                f"{ast.unparse(layers.node.func)}() checkpoints each of the transformers model's layers around its FSDP unit "
                f"(`{layers.layers}`, sharded by fully_shard at line {layers.sharding.lineno}): transformers checkpoints each "
                "layer's `__call__`, FSDP2's hooks included, so the recompute in backward re-runs them in FSDP's backward state; "
                "checkpoint inside the unit instead (`checkpoint_wrapper` each layer, then `fully_shard` it)"
            )
            yield finding_at(context.module, layers.node, self.code, summary)
        for call, checkpointed, sharded in context.composition.strategy_wraps():
            summary = (
                f"FSDPStrategy checkpoints {checkpointed} (activation_checkpointing_policy) around the {sharded} modules it "
                f"holds, which the strategy has already sharded as FSDP units (auto_wrap_policy): the recompute in backward "
                f"re-runs those units' forward hooks in FSDP's backward state; shard {checkpointed} itself (put it in "
                "auto_wrap_policy) so the checkpoint runs inside the unit"
            )
            yield finding_at(context.module, call, self.code, summary)

