"""CKP404: the same model checkpointed twice, by its own gradient checkpointing and by FSDP's or accelerate's."""

from __future__ import annotations

from typing import Iterator

from ckptlint.finding import Finding
from ckptlint.rules.base import Rule, RuleContext, finding_at


class ModelCheckpointedTwice(Rule):
    code = "CKP404"
    name = "model-checkpointed-twice"
    summary = (
        "One model gets its own gradient checkpointing (Hugging Face, or checkpoint calls in its forward) and FSDP's or "
        "accelerate's activation checkpointing as well."
    )
    explanation = """
        Each checkpointing layer drops its activations and replays its forward in backward.
        Stacked, the outer wrapper replays a forward that itself checkpoints, so each block's
        forward runs three times per step instead of two, for no memory saved; the inner
        checkpoint's saved inputs live inside the outer replay, and a reentrant inner
        checkpoint (Hugging Face's default before transformers 5) nested in a non-reentrant
        outer one mixes two replay mechanisms that were not designed to nest. transformers
        refuses the combination in `TrainingArguments` ("The activation_checkpointing in FSDP
        config and the gradient_checkpointing in training arg can't be set to True
        simultaneously"); spelled in code, nothing stops it.

        The model's own checkpointing: `model.gradient_checkpointing_enable()`, a Trainer given
        `TrainingArguments(gradient_checkpointing=True)`, or a model built in the function from
        a project class whose code calls a checkpoint API outside any `if`. FSDP's or
        accelerate's: `apply_activation_checkpointing(model, ...)`, `checkpoint_wrapper` of the
        model's blocks, `accelerator.prepare(model)` by an `Accelerator` whose
        `FullyShardedDataParallelPlugin(activation_checkpointing=True)` is in sight, a Trainer
        given `fsdp_config={"activation_checkpointing": True}`. Reported at the later of the
        two, in source order within one function; the model is followed through its name's
        bindings (`model = accelerator.prepare(model)` is the same model, another
        `from_pretrained` is not). Two applications in the two branches of one `if`, a model
        the function does not build or name, or checkpointing left to a flag, are silent.
    """
    bad = """
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing
        from transformers import AutoModelForCausalLM
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer


        def build(name):
            model = AutoModelForCausalLM.from_pretrained(name)
            model.gradient_checkpointing_enable()
            apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, LlamaDecoderLayer))
            return model
    """
    good = """
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing
        from transformers import AutoModelForCausalLM
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer


        def build(name):
            model = AutoModelForCausalLM.from_pretrained(name)
            apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, LlamaDecoderLayer))
            return model
    """
    remedy = """
        Keep one: drop `gradient_checkpointing_enable()` / `gradient_checkpointing=True` when
        FSDP or accelerate applies activation checkpointing (with FSDP, prefer its own:
        it checkpoints inside each FSDP unit), or drop the FSDP activation checkpointing and
        keep the model's own.
    """

    def check(self, context: RuleContext) -> Iterator[Finding]:
        if context.composition is None:
            return
        for hazard in context.composition.double_checkpointings():
            first, second = hazard.first, hazard.second
            if first.node is second.node:
                summary = f"{second.what} checkpoints the model twice: its own gradient checkpointing and FSDP's activation checkpointing"
            else:
                summary = f"{second.what} checkpoints a model already checkpointed by {first.what} (line {first.line})"
            summary += ": each block's forward is replayed inside another replay, three runs per step for no memory saved; keep one of them"
            yield finding_at(context.module, second.node, self.code, summary)
