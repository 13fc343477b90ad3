"""CKP504: a non-deterministic op recomputed inside a region (routing selections, accumulations)."""

from ckptlint.analysis.regions.summary import NONDETERMINISTIC_OP
from ckptlint.rules.base import CheckpointCall, Effect, RegionRule
from ckptlint.sac_policy import EVERY_OP

_FIX = "save it with a selective-checkpoint policy (`context_fn=functools.partial(create_selective_checkpoint_contexts, [torch.ops.{op}.default, ...])`) so the recompute reuses the forward's result"


class NondeterministicRecompute(RegionRule):
    code = "CKP504"
    name = "nondeterministic-op-recomputed"
    summary = "The region recomputes an op whose result may differ from the forward's: a top-k/sort/argmax whose indices route (MoE expert choice), or a CUDA accumulation in arbitrary order (`histc`, weighted `bincount`, `scatter_add`, `index_add`, `index_put_(accumulate=True)`, `scatter_reduce`) whose result reaches a routing decision."
    explanation = """
        The backward of a checkpointed region runs its forward again and differentiates the
        recompute, trusting it to compute what the forward did. Two kinds of ops break that
        trust without raising:

        - **selections whose indices route**: `torch.topk`, unstable `torch.sort`/`argsort`,
          `argmax`/`argmin`. When the scores they select from are recomputed with the
          slightest numerical difference (any non-deterministic kernel upstream, a different
          split-K or atomics order) or hold ties that the kernel breaks differently, the
          recompute picks other experts than the forward did; tokens are dispatched to other
          experts in the backward than in the forward and the gradients of the router and
          the experts are silently wrong (it has corrupted MoE routing gradients in public
          trainers). Reported only when the indices choose what the region computes: used as
          an index (`x[order]`) or passed to a call that picks positions (`F.one_hot`,
          `gather`, `index_select`, `scatter_`, `bincount`, `histc`, ...; by keyword as torch
          spells it: `index=`, `indices=`, `F.one_hot(input=...)`), directly or through names
          computed from them in the same function (not from another arm of an `if` the
          selection is in). A helper that returns the indices (`return scores.topk(k).indices`,
          `return weights, experts`, a router module's `forward`) leaves the decision to its
          caller: the selection is reported where the caller routes them (`weights, experts =
          self.router(x)` then `F.one_hot(experts, n)`), through any number of helpers that
          return them on; the message names the function that routes. Indices handed on as an
          argument (`self.experts(x, top_k_index, weights)`, the router/experts split of
          transformers 5's MoE models) are reported when the callee routes with the parameter
          they bind (a use there under `torch.no_grad()` counts: the experts' mask is read after it). Indices kept for a metric
          (`(logits.argmax(-1) == labels).float().mean()`) or discarded (`values, _ =
          torch.topk(...)`) are not reported; neither are `stable=True` sorts. A sort of a
          selection's indices (`torch.argsort(experts.view(-1))` after `torch.topk`,
          `top_k_experts.sort(0)`, the inverse permutation `scores.argsort().argsort()`)
          recomputes exactly what the forward did when the selection does: one finding, at
          the selection, quoting the first place its indices or their sort route (none when
          the policy saves the selection, even if it does not save `aten.sort`). A sort of
          other integer keys (`(probs * 10).long().argsort()`) is a selection of its own.
        - **accumulations in arbitrary order**: `torch.histc`, `torch.bincount(...,
          weights=...)`, `scatter_add`, `index_add`, `index_put_(..., accumulate=True)`,
          `scatter_reduce`. On CUDA they add with atomics (torch lists them as
          non-deterministic under `torch.use_deterministic_algorithms`), so the recompute's
          floating-point sums can differ from the forward's in the last bits. That matters
          only where the sums decide: reported when the result reaches, in the same
          function (directly or through names computed from it), a selection whose indices
          route (`torch.topk(counts, 2)`), a comparison (`counts > capacity`, `.gt()`), a
          branch condition, an index (`x[keep]`) or a position argument (`gather`'s or
          `scatter_`'s index, `F.one_hot`, `.nonzero()`, `torch.where`'s condition). A
          result only returned, added or passed as values (the MoE combine step
          `out.index_add_(0, idx, expert_out)`) differs in the last bits of an activation
          and is not reported. Integer addition is exact in any order: an accumulation into
          integers is not reported (the tokens-per-expert count `torch.zeros(n,
          dtype=torch.long).scatter_add_(0, idx, torch.ones_like(idx))`), known from the
          function's own lines: created with an integer dtype, `torch.zeros_like` or
          `.new_zeros` of an integer tensor, `.long()`/`.int()`/`.to(torch.long)` results, a
          selection's indices, a tensor the function passes as `gather`'s or `scatter_add_`'s
          index, or integer values added (torch requires them to match); nor is `bincount`
          without weights or with integer ones. A tensor of unknown dtype is reported. On CPU
          they are deterministic; the linter cannot know the device and reports such a
          decision in any region.

        The region's backward differentiates its training path. Code that runs only in eval
        mode (`if not self.training:`, the `else` of `if self.training:`, what follows an
        `if self.training:` block that returns, and what a function called only there does)
        is not reported. Code with grad off (`with torch.no_grad():`, `@torch.no_grad()`,
        `inference_mode`) is reported only when the indices or sums, or names computed from
        them, leave it (returned, stored in an attribute or an input, read after the `with`
        block): autograd holds them as constants, but what is differentiated after reads
        them, as an attention reads a `@torch.no_grad()` indexer's top-k key positions. A
        function called inside a `with torch.no_grad():` block is judged as if grad were on.

        Saving the op with a selective-checkpoint policy removes the hazard: the recompute
        returns the forward's cached output instead of running the op (torch 2.13
        `_CachedTorchDispatchMode`). Not reported when the call's policy saves the op (the
        policy's op list; `argsort` is saved as `aten.sort`), nor outside regions. The ops
        are a catalogue (analysis/knowledge/aten_ops.py).
    """
    bad = """
        import torch
        import torch.nn.functional as F
        from torch.utils.checkpoint import checkpoint


        class MoE(torch.nn.Module):
            def route(self, x):
                scores = self.gate(x).softmax(dim=-1)
                weights, experts = torch.topk(scores, 2, dim=-1)
                mask = F.one_hot(experts, num_classes=8)  # the recompute may pick other experts
                return self.dispatch(x, weights, mask)

            def forward(self, x):
                return checkpoint(self.route, x, use_reentrant=False)
    """
    good = """
        import functools

        import torch
        import torch.nn.functional as F
        from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

        SAVE_TOPK = functools.partial(create_selective_checkpoint_contexts, [torch.ops.aten.topk.default])


        class MoE(torch.nn.Module):
            def route(self, x):
                scores = self.gate(x).softmax(dim=-1)
                weights, experts = torch.topk(scores, 2, dim=-1)
                mask = F.one_hot(experts, num_classes=8)
                return self.dispatch(x, weights, mask)

            def forward(self, x):
                return checkpoint(self.route, x, use_reentrant=False, context_fn=SAVE_TOPK)
    """
    remedy = """
        Save the op with a selective-checkpoint policy: `context_fn=functools.partial(
        create_selective_checkpoint_contexts, [torch.ops.aten.topk.default])` (add it to an
        existing list), so the recompute reuses the forward's indices or sums. Alternatively
        compute the routing outside the checkpointed region and pass its result in, or run
        with `torch.use_deterministic_algorithms(True)` where deterministic kernels exist.
        No automatic fix: where the policy list lives is the project's choice.
    """
    confirmed_by = frozenset({"output", "input-grad", "parameter-grad"})
    kinds = frozenset({NONDETERMINISTIC_OP})
    messages = {
        "selection": "`{callee}()` ({family}) is recomputed inside the region and its indices route (`{use}`, line {use_line}): "
        "near-equal scores can pick other indices at recompute, so the backward routes differently from the forward; " + _FIX,
        "returned-selection": "`{callee}()` ({family}) is recomputed inside the region and its indices, returned to {use_in}, route there "
        "(`{use}`, line {use_line}): near-equal scores can pick other indices at recompute, so the backward routes differently "
        "from the forward; " + _FIX,
        "handed-selection": "`{callee}()` ({family}) is recomputed inside the region and its indices, handed to {use_in}, route there "
        "(`{use}`, line {use_line}): near-equal scores can pick other indices at recompute, so the backward routes differently "
        "from the forward; " + _FIX,
        "accumulation": "`{callee}()` ({family}) is recomputed inside the region and its result feeds {feeds} (`{use}`, line {use_line}): "
        "it accumulates in arbitrary order on CUDA, so the recomputed sums may differ from the forward's in the last bits "
        "and the backward may decide otherwise than the forward did; " + _FIX,
    }

    def applies(self, call: CheckpointCall, effect: Effect) -> bool:
        saved = call.saved_ops
        return not (effect.saved_by(saved) or EVERY_OP in saved)
