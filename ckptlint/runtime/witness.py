"""The real backward as witness: compare the recompute torch runs with the forward it replaces.

A replay at the call sees the state as it is then; a hazard that appears between forward
and backward (a step counter bumped after the loss, a pipeline schedule, a hook) is
invisible to it. The witness watches the user's own call instead: while the forward runs it
logs every op's outputs (cloned: memory for sampled calls only) with the Python stack that
ran it; when backward recomputes the region it checks each recomputed op against the log,
in order, and reports the first op whose inputs led elsewhere (another op) or whose values
differ (dtype-aware tolerances, exact for integer and boolean tensors).

It works below autograd (a `TorchDispatchMode`), so it sees the same ops in both
checkpoint modes and on every device, and it only reads: outputs are returned untouched.
Non-reentrant recomputation may stop early once the saved tensors it needs exist
(`early_stop`); the comparison then covers that prefix.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ckptlint.runtime.aspects import aspect_of
from ckptlint.runtime.compare import compare_tensors

_SKIPPED_DIRS = (
    os.path.dirname(torch.__file__) + os.sep,
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,  # ckptlint itself
)
_SKIPPED_FILES = frozenset({contextlib.__file__, functools.__file__})
STACK_DEPTH = 6  # user frames kept per op
# ops autograd's own bookkeeping runs (the recompute's saved-tensor hooks detach what they
# save), not the region: the two phases differ in them by design
_BOOKKEEPING = frozenset({"detach", "alias"})
# allocations whose contents are whatever memory held: only that they ran is compared
_UNINITIALISED = frozenset({"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"})


@dataclass
class LoggedOp:
    name: str
    outputs: list[torch.Tensor]
    stack: list[str]  # "path:line in function", innermost first


@dataclass
class Divergence:
    """The first recomputed op that differs from the forward."""

    index: int
    forward_op: str
    recompute_op: str | None  # None: the recompute ran more ops than the forward
    detail: str
    stack: list[str]  # where the forward ran that op
    max_abs: float | None = None

    def to_reason(self) -> dict[str, Any]:
        return {
            "category": "recompute",
            "name": self.forward_op,
            "max_abs": self.max_abs,
            "max_rel": None,
            "detail": f"op {self.index}: {self.detail}",
            "stack": self.stack,
            "aspect": aspect_of("recompute"),
        }


@dataclass
class Witness:
    """Watches one real checkpoint call from its forward to its recompute."""

    forward: list[LoggedOp] = field(default_factory=list)
    recomputes: int = 0
    compared: int = 0  # ops compared in the last recompute
    divergence: Divergence | None = None
    on_update: Callable[[Witness], None] | None = field(default=None, repr=False)  # after each recompute, and at a divergence

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Around the forward: log every op."""
        with _OpObserver(self._log):
            yield

    def comparing_function(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` as the recompute should call it: each op checked against the forward's log."""

        @functools.wraps(fn)
        def recompute(*args: Any, **kwargs: Any) -> Any:
            self.recomputes += 1
            self.compared = 0
            try:
                with _OpObserver(self._check):
                    return fn(*args, **kwargs)
            finally:
                self._updated()

        return recompute

    def forward_then_recompute(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """For reentrant checkpoint, which calls the same function in forward and in backward."""
        comparing = self.comparing_function(fn)
        calls = 0

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                with self.recording():
                    return fn(*args, **kwargs)
            return comparing(*args, **kwargs)

        return run

    def to_dict(self) -> dict[str, Any]:
        status = "not recomputed" if not self.recomputes else ("diverges" if self.divergence else "equivalent")
        data: dict[str, Any] = {"status": status, "forward_ops": len(self.forward), "recomputed_ops": self.compared}
        if self.divergence is not None:
            data["first_divergence"] = self.divergence.to_reason()
        return data

    # -- the two phases ---------------------------------------------------------

    def _log(self, name: str, outputs: list[torch.Tensor]) -> None:
        kept = [] if name in _UNINITIALISED else [t.detach().clone() for t in outputs]
        self.forward.append(LoggedOp(name, kept, _user_stack()))

    def _check(self, name: str, outputs: list[torch.Tensor]) -> None:
        index = self.compared
        self.compared += 1
        if self.divergence is not None:
            return
        if index >= len(self.forward):
            self._diverged(Divergence(index, name, name, "the recompute ran more ops than the forward", _user_stack()))
            return
        logged = self.forward[index]
        if name in _UNINITIALISED:
            outputs = []
        if logged.name != name or len(logged.outputs) != len(outputs):
            detail = f"the recompute ran `{name}` where the forward ran `{logged.name}`: the region took another path"
            self._diverged(Divergence(index, logged.name, name, detail, logged.stack))
            return
        for position, (before, after) in enumerate(zip(logged.outputs, outputs)):
            reason = compare_tensors("recompute", logged.name, before, after.detach())
            if reason is not None:
                what = reason.detail or "values differ"
                detail = f"`{logged.name}` output {position} differs between forward and recompute ({what})"
                self._diverged(Divergence(index, logged.name, name, detail, logged.stack, reason.max_abs))
                return

    def _diverged(self, divergence: Divergence) -> None:
        self.divergence = divergence
        self._updated()

    def _updated(self) -> None:
        if self.on_update is not None:
            self.on_update(self)


class _OpObserver(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch leaves __init_subclass__ unannotated
    """Hands each op's tensor outputs to `observe`; changes nothing."""

    def __init__(self, observe: Callable[[str, list[torch.Tensor]], None]):
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        self.observe = observe

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        name = str(func.overloadpacket.__name__) if hasattr(func, "overloadpacket") else str(func)
        if name not in _BOOKKEEPING:
            self.observe(name, [value for value in tree_leaves(result) if isinstance(value, torch.Tensor)])
        return result


def _user_stack() -> list[str]:
    frames: list[str] = []
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and len(frames) < STACK_DEPTH:
        path = frame.f_code.co_filename
        if not path.startswith(_SKIPPED_DIRS) and path not in _SKIPPED_FILES and not path.startswith("<"):
            frames.append(f"{os.path.abspath(path)}:{frame.f_lineno} in {frame.f_code.co_name}")
        frame = frame.f_back
    return frames
