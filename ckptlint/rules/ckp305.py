"""CKP305: Hugging Face reentrant gradient checkpointing on a frozen or PEFT-wrapped model."""

from __future__ import annotations

from typing import Iterator

from ckptlint.finding import Finding, Fix
from ckptlint.rules.base import Rule, RuleContext, finding_at


class ReentrantHfCheckpointingWithoutInputGrads(Rule):
    code = "CKP305"
    name = "hf-reentrant-checkpointing-frozen-inputs"
    summary = (
        "Hugging Face gradient checkpointing in reentrant mode on a model whose base is frozen or wrapped by PEFT, "
        "without `enable_input_require_grads()`."
    )
    explanation = """
        Reentrant checkpoint puts a layer in the autograd graph only when one of its
        positional tensor inputs requires grad. A frozen embedding (a frozen base, or PEFT
        with LoRA adapters on one) gives hidden states that do not, so every checkpointed
        layer falls out of the graph: the adapters and unfrozen layers inside get `.grad is
        None`, with only the warning `None of the inputs have requires_grad=True`. Training
        runs and the loss does not move.

        `model.enable_input_require_grads()` (which PEFT's `prepare_model_for_kbit_training`
        calls, and which PEFT runs itself when it wraps a model whose gradient checkpointing
        is already on) registers a hook that makes the embeddings' output require grad;
        non-reentrant checkpointing does not need it.

        Reported at `gradient_checkpointing_enable()`, at `TrainingArguments(gradient_checkpointing=True)`,
        or at a `Trainer` (or a project subclass) given parsed training arguments whose
        `gradient_checkpointing` flag the function reads (the command line turns it on and
        the Trainer enables checkpointing), in a function that builds the model with
        `from_pretrained` and wraps it with `get_peft_model` / `PeftModel.from_pretrained`
        (with checkpointing still off at the wrap), freezes its embeddings, or freezes it
        whole and unfreezes layers (a loop over `[model.embed_tokens, *model.layers[:2]]`
        freezing each one's parameters counts). A project model with Hugging Face's API (its
        class, or a base, defines `gradient_checkpointing_enable`, as a ported or local model
        does) counts too, read from its annotation or as CKP304 reads a model parameter, when
        the call says `use_reentrant` itself: without it the project's own method decides
        the mode. `enable_input_require_grads()`,
        `prepare_model_for_kbit_training`, a forward hook on the input embeddings, or a project
        function that calls one of them silences it where it always runs with the hazard: not
        under an `if` that the enabling call and the wrap are outside of (a preparation for
        quantised models only leaves the 16-bit LoRA path bare), except an `if` about
        gradient checkpointing itself. The mode:
        `gradient_checkpointing_kwargs={"use_reentrant": False}` is non-reentrant; without it,
        transformers before 5.x checkpoints reentrantly (5.x does not), and the message says
        which was assumed.
    """
    bad = """
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM


        def build(name):
            model = AutoModelForCausalLM.from_pretrained(name)
            model = get_peft_model(model, LoraConfig(r=8))
            model.gradient_checkpointing_enable()
            return model
    """
    good = """
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM


        def build(name):
            model = AutoModelForCausalLM.from_pretrained(name)
            model = get_peft_model(model, LoraConfig(r=8))
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            return model
    """
    fixable = True
    remedy = """
        Pass `gradient_checkpointing_kwargs={"use_reentrant": False}` (to the enabling call or
        to `TrainingArguments`), or call `model.enable_input_require_grads()` before training.
        For a Trainer, pass `--gradient_checkpointing_kwargs '{"use_reentrant": false}'` or set
        it on the parsed arguments. `ckptlint --fix` adds the keyword when the call passes no `gradient_checkpointing_kwargs`
        (safe: the call is local to this script, and the layers that got no gradient get one).
    """

    def check(self, context: RuleContext) -> Iterator[Finding]:
        if context.composition is None:
            return
        for hazard in context.composition.hf_enablings():
            summary = (
                f"{hazard.what} on a model {hazard.why}, without enable_input_require_grads(): {hazard.mode}, the "
                "checkpointed layers get no grad-requiring input and their trainable parameters no gradient; pass "
                'gradient_checkpointing_kwargs={"use_reentrant": False} or call model.enable_input_require_grads()'
            )
            fixes: tuple[Fix, ...] = ()
            if hazard.fixable:
                fixes = context.keyword_fix(
                    context.module,
                    hazard.node,
                    "gradient_checkpointing_kwargs",
                    '{"use_reentrant": False}',
                    True,
                    'Pass gradient_checkpointing_kwargs={"use_reentrant": False} (non-reentrant checkpointing)',
                )
            yield finding_at(context.module, hazard.node, self.code, summary, fixes=fixes)
