"""CKP501: an in-place op on the output of an op the region's selective-checkpoint policy saves."""

from ckptlint.analysis.regions.summary import SAVED_OUTPUT_MUTATED
from ckptlint.rules.base import CheckpointCall, Effect, RegionRule

_EVERY_OP = "*"  # sac_policy.EVERY_OP: a policy that saves every op's output

_RAISES = (
    "in eager the backward raises 'Tensor cached during selective activation checkpoint has been mutated'; "
    "under torch.compile it only warns and the recompute reads the changed tensor"
)


class InPlaceOnSavedOutput(RegionRule):
    code = "CKP501"
    name = "in-place-on-saved-output"
    summary = "In a selective-checkpoint region, an in-place op (`relu_()`, `add_()`, `+=`, `inplace=True` activations or dropout) changes the output of an op the policy saves."
    explanation = """
        A selective-checkpoint policy (`context_fn=partial(create_selective_checkpoint_contexts,
        [torch.ops.aten.mm.default])`) keeps the outputs of the ops it saves from the forward
        and hands them to the recompute instead of running the op again. An in-place op after
        the saved op changes the very tensor that was kept: the recompute would start from the
        changed value. Measured on torch 2.13 CPU:

        - eager: the backward raises `RuntimeError: Tensor cached during selective activation
          checkpoint has been mutated` (for `y = torch.mm(x, w); y.relu_()`, `y.add_(1.0)`, `y += b`,
          `F.dropout(y, inplace=True)`, and `nn.Linear` on a 2-D or 3-D input with a saved
          `aten.addmm`);
        - when the saved output is reached through `matmul`'s reshape (`x @ w` or `F.linear`
          without a bias on an N-D input: an `_unsafe_view` of the `aten.mm` output) the check
          does not fire and the gradient is silently wrong (`y = x3d @ w; y.add_(1.0)`: input
          gradient off by 4.2);
        - under `torch.compile(backend="aot_eager")` nothing raises: Dynamo logs "Detected that
          context_fn is passed to torch.utils.checkpoint under torch.compile. Please make sure
          the checkpointed region does not contain in-place ops".

        The producer is read from the function's own lines: the latest plain assignment of the
        changed name above the in-place op (`torch.mm`, `torch.matmul`, `@`, `torch.bmm`,
        `torch.addmm`, `F.linear`, activations; analysis/knowledge/aten_ops.py). Reported only when the
        call's policy saves that op (or every op).
    """
    bad = """
        import functools

        import torch
        from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

        SAVE_MM = functools.partial(create_selective_checkpoint_contexts, [torch.ops.aten.mm.default])


        def mlp(x, w1, w2):
            h = torch.mm(x, w1)
            h.relu_()  # changes the saved mm output
            return torch.mm(h, w2)


        def forward(x, w1, w2):
            return checkpoint(mlp, x, w1, w2, use_reentrant=False, context_fn=SAVE_MM)
    """
    good = """
        import functools

        import torch
        from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

        SAVE_MM = functools.partial(create_selective_checkpoint_contexts, [torch.ops.aten.mm.default])


        def mlp(x, w1, w2):
            h = torch.mm(x, w1)
            h = torch.relu(h)  # a new tensor: the saved output stays as it was
            return torch.mm(h, w2)


        def forward(x, w1, w2):
            return checkpoint(mlp, x, w1, w2, use_reentrant=False, context_fn=SAVE_MM)
    """
    remedy = """
        Use the out-of-place form (`torch.relu(h)`, `h + 1`, `F.dropout(h, p)` without
        `inplace=True`), or stop saving that op. `allow_cache_entry_mutation=True` only
        silences the check: the recompute then reads the changed tensor.
    """
    confirmed_by = frozenset({"error"})
    kinds = frozenset({SAVED_OUTPUT_MUTATED})
    messages = {
        "direct": "{callee} changes `{subject}`, the output of `{producer}` ({op}) that the region's selective-checkpoint policy saves: " + _RAISES,
        "reshaped": "{callee} changes `{subject}`, the output of `{producer}` ({op}) that the region's selective-checkpoint policy saves: "
        + _RAISES
        + "; with an N-D input the output is a reshape of the saved tensor, nothing raises and the gradient is silently wrong",
    }

    def applies(self, call: CheckpointCall, effect: Effect) -> bool:
        saved = call.saved_ops
        return effect.saved_by(saved) or (_EVERY_OP in saved and bool(effect.saved_as))
