"""CKP202: the region rebinds or mutates module-level state."""

from ckptlint.analysis.regions.summary import GLOBAL_STATE
from ckptlint.rules.base import RegionRule


class ModuleStateMutation(RegionRule):
    code = "CKP202"
    name = "module-state-mutation"
    summary = "The region rebinds or mutates module-level state (`global`, `nonlocal`, a module-level object)."
    explanation = """
        Whatever the region does runs twice: once in forward and once in the replay during
        backward. A module-level list that collects auxiliary losses gets each loss twice
        (and the second copy carries a graph that is freed after backward, so summing the
        list next step raises or silently adds stale terms); a `global step` counter
        advances twice; a cache keyed on the step is overwritten by the replay.

        Rebinding a name declared `global` or `nonlocal`, and mutating an object bound at
        module level (`AUX_LOSSES.append(...)`, `CACHE[k] = CACHE.get(k, 0) + 1`,
        `STATS.calls += 1`), are CKP202. As for CKP203, a plain store or rebinding is
        reported only when the region read that state before writing it in the same run, or
        when the value depends on a draw, the clock or state changed elsewhere: `CACHE["last"]
        = scores` stores the same scores again, and `if _x is None: _x = build()` builds once.
        A container of an enclosing function mutated without `nonlocal` is CKP203.
    """
    bad = """
        import torch
        from torch.utils.checkpoint import checkpoint

        AUX_LOSSES = []


        def moe_block(x, gate):
            weights = gate(x).softmax(-1)
            AUX_LOSSES.append(weights.mean(0).pow(2).sum())
            return x * weights.max(-1, keepdim=True).values


        def run(x, gate):
            return checkpoint(moe_block, x, gate, use_reentrant=False)
    """
    good = """
        import torch
        from torch.utils.checkpoint import checkpoint


        def moe_block(x, gate):
            weights = gate(x).softmax(-1)
            aux = weights.mean(0).pow(2).sum()
            return x * weights.max(-1, keepdim=True).values, aux


        def run(x, gate):
            out, aux = checkpoint(moe_block, x, gate, use_reentrant=False)
            return out, aux
    """
    remedy = """
        Return the value from the region and collect it outside (`out, aux = checkpoint(...)`),
        or do the bookkeeping outside the checkpointed call.
    """
    under_contexts = """
        Under `torch.compile(fullgraph=True)` a module-level side effect in a checkpointed region is
        rejected at the first call (`HOP: Unsafe side effect`): an error, "rejected by compile". With
        `fullgraph=False` (the default) the region graph-breaks and runs eager, so the replay repeats it
        silently: "replayed after a graph break", a warning. With
        `torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True` set in the project
        (torchtitan sets it for compiled runs) the side effect is not replayed: a note. Under SAC it is
        still replayed under every policy: a policy saves op outputs, never Python side effects.
        See [regions.md](../regions.md#execution-contexts) for how the context is read; the finding's site says it and the severity follows.
    """
    confirmed_by = frozenset({"global", "container", "closure"})  # closure: a rebound `nonlocal` cell
    kinds = frozenset({GLOBAL_STATE})
    messages = {
        "mutation": "{action} {subject}, module-level state that outlives the region: the replay does it again",
        "global-rebind": "rebinds module-level `{name}` (declared global): the replay does it again",
        "nonlocal-rebind": "rebinds `{name}` of the enclosing function (declared nonlocal), which outlives the region: "
        "the replay does it again",
        "read-before-write": "{action} {subject}, state that outlives the region and that the region read before "
        "writing it: the replay reads the forward's write instead of the value the forward read",
        "volatile-store": "{action} {subject} {what} that depends on {reasons}: the replay stores a different one",
    }
