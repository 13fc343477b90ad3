"""CKP206: control flow in the region on mutable or untracked state."""

from ckptlint.analysis.regions.summary import GRAD_MODE_BRANCH, UNSTABLE_BRANCH
from ckptlint.rules.base import CheckpointCall, Effect, RegionRule


class UnstableBranch(RegionRule):
    code = "CKP206"
    name = "unstable-branch"
    summary = "Control flow in the region depends on state that can change between forward and replay."
    explanation = """
        The replay must take the same path as the forward. A branch on a global that some
        function reassigns (a step counter), on an attribute written outside `__init__`
        (`self.step`, `self.warmup_done`), on a random draw or on wall-clock time can go
        the other way in backward: the gradient is that of another computation, or
        checkpoint raises because the replay saved a different number of tensors.

        A branch on state the region itself stored earlier in the same run, with a value the
        replay stores again, is stable; a branch on state it accumulated earlier in the run is
        not: after `self.calls += 1`, `if self.calls % 2 == 0:` takes the other branch in the
        replay. A lazy-initialisation or memo guard (`if self.pad is None:`, `if n >
        self.cached_len:`) whose body sets what it tests is not reported either, nor an
        attribute that a method no forward calls sets to a constant (`prune_to_tap(): self.no_skip
        = True`): it changes between steps, never between a forward and its replay.

        `torch.is_grad_enabled()` is a hazard only under reentrant checkpoint (explicitly
        or by default), which runs the forward under `no_grad` and the replay with grad
        enabled. Hugging Face's helper is reentrant in transformers 4.x and non-reentrant in
        transformers 5.x and in diffusers: the message says which version decided
        (`target-versions`, the environment's metadata, or the project's pins; docs/versions.md). Branches on `self.training`, on constants and on the inputs' values are
        fine.
    """
    bad = """
        from torch.utils.checkpoint import checkpoint

        STEP = 0


        def block(x):
            if STEP > 1000:  # warm-up finished
                return x * 2
            return x


        def train_step(x):
            global STEP
            STEP += 1
            return checkpoint(block, x, use_reentrant=False)
    """
    good = """
        from torch.utils.checkpoint import checkpoint


        def block(x, warm):
            if warm:
                return x * 2
            return x


        def train_step(x, step):
            return checkpoint(block, x, step > 1000, use_reentrant=False)
    """
    remedy = """
        Decide outside the region and pass the decision in as an argument; a replay then
        sees the value the forward saw.
    """
    under_contexts = """
        Not measured under compile or SAC: the finding keeps its level there, and its site names the
        context. See [regions.md](../regions.md#execution-contexts) for how the context is read; the finding's site says it and the severity follows.
    """
    confirmed_by = frozenset({"output", "input-grad", "parameter-grad", "recompute"})
    kinds = frozenset({UNSTABLE_BRANCH, GRAD_MODE_BRANCH})
    messages = {
        "unstable": "control flow depends on {reasons}, which can differ between forward and replay",
        "grad-mode": "branches on torch.is_grad_enabled(): reentrant checkpoint runs the forward under no_grad and "
        "the replay with grad enabled, so the two take different paths (this call is {mode})",
    }

    def applies(self, call: CheckpointCall, effect: Effect) -> bool:
        return effect.kind != GRAD_MODE_BRANCH or call.reentrant is True

    def call_facts(self, call: CheckpointCall, effect: Effect) -> dict[str, str]:
        mode = call.mode
        if mode.by_default:
            return {"mode": "reentrant by default (use_reentrant not passed)"}
        if call.api.versioned:  # a library's release decides it: say which, or that none is known
            return {"mode": mode.describe()}
        return {"mode": "reentrant as called"}
