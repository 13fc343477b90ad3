"""What checkpointing one region buys and what it costs (`ckptlint confirm --cost`).

Two more replays of the region, from the probe's snapshot and undone like the probe's own
(`run_replay`, `Snapshot`): one plain, one checkpointed with the user's flags. In each, the
forward runs under `saved_tensors_hooks` that only look (they hand every tensor back as
itself), and the whole replay, forward and backward, under `FlopCounterMode`.

- Bytes are counted per storage, once: two saves of one tensor, or of two views of one
  storage, hold that storage once. A saved storage the region did not create (an input, a
  parameter or buffer, a tensor it captured) is saved by reference: it lives on without
  checkpointing as with it, so it is never counted as freed. Nor is the region's output
  (relu or tanh save their own result): the caller holds it, the next block's checkpoint
  saves it as its input. What checkpointing frees is the rest, the activations, less what
  the checkpointed forward still saves (torch's non-reentrant checkpoint keeps its inputs,
  by reference; reentrant saves them with `save_for_backward`).
- Recomputed FLOPs are the checkpointed replay's total minus the plain replay's: both run
  the same forward and the same backward, so the difference is the recompute, and it shows
  non-reentrant checkpoint's early stop (recomputation ends once the last saved tensor is
  rebuilt). `FlopCounterMode` counts matrix products, convolutions and attention;
  elementwise ops and norms count zero.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from ckptlint.runtime.cost_hints import hints
from ckptlint.runtime.intercept import InterceptedCall
from ckptlint.runtime.reach import Reachable, reachable
from ckptlint.runtime.replay import run_replay, tensors_in
from ckptlint.runtime.snapshot import Snapshot

MIB = 1024 * 1024
LARGEST = 5  # saved tensors listed per region
# autograd's own bookkeeping and reshapes that copy nothing new: not computation
_NOT_COMPUTE = frozenset({"aten.detach", "aten.alias", "aten.lift_fresh", "aten._unsafe_view"})
# kinds of saved storage; only activations are freed by checkpointing
ACTIVATION, OUTPUT, INPUT, PARAMETER, CAPTURED = "activation", "output", "input", "parameter", "captured"
KINDS = (ACTIVATION, OUTPUT, INPUT, PARAMETER, CAPTURED)


@dataclass
class SavedStorage:
    """One storage a forward saved for backward, however many saves point into it."""

    nbytes: int
    shape: tuple[int, ...]  # of the largest tensor saved from it
    dtype: str
    kind: str = ACTIVATION
    saved_by: list[str] = field(default_factory=list)  # the torch functions whose backward holds it

    def to_dict(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype, "bytes": self.nbytes, "kind": self.kind, "saved_by": self.saved_by}


def storage_key(tensor: torch.Tensor) -> tuple[str, int]:
    """Which memory a tensor holds: its storage (a tensor without one, a wrapper subclass, is its own)."""
    try:
        storage = tensor.untyped_storage()
        return str(tensor.device), storage.data_ptr() if storage.nbytes() else -id(tensor)
    except (RuntimeError, NotImplementedError):
        return "object", id(tensor)


def storage_bytes(tensor: torch.Tensor) -> int:
    try:
        return int(tensor.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):
        return tensor.numel() * tensor.element_size()


class _OpLog(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch leaves __init_subclass__ unannotated
    """The compute ops a forward ran (views and autograd's bookkeeping left out)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        self.ops: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = str(func.overloadpacket)
        if not func.is_view and name not in _NOT_COMPUTE:
            self.ops[name] = self.ops.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def function_name(func: Any) -> str:
    """`linear`, `conv2d`, `Tensor.softmax`: what the user's code called."""
    name = getattr(func, "__name__", None) or type(func).__name__
    qualified = getattr(func, "__qualname__", "") or ""
    return f"Tensor.{name}" if qualified.startswith(("Tensor.", "TensorBase.", "_TensorBase.")) else name


class _SavingFunction(TorchFunctionMode):
    """The torch function running now: autograd saves tensors inside the call that needs
    them (its inputs before computing, its outputs after), so each save is named by it. Read
    at save time, never from the graph afterwards: reading a saved tensor back from a node
    that a nested checkpoint holds would run that checkpoint's recompute."""

    def __init__(self) -> None:
        super().__init__()
        self.running: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.running.append(function_name(func))
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.running.pop()


@dataclass
class ForwardWatch:
    """What one replay's forward saved and ran, and the replay's FLOPs."""

    reach: Reachable
    saved: dict[tuple[str, int], SavedStorage] = field(default_factory=dict)
    ops: dict[str, int] = field(default_factory=dict)
    forward_flops: int = 0
    total_flops: int = 0
    counter: FlopCounterMode | None = None
    functions: _SavingFunction = field(default_factory=_SavingFunction)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        key = storage_key(tensor)
        known = self.saved.get(key)
        if known is None:
            known = self.saved[key] = SavedStorage(storage_bytes(tensor), tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."))
        elif tensor.numel() > _numel(known.shape):
            known.shape = tuple(tensor.shape)
        saver = self.functions.running[-1] if self.functions.running else "autograd.Function"
        if saver not in known.saved_by:
            known.saved_by.append(saver)
        return tensor

    def forward(self, run: Callable[..., Any]) -> Callable[..., Any]:
        """`run` (the region, plain or checkpointed) watched while it runs; what it saved is
        classified once its outputs are known."""

        def watched(*args: Any, **kwargs: Any) -> Any:
            log = _OpLog()
            with torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack), self.functions, log:
                result = run(*args, **kwargs)
            self.ops = log.ops
            if self.counter is not None:
                self.forward_flops = self.counter.get_total_flops()
            outputs = tensors_in(result)
            self._classify(tensors_in((args, kwargs)), outputs)
            return result

        return watched

    def _classify(self, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        module_tensors = self.reach.module_tensors
        kinds: dict[tuple[str, int], str] = {}
        for tensor in outputs:
            kinds[storage_key(tensor)] = OUTPUT
        for tensor_id, (_, tensor) in self.reach.tensors.items():
            kinds[storage_key(tensor)] = PARAMETER if tensor_id in module_tensors else CAPTURED
        for tensor in inputs:
            kinds[storage_key(tensor)] = INPUT
        for storage, saved in self.saved.items():
            saved.kind = kinds.get(storage, ACTIVATION)

    @contextlib.contextmanager
    def counting(self, replaying: Callable[[], Any]) -> Iterator[None]:
        """Around the whole replay: the call's own replay context, and the FLOP count."""
        with replaying(), FlopCounterMode(display=False, custom_mapping=_cpu_attention_formulas()) as counter:
            self.counter = counter
            try:
                yield
            finally:
                self.total_flops = counter.get_total_flops()
                self.counter = None

    def bytes_by_kind(self) -> dict[str, int]:
        return {kind: sum(s.nbytes for s in self.saved.values() if s.kind == kind) for kind in KINDS}


def _cpu_attention_formulas() -> dict[Any, Callable[..., int]]:
    """torch registers FLOP formulas for the CUDA attention kernels only, so CPU attention
    (`F.scaled_dot_product_attention` runs `_scaled_dot_product_flash_attention_for_cpu`)
    would count zero: count its products with torch's own formulas for the same maths."""
    aten = torch.ops.aten
    formulas: dict[Any, Callable[..., int]] = {}
    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu") and hasattr(flop_counter, "sdpa_flop_count"):

        def forward(query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
            return int(flop_counter.sdpa_flop_count(query, key, value))  # type: ignore[no-untyped-call]  # torch leaves the formula unannotated

        formulas[aten._scaled_dot_product_flash_attention_for_cpu] = forward
    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward") and hasattr(flop_counter, "sdpa_backward_flop_count"):

        def backward(grad_out: Any, query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
            return int(flop_counter.sdpa_backward_flop_count(grad_out, query, key, value))  # type: ignore[no-untyped-call]  # torch leaves the formula unannotated

        formulas[aten._scaled_dot_product_flash_attention_for_cpu_backward] = backward
    return formulas


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _unpack(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def measure(call: InterceptedCall) -> dict[str, Any]:
    """The cost record of `call` (see the module's docstring); `error` says why there is none.
    State is restored after each replay, as after the probe's."""
    reach = reachable(call.fn, call.args, call.kwargs)
    snapshot = Snapshot(reach)
    plain, checkpointed = ForwardWatch(reach), ForwardWatch(reach)
    try:
        with plain.counting(call.replaying):
            plain_outcome = run_replay(plain.forward(call.run_plain), call.args, call.kwargs, reach, snapshot, True)
        snapshot.release_replay_leaves()
        snapshot.restore()
        with checkpointed.counting(call.replaying):
            checkpointed_outcome = run_replay(checkpointed.forward(call.run_checkpointed), call.args, call.kwargs, reach, snapshot)
    finally:
        snapshot.restore()
    error = plain_outcome.error or checkpointed_outcome.error
    if error:
        return {"error": error}
    return cost_record(plain, checkpointed)


def cost_record(plain: ForwardWatch, checkpointed: ForwardWatch) -> dict[str, Any]:
    plain_bytes, checkpointed_bytes = plain.bytes_by_kind(), checkpointed.bytes_by_kind()
    freed = plain_bytes[ACTIVATION] - checkpointed_bytes[ACTIVATION]
    recomputed = checkpointed.total_flops - plain.total_flops
    created = [s for s in plain.saved.values() if s.kind in (ACTIVATION, OUTPUT)]
    largest = sorted(created, key=lambda s: -s.nbytes)[:LARGEST]
    record: dict[str, Any] = {
        "freed_bytes": freed,
        "recomputed_flops": recomputed,
        "forward_flops": plain.forward_flops,
        "mib_per_gflop": (freed / MIB) / (recomputed / 1e9) if recomputed > 0 else None,
        "saved_bytes": {"plain": plain_bytes, "checkpointed": checkpointed_bytes},
        "largest_saved": [s.to_dict() for s in largest],
        "forward_ops": dict(sorted(plain.ops.items())),
    }
    record["hints"] = hints(record)
    return record


UNMEASURED = ("error", "not replayed", "nested")  # verdicts whose call has no cost record (report.py)


def cost_of(call: InterceptedCall, record: Any, world: tuple[int, int] | None) -> dict[str, Any] | None:
    """The cost record for a probed call, or None where the probe's replays did not run as
    the user's call would (an error, not replayed, nested in another checkpoint). Under a
    process group, the two extra replays would issue the region's communication again on
    this rank alone: not measured."""
    if record.verdict in UNMEASURED:
        return None
    if world is not None:
        return {"error": "not measured under a process group (the cost replays would communicate on this rank alone)"}
    try:
        return measure(call)
    except Exception as exc:  # noqa: BLE001 - measuring must never break the user's run
        return {"error": f"{type(exc).__name__}: {exc}"}
