"""CKP204: the region mutates tensor state that outlives it (buffers, parameters, inputs, running stats)."""

from ckptlint.catalogue import RUNNING_STATS as NEUTRALISES_RUNNING_STATS
from ckptlint.analysis.regions.summary import RUNNING_STATS, TENSOR_STATE
from ckptlint.rules.base import CheckpointCall, Effect, RegionRule


class TensorStateMutation(RegionRule):
    code = "CKP204"
    name = "tensor-state-mutation"
    summary = "The region changes tensor state that outlives it: in-place ops on buffers, parameters or inputs, BatchNorm running statistics."
    explanation = """
        An in-place update inside the region is applied again by the replay. A BatchNorm
        layer in training updates `running_mean` and `running_var` in every forward, so a
        checkpointed BatchNorm applies the momentum update twice per step: with momentum
        0.1, a batch mean of 10 moves `running_mean` from 0 to 1.0 in forward and to 1.9
        after the replay, and evaluation uses statistics that drift faster than the data.
        An EMA buffer updated with `mul_`/`add_` decays twice; `self.buf = ...` replaces a
        registered buffer twice; an in-place op on an input changes the tensor checkpoint
        saved for the replay, so the replay starts from a different value.

        An overwrite in place (`copy_`, `fill_`, `zero_`, `t[idx] = v`) is reported only when the
        region read that state before writing it (`self.ema.copy_(self.ema * m + y)`,
        a decode step that rolls the cache it writes back) or the value differs in the
        replay: a prefill's `cache.states[i].copy_(x)` from the region's inputs writes
        the same contents again and changes nothing.

        BatchNorm under fairscale's `checkpoint_wrapper` is not flagged: it skips the
        statistics update on recompute. SyncBatchNorm and InstanceNorm with
        `track_running_stats=True` are flagged like BatchNorm.
    """
    bad = """
        import torch
        from torch.utils.checkpoint import checkpoint


        class Block(torch.nn.Module):
            def __init__(self, width):
                super().__init__()
                self.conv = torch.nn.Conv2d(width, width, 3, padding=1)
                self.bn = torch.nn.BatchNorm2d(width)

            def forward(self, x):
                return torch.relu(self.bn(self.conv(x)))


        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Block(64)

            def forward(self, x):
                return checkpoint(self.block, x, use_reentrant=False)
    """
    good = """
        import torch
        from torch.utils.checkpoint import checkpoint


        class Block(torch.nn.Module):
            def __init__(self, width):
                super().__init__()
                self.conv = torch.nn.Conv2d(width, width, 3, padding=1)
                self.norm = torch.nn.GroupNorm(8, width)  # no running statistics

            def forward(self, x):
                return torch.relu(self.norm(self.conv(x)))


        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Block(64)

            def forward(self, x):
                return checkpoint(self.block, x, use_reentrant=False)
    """
    remedy = """
        Keep running-statistics layers out of checkpointed regions (or use GroupNorm /
        LayerNorm, or fairscale's `checkpoint_wrapper`, which skips the second update);
        update buffers outside the region from values it returns; never modify a
        checkpoint input in place (`x = x + y` instead of `x += y`).
    """
    under_contexts = """
        Not measured under compile or SAC: the finding keeps its level there, and its site names the
        context. See [regions.md](../regions.md#execution-contexts) for how the context is read.
    """
    confirmed_by = frozenset({"buffer"})
    kinds = frozenset({TENSOR_STATE, RUNNING_STATS})
    messages = {
        "mutation": "{action} {tensor_kind} {subject}, which outlives the region: the replay applies it again",
        "read-before-write": "{action} {tensor_kind} {subject}, which outlives the region and which the region read "
        "before overwriting it: the replay reads the forward's write instead of the value the forward read",
        "volatile-store": "{action} {tensor_kind} {subject}, which outlives the region, with a value that depends on "
        "{reasons}: the replay writes a different one",
        "module": "`{subject}` ({module_class}) updates running_mean/running_var in training: "
        "the replay updates them a second time (momentum applied twice)",
        "functional": "`{callee}()` updates the running statistics `{subject}` in training: "
        "the replay updates them a second time",
        "region": "the region is a {module_class}, which updates running_mean/running_var in training: "
        "the replay updates them a second time (momentum applied twice)",
    }

    def applies(self, call: CheckpointCall, effect: Effect) -> bool:
        return not (effect.kind == RUNNING_STATS and NEUTRALISES_RUNNING_STATS in call.api.neutralises)
