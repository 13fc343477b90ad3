"""CKP203: the region mutates a container or attribute that outlives it."""

from ckptlint.analysis.regions.summary import OUTER_STATE
from ckptlint.rules.base import RegionRule


class OuterStateMutation(RegionRule):
    code = "CKP203"
    name = "outer-state-mutation"
    summary = (
        "The region mutates a container or attribute that outlives it so that the replay changes it again "
        "(`self.losses.append`, `self.n += 1`, a store after reading it)."
    )
    explanation = """
        The replay repeats every side effect of the region; it is a hazard when the repeat
        changes something. Accumulating writes always do: `self.aux_losses.append(l)` appends
        twice per step (a mixture-of-experts load-balancing loss is counted twice, and the
        replayed copy's graph is freed after backward); `self.calls += 1` counts twice;
        `extend`, `insert`, `pop`, `update` on a container passed in or kept on `self` the
        same. Mutation through an alias is the same (`acc = self.losses; acc.append(l)`).

        A plain store (`self.cache = h`, `d[k] = v`, `setattr(self, "x", v)`) puts back what
        the forward stored, so it is reported only when (a) the region read that state
        before writing it in the same run (`self.smoothed = 0.9 * self.smoothed + s`, or
        `last = self.last` before `self.last = x`): the replay reads the forward's write; or
        (b) the stored value, or the key, depends on a Python or NumPy draw, the clock, or
        state another method changes: the replay stores a different one. Per-forward scratch
        computed from the inputs (`self.attn_weights = w`), constants, lazy initialisation
        (`if self.pad is None: ...`, siblings included), memos keyed by their input, and
        state saved and put back are not reported.

        Containers and objects created inside the region are fine to mutate. A registered
        buffer or parameter is CKP204; module-level state is CKP202.
    """
    bad = """
        import torch
        from torch.utils.checkpoint import checkpoint


        class Router(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.aux_losses = []

            def forward(self, x):
                weights = x.softmax(-1)
                self.aux_losses.append(weights.pow(2).mean())
                return x * weights


        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.router = Router()

            def forward(self, x):
                return checkpoint(self.router, x, use_reentrant=False)
    """
    good = """
        import torch
        from torch.utils.checkpoint import checkpoint


        class Router(torch.nn.Module):
            def forward(self, x):
                weights = x.softmax(-1)
                losses = []
                losses.append(weights.pow(2).mean())
                return x * weights, torch.stack(losses).sum()


        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.router = Router()

            def forward(self, x):
                return checkpoint(self.router, x, use_reentrant=False)
    """
    remedy = """
        Return what the region computes and store it outside the checkpointed call, or
        create the container inside the region.
    """
    under_contexts = """
        As CKP202: under `torch.compile(fullgraph=True)` the append or attribute update in a
        checkpointed region is rejected (error, "rejected by compile"); with `fullgraph=False` the region
        graph-breaks and the replay repeats it ("replayed after a graph break", warning); with the
        project's `skip_fwd_side_effects_in_bwd_under_checkpoint = True` it is "not replayed" (note);
        under SAC it is still replayed under every policy (warning). See [regions.md](../regions.md#execution-contexts) for how the context is read; the finding's site says it and the severity follows.
    """
    confirmed_by = frozenset({"container", "attribute"})
    kinds = frozenset({OUTER_STATE})
    messages = {
        "mutation": "{action} {subject}, which outlives the region: the replay does it again",
        "read-before-write": "{action} {subject}, which outlives the region and which the region read before "
        "writing it: the replay reads the forward's write instead of the value the forward read",
        "volatile-store": "{action} {subject} {what} that depends on {reasons}: the replay stores a different one",
    }
