"""CKP205: the region moves tensors across devices."""

from ckptlint.analysis.regions.summary import DEVICE_MOVE
from ckptlint.rules.base import RegionRule


class DeviceMove(RegionRule):
    code = "CKP205"
    name = "device-move-in-region"
    summary = "The region moves tensors to another device (`.to(device)`, `.cuda()`, `.cpu()`, `device=` on creation)."
    explanation = """
        Checkpoint saves the RNG state of the CPU and of the devices its *inputs* are on.
        When the region moves work to another device, random ops there (dropout after
        `.to("cuda")` on CPU inputs) draw from a generator checkpoint did not save, and the
        replay draws different numbers. The replay also repeats the copy, which costs the
        transfer twice and, for `.cpu()` round trips, synchronises the device.

        A tensor the region makes on the CPU each call (a torch factory with no `device=`:
        `torch.tril(torch.ones(s, s)).to(x.device)`, rotary frequencies from `torch.arange(half)`)
        and then moves to the inputs' device is copied from the host in the forward and again in
        the replay, on every step: flagged too. Moving any other tensor to the device of a tensor
        already in the region (`.to(x.device)`), a lazy move of a module's own cache that stays on
        that device, and casting (`.to(torch.float16)`, `.to(dtype=...)`) are not flagged.
    """
    bad = """
        import torch
        from torch.utils.checkpoint import checkpoint


        def head(x, weight):
            h = x.to("cuda") @ weight
            return torch.nn.functional.dropout(h, 0.1)


        def run(x, weight):
            return checkpoint(head, x, weight, use_reentrant=False)
    """
    good = """
        import torch
        from torch.utils.checkpoint import checkpoint


        def head(x, weight):
            h = x @ weight.to(x.dtype)
            return torch.nn.functional.dropout(h, 0.1)


        def run(x, weight):
            return checkpoint(head, x.to("cuda"), weight, use_reentrant=False)
    """
    remedy = """
        Move inputs before the checkpointed call (checkpoint then saves that device's RNG),
        and create tensors with `device=x.device` inside the region.
    """
    under_contexts = """
        Under a SAC policy that saves every op, backward reads no recomputed value, so a device move in
        the region is "neutralised by a saved op" (note). Otherwise the finding keeps its level and its
        site names the context. See [regions.md](../regions.md#execution-contexts) for how the context is read; the finding's site says it and the severity follows.
    """
    confirmed_by = frozenset({"rng-torch", "output", "input-grad", "parameter-grad", "recompute"})
    kinds = frozenset({DEVICE_MOVE})
    messages = {
        "method": "`.{method}()` moves `{subject}` to another device inside the region: checkpoint saves the RNG state "
        "only of the inputs' devices, and the replay copies again",
        "to": "`.to(...)` moves `{subject}` on {device} inside the region: checkpoint saves the RNG state only of the "
        "inputs' devices, and the replay copies again",
        "factory": "`{callee}(device=...)` creates a tensor on {device} inside the region: checkpoint saves the RNG "
        "state only of the inputs' devices, and the replay copies again",
        "host-built": "`.to({device})` copies a tensor the region makes on the CPU every call to the inputs' device: the "
        "replay makes it and copies it from the host again; create it with `device={device}`",
    }
