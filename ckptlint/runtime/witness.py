"""The real backward as witness: compare the recompute torch runs with the forward it replaces.

A replay at the call sees the state as it is then; a hazard that appears between forward
and backward (a step counter bumped after the loss, a pipeline schedule, a hook) is
invisible to it. The witness watches the user's own call instead: while the forward runs it
logs every op's outputs (cloned: memory for sampled calls only) with the Python stack that
ran it; when backward recomputes the region it checks each recomputed op against the log,
in order, and reports the first op that is another op (the region took another path) or
whose output, where backward saves it, has other values (dtype-aware tolerances, exact for
integer and boolean tensors). Only saved tensors are compared by value: they are what the
recompute is for, and an output nothing saves (`x * random.random()` under non-reentrant
checkpoint, whose gradient uses the forward's scalar) changes no gradient.

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
from ckptlint.runtime.frames import is_user_code

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
    scalars: list[torch.Tensor] = field(default_factory=list)  # its one-element tensor inputs (Python numbers wrapped)


@dataclass
class Divergence:
    """The first recomputed op that differs from the forward."""

    index: int
    forward_op: str
    recompute_op: str  # the op the recompute ran at that index
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
    # in the recompute: which op (index, output position) made each tensor, by storage and layout
    _produced: dict[tuple[int, int, tuple[int, ...], tuple[int, ...]], tuple[int, int]] = field(default_factory=dict, repr=False)
    _quiet: bool = field(default=False, repr=False)  # the witness's own comparison ops are not the region's
    # reentrant checkpoint builds backward's whole graph from the recompute, so every output
    # counts; non-reentrant keeps the forward's graph and only refills what it saved
    every_output: bool = False

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Around the forward: log every op."""
        with _OpObserver(self._log):
            yield

    def comparing_function(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` as the recompute should call it: each op checked against the forward's log,
        each tensor backward saves checked against the forward's value."""

        @functools.wraps(fn)
        def recompute(*args: Any, **kwargs: Any) -> Any:
            self.recomputes += 1
            self.compared = 0
            self._produced.clear()
            try:
                with _saving(self._saved), _OpObserver(self._check):
                    return fn(*args, **kwargs)
            finally:
                self._produced.clear()
                self._updated()

        return recompute

    def forward_then_recompute(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """For reentrant checkpoint, which calls the same function in forward and in backward."""
        self.every_output = True
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

    def _log(self, name: str, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        kept = [] if name in _UNINITIALISED else [t.detach().clone() for t in outputs]
        scalars = [t.detach().clone() for t in inputs if t.numel() == 1]
        self.forward.append(LoggedOp(name, kept, _user_stack(), scalars))

    def _check(self, name: str, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        if self._quiet:
            return
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
        if self.every_output:
            self._compare(index, list(enumerate(zip(logged.outputs, outputs))))
            return
        # a one-element input no earlier op made is a Python number (or a small constant): backward
        # may save it (`x * scale`), and under reentrant checkpoint it is what the gradient uses
        scalars = [t for t in inputs if t.numel() == 1]
        for position, scalar in enumerate(scalars):
            if position < len(logged.scalars):
                self._produced.setdefault(_identity(scalar), (index, -1 - position))
        for position, output in enumerate(outputs):
            self._produced[_identity(output)] = (index, position)

    def _saved(self, tensor: torch.Tensor) -> None:
        """Backward saves `tensor` in the recompute: it must hold the forward's value."""
        made_by = self._produced.get(_identity(tensor))
        if made_by is None or self.divergence is not None:
            return  # an input of the region or a parameter: the same object in both phases
        index, position = made_by
        logged = self.forward[index]
        before = logged.outputs[position] if position >= 0 else logged.scalars[-1 - position]
        self._compare(index, [(position, (before, tensor))])

    def _compare(self, index: int, pairs: list[tuple[int, tuple[torch.Tensor, torch.Tensor]]]) -> None:
        """Forward and recompute values of op `index` (position < 0: a scalar input)."""
        logged = self.forward[index]
        self._quiet = True
        try:
            for position, (before, after) in pairs:
                reason = compare_tensors("recompute", logged.name, before, after.detach())
                if reason is not None:
                    what = reason.detail or "values differ"
                    which = f"output {position}" if position >= 0 else f"scalar input {-1 - position}"
                    saved = "" if self.every_output else ", which backward saves,"
                    detail = f"`{logged.name}` {which}{saved} differs between forward and recompute ({what})"
                    self._diverged(Divergence(index, logged.name, logged.name, detail, logged.stack, reason.max_abs))
                    return
        finally:
            self._quiet = False

    def _diverged(self, divergence: Divergence) -> None:
        self.divergence = divergence
        self._updated()

    def _updated(self) -> None:
        if self.on_update is not None:
            self.on_update(self)


class _OpObserver(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch leaves __init_subclass__ unannotated
    """Hands each op's tensor outputs to `observe`; changes nothing."""

    def __init__(self, observe: Callable[[str, list[torch.Tensor], list[torch.Tensor]], None]):
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        self.observe = observe

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        name = str(func.overloadpacket.__name__) if hasattr(func, "overloadpacket") else str(func)
        if name not in _BOOKKEEPING:
            inputs = [value for value in tree_leaves((args, kwargs)) if isinstance(value, torch.Tensor)]
            self.observe(name, inputs, [value for value in tree_leaves(result) if isinstance(value, torch.Tensor)])
        return result


def _identity(tensor: torch.Tensor) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
    """The same tensor whichever Python object holds it: storage, offset, shape and strides."""
    return (tensor.untyped_storage().data_ptr(), int(tensor.storage_offset()), tuple(tensor.shape), tuple(tensor.stride()))


@contextlib.contextmanager
def _saving(observe: Callable[[torch.Tensor], None]) -> Iterator[None]:
    """See each tensor autograd saves, then hand it to whatever hooks were already there
    (non-reentrant checkpoint's recomputation hook), so checkpointing works as before."""
    previous = torch._C._autograd._top_saved_tensors_default_hooks(False)
    pack_below, unpack_below = previous if previous is not None else (None, None)

    def pack(tensor: torch.Tensor) -> Any:
        observe(tensor)
        return pack_below(tensor) if pack_below is not None else tensor

    def unpack(packed: Any) -> Any:
        return unpack_below(packed) if unpack_below is not None else packed

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        yield


def _user_stack() -> list[str]:
    frames: list[str] = []
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and len(frames) < STACK_DEPTH:
        path = frame.f_code.co_filename
        if is_user_code(path):
            frames.append(f"{os.path.abspath(path)}:{frame.f_lineno} in {frame.f_code.co_name}")
        frame = frame.f_back
    return frames
