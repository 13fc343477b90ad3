"""What a replay sends over the process group: collectives counted per phase, blocking waits bounded.

Every torch.distributed collective and point-to-point op, the functional collectives and
DTensor's redistributions reach the dispatcher as an op of the `c10d` or `_c10d_functional`
namespace, so a `TorchDispatchMode` around a replay sees each one, whichever wrapper issued it
(Megatron's mappings, DeepSpeed's comm, FSDP2's all-gathers). The plain replay's backward runs
the gradients' own collectives; the checkpointed replay's backward runs those and, at recompute,
the forward's again. The difference is what checkpointing repeats (CKP401/CKP402/CKP403).

A replay must not wait forever where the user's run would not have: while replays run, the
blocking calls of `torch.distributed` (`recv`, `send`, collectives without `async_op`) are issued
asynchronously and waited for with a timeout. A wait that expires raises `CommunicationTimeout`;
on gloo the expired pair is closed, so the job then stops with an error instead of hanging. Calls
bound by name before the companion started (`from torch.distributed import recv`) wait unbounded.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import functools
import inspect
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ckptlint.runtime.compare import Reason
from ckptlint.runtime.frames import is_user_code
from ckptlint.runtime.intercept import in_backward

COMMUNICATION_CATEGORY = "communication"  # a reason: the recompute issued the forward's communication again
HANG_CATEGORY = "hang"  # a reason: a replay's wait expired, or the ranks were not at the same call
_NAMESPACES = frozenset({"c10d", "_c10d_functional", "_c10d_functional_autograd", "c10d_functional"})
_NOT_COMMUNICATION = frozenset({"wait_tensor", "_wrap_tensor_autograd"})  # bookkeeping around an op counted once
POINT_TO_POINT = frozenset({"send", "recv_", "recv_any_source_", "isend", "irecv"})
# blocking torch.distributed calls bounded during replays: name -> its asynchronous twin
_ASYNC_TWINS = {"send": "isend", "recv": "irecv"}
_COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
    "all_to_all", "all_to_all_single", "broadcast", "reduce", "gather", "scatter", "barrier",
)


class CommunicationTimeout(RuntimeError):
    """A replay's communication did not complete in time: a rank did not follow."""


def is_distributed() -> bool:
    """Whether a process group is up in this process (the only case where replays communicate)."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _op_name(func: Any) -> str | None:
    """The communication op's short name (`allreduce_`, `all_gather_into_tensor`), or None."""
    if getattr(func, "namespace", None) not in _NAMESPACES:
        return None
    name = str(getattr(func, "_opname", "") or func.__name__.split(".")[0])
    return None if name in _NOT_COMMUNICATION else name


def _user_frame() -> str:
    frame = sys._getframe(2)
    while frame is not None:
        if is_user_code(frame.f_code.co_filename):
            return f"{os.path.abspath(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]  # the loop ends at the outermost frame
    return "?"


@dataclass
class PhaseCounts:
    """Communication ops one replay issued, in its forward and in its backward."""

    forward: collections.Counter[str] = field(default_factory=collections.Counter)
    backward: collections.Counter[str] = field(default_factory=collections.Counter)
    where: dict[str, str] = field(default_factory=dict)  # op -> the user line that first issued it in forward


class CommunicationLog(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch leaves __init_subclass__ unannotated
    """Counts communication ops; reads only, every op runs as it would."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        self.counts = PhaseCounts()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = _op_name(func)
        if name is not None:
            if in_backward():
                self.counts.backward[name] += 1
            else:
                self.counts.forward[name] += 1
                self.counts.where.setdefault(name, _user_frame())
        return func(*args, **(kwargs or {}))


@dataclass
class Communication:
    """What checkpointing repeated, from the two replays' counts."""

    forward: dict[str, int]
    recompute: dict[str, int]
    where: dict[str, str]

    @classmethod
    def of(cls, plain: PhaseCounts, checkpointed: PhaseCounts) -> Communication:
        return cls(dict(plain.forward), dict(checkpointed.backward - plain.backward), dict(plain.where))

    def to_dict(self) -> dict[str, Any]:
        return {"forward": self.forward, "recompute": self.recompute}

    def reason(self) -> Reason | None:
        """The recompute's repeated communication, naming point-to-point ops as a hang risk."""
        if not self.recompute:
            return None
        ops = ", ".join(f"{name} x{count}" for name, count in sorted(self.recompute.items()))
        where = "; ".join(f"{name} at {self.where[name]}" for name in sorted(self.recompute) if name in self.where)
        p2p = sorted(set(self.recompute) & POINT_TO_POINT)
        risk = (
            f"point-to-point {', '.join(p2p)} repeated: a hang risk where the peer does not recompute"
            if p2p
            else "the collectives run again in backward (repeated cost; every rank must recompute in the same order)"
        )
        detail = f"the recompute issued {ops}; {risk}" + (f"; forward issued them: {where}" if where else "")
        return Reason(COMMUNICATION_CATEGORY, "communication repeated at recompute", detail=detail)


@contextlib.contextmanager
def counting() -> Iterator[PhaseCounts | None]:
    """Around one replay: its communication counts, with blocking calls bounded; None (and no
    mode at all) where no process group is up."""
    if not is_distributed():
        yield None
        return
    log = CommunicationLog()
    with bounded_waits(), log:
        yield log.counts


TIMEOUT = datetime.timedelta(seconds=60)  # Session(rank_timeout=...) sets it for a run


@contextlib.contextmanager
def bounded_waits() -> Iterator[None]:
    """While a replay runs, `torch.distributed`'s blocking calls wait at most TIMEOUT."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    patched: list[tuple[Any, str, Any]] = []
    for name in (*_COLLECTIVES, *_ASYNC_TWINS):
        original = getattr(distributed_c10d, name, None)
        if original is None:
            continue
        replacement = _bounded(name, original, getattr(distributed_c10d, _ASYNC_TWINS.get(name, ""), None))
        for owner in (dist, distributed_c10d):
            if getattr(owner, name, None) is original:
                patched.append((owner, name, original))
                setattr(owner, name, replacement)
    try:
        yield
    finally:
        for owner, name, original in reversed(patched):
            setattr(owner, name, original)


def _bounded(name: str, original: Callable[..., Any], twin: Callable[..., Any] | None) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)
        arguments = bound.arguments
        if twin is not None:  # send / recv: the same message through isend / irecv
            peer = arguments.get("dst" if name == "send" else "src")
            if peer is None and name == "recv":
                return original(*args, **kwargs)  # a receive from any rank reports its sender: left as is
            work = twin(*bound.args, **bound.kwargs)
            _wait(work, f"{name} {'to' if name == 'send' else 'from'} rank {peer}")
            return peer if name == "recv" else None
        if "async_op" not in signature.parameters or arguments.get("async_op"):
            return original(*args, **kwargs)
        arguments["async_op"] = True
        work = original(*bound.args, **bound.kwargs)
        _wait(work, name)
        return None

    return call


def _wait(work: Any, what: str) -> None:
    if work is None:  # this rank is not in the group
        return
    try:
        work.wait(TIMEOUT)
    except RuntimeError as error:
        raise CommunicationTimeout(
            f"{what} did not complete within {TIMEOUT.total_seconds():g} s during ckptlint's replay: "
            f"a rank did not follow ({str(error).strip().splitlines()[0]})"
        ) from error
