"""Run a region once without and once with checkpointing, from the same state, and record both.

Each replay runs on detached clones of the tensor inputs (keeping `requires_grad`), pulls
a fixed cotangent through `backward()` (drawn from a private generator, never the global
RNG; reentrant checkpoint rejects `autograd.grad`), and records outputs, input and
parameter gradients, and the state the region left behind. Tensors the region appended
to containers it can reach count as outputs: a MoE auxiliary loss collected in a list
only gets its gradient through that list.

A list or dict passed as an argument is handed to the replay as itself, as checkpoint
hands it to the region, so that what the region does to it is seen (and undone by the
snapshot); only one that holds tensors requiring grad is copied, with those detached,
lest the replay's backward run into the user's graph, and the copy is observed instead.
The plain replay's graph is walked for leaves the reachability walk missed: backward
would write their `.grad`, so the snapshot adopts them first. A region that closes over a
non-leaf tensor backpropagates into the user's graph, which is then retained.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from types import FrameType
from typing import Any, Callable, Literal

import torch

from ckptlint.runtime.outcome import ArgumentCopy, Outcome, elements, observe_state
from ckptlint.runtime.reach import Reachable, is_library_file
from ckptlint.runtime.snapshot import Snapshot

COTANGENT_SEED = 20260101
MAX_GRAPH_NODES = 100_000

# the events and hook type of `sys.setprofile` (typeshed's `_typeshed.ProfileFunction`)
_ProfileEvent = Literal["call", "return", "c_call", "c_return", "c_exception"]
_ProfileFunction = Callable[[FrameType, _ProfileEvent, Any], object]


def clone_inputs(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        copy = value.detach().clone()
        if value.requires_grad and (copy.is_floating_point() or copy.is_complex()):
            copy.requires_grad_(True)
        return copy
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(clone_inputs(v) for v in value)
    if type(value) is list and _holds_grad_tensor(value):
        return [clone_inputs(v) for v in value]
    if type(value) is dict and _holds_grad_tensor(value):
        return {k: clone_inputs(v) for k, v in value.items()}
    return value  # passed as itself: the snapshot restores it, the observation sees it


def _holds_grad_tensor(value: Any, depth: int = 0) -> bool:
    if isinstance(value, torch.Tensor):
        return value.requires_grad
    if depth < 4 and isinstance(value, (list, tuple)):
        return any(_holds_grad_tensor(v, depth + 1) for v in value)
    if depth < 4 and isinstance(value, dict):
        return any(_holds_grad_tensor(v, depth + 1) for v in value.values())
    return False


def _argument_copies(args: tuple[Any, ...], inputs: tuple[Any, ...], kwargs: dict[str, Any], keyword_inputs: dict[str, Any]) -> list[ArgumentCopy]:
    """The container arguments the replay got a copy of, named as the region reaches them."""
    pairs = [(f"args[{i}]", a, b) for i, (a, b) in enumerate(zip(args, inputs))]
    pairs += [(f"kwargs[{key!r}]", kwargs[key], keyword_inputs[key]) for key in kwargs]
    return [ArgumentCopy(name, copy, elements(copy)) for name, original, copy in pairs if isinstance(copy, (list, dict)) and copy is not original]


def tensors_in(value: Any, found: list[torch.Tensor] | None = None, depth: int = 0) -> list[torch.Tensor]:
    found = [] if found is None else found
    if isinstance(value, torch.Tensor):
        found.append(value)
    elif depth < 4 and isinstance(value, (tuple, list)):
        for item in value:
            tensors_in(item, found, depth + 1)
    elif depth < 4 and isinstance(value, dict):
        for item in value.values():
            tensors_in(item, found, depth + 1)
    return found


def _cotangent(tensor: torch.Tensor, index: int) -> torch.Tensor:
    generator = torch.Generator(device=tensor.device)
    generator.manual_seed(COTANGENT_SEED + index)
    return torch.randn(tensor.shape, generator=generator, dtype=tensor.dtype, device=tensor.device)


# the frame `module(x)` enters first: its caller's line is where the project called that module
_MODULE_CALL = getattr(torch.nn.Module, "_wrapped_call_impl", torch.nn.Module._call_impl).__code__
_COMPANION = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # ckptlint's own frames call the region


class _CodeTracer:
    """Which project functions a replay ran, and the project lines that called each module (a
    profile hook: cheap, chains to an existing one)."""

    def __init__(self) -> None:
        self.executed: set[tuple[str, int, int]] = set()
        self.module_calls: dict[int, set[tuple[str, int]]] = {}  # id(module) -> (file, line) of its calls
        self._previous: _ProfileFunction | None = None

    def __enter__(self) -> _CodeTracer:
        self._previous = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(self._previous)

    def _profile(self, frame: FrameType, event: _ProfileEvent, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            if code is _MODULE_CALL:
                caller = frame.f_back
                where = caller.f_code.co_filename if caller is not None else ""
                if caller is not None and not is_library_file(where) and not where.startswith(_COMPANION):
                    self.module_calls.setdefault(id(frame.f_locals.get("self")), set()).add((caller.f_code.co_filename, caller.f_lineno))
            elif not is_library_file(code.co_filename):
                lines = [line for _, _, line in code.co_lines() if line is not None]
                self.executed.add((code.co_filename, min(lines, default=code.co_firstlineno), max(lines, default=code.co_firstlineno)))
        if self._previous is not None:
            self._previous(frame, event, arg)


def run_replay(
    run: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    reach: Reachable,
    snapshot: Snapshot,
    trace: bool = False,
    context: Callable[[], Any] = contextlib.nullcontext,
) -> Outcome:
    """One replay (`run` is the region, with or without checkpointing) and what it left."""
    with context():
        return _replay(run, args, kwargs, reach, snapshot, trace)


def _untracked_container(result: Any, tensors: list[torch.Tensor]) -> str | None:
    """The type of `result` when it holds tensors other than as itself or as a tuple's items:
    autograd.Function (reentrant checkpoint) tracks only a returned tensor or a tuple's tensors."""
    if not tensors or isinstance(result, torch.Tensor):
        return None
    if type(result) is tuple and all(isinstance(item, torch.Tensor) or not tensors_in(item) for item in result):
        return None
    return type(result).__qualname__


def _replay(run: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], reach: Reachable, snapshot: Snapshot, trace: bool) -> Outcome:
    outcome = Outcome()
    inputs = clone_inputs(args)
    keyword_inputs = clone_inputs(kwargs)
    copies = _argument_copies(args, inputs, kwargs, keyword_inputs)
    before = {id(value): elements(value) for _, value in reach.containers.values()}
    before.update({id(copy.value): copy.elements for copy in copies})
    snapshot.clear_grads()
    try:
        with torch.enable_grad():
            if trace:
                with _CodeTracer() as tracer:
                    result = run(*inputs, **keyword_inputs)
                outcome.executed = tracer.executed
                outcome.module_calls = tracer.module_calls
            else:
                result = run(*inputs, **keyword_inputs)
            outputs = tensors_in(result)
            outcome.outputs = [t.detach().clone() for t in outputs]
            outcome.untracked_container = _untracked_container(result, outputs)
            outputs.extend(_appended_tensors([value for _, value in reach.containers.values()] + [c.value for c in copies], before))
            differentiable = [t for t in outputs if t.requires_grad and (t.is_floating_point() or t.is_complex())]
            if trace:  # the plain replay: its graph shows every leaf backward will reach
                _adopt_unreached_leaves(differentiable, snapshot, tensors_in((inputs, keyword_inputs)))
            if differentiable:
                cotangents = [_cotangent(t, i) for i, t in enumerate(differentiable)]
                torch.autograd.backward(differentiable, cotangents, retain_graph=_holds_user_graph(reach))
    except Exception as exc:  # the replay itself failing is a finding (CheckpointError and the like)
        outcome.error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    outcome.input_grads = [
        t.grad.detach().clone() if isinstance(t, torch.Tensor) and t.grad is not None else None for t in tensors_in(inputs)
    ]
    outcome.parameter_grads = {
        name: (p.grad.detach().clone() if p.grad is not None else None) for name, p in reach.parameters()
    }
    observe_state(outcome, reach, snapshot, copies)
    return outcome


def _holds_user_graph(reach: Reachable) -> bool:
    """A region that closes over a tensor of the user's graph (not a leaf, requires grad)
    backpropagates into that graph: keep it, or the user's own backward finds it freed.
    The leaves it reaches are adopted by the snapshot like any others."""
    return any(t.requires_grad and not t.is_leaf for _, t in reach.tensors.values())


def _appended_tensors(containers: list[Any], before: dict[int, list[Any]]) -> list[torch.Tensor]:
    new: list[torch.Tensor] = []
    for value in containers:
        old = {id(e) for e in before.get(id(value), [])}
        new.extend(t for e in elements(value) if id(e) not in old for t in tensors_in(e))
    return new


def _adopt_unreached_leaves(outputs: list[torch.Tensor], snapshot: Snapshot, inputs: list[torch.Tensor]) -> None:
    """Leaves in the plain replay's graph that the snapshot lacks (a parameter only a library
    object holds, say): backward would accumulate into their `.grad` behind the user's back."""
    known = {id(t) for _, t in snapshot.reach.tensors.values()} | {id(t) for t in inputs}
    adopted = 0
    seen: set[Any] = set()
    pending = [t.grad_fn for t in outputs if t.grad_fn is not None]
    while pending and len(seen) < MAX_GRAPH_NODES:
        node = pending.pop()
        if node in seen:
            continue
        seen.add(node)
        leaf = getattr(node, "variable", None)  # AccumulateGrad
        if isinstance(leaf, torch.Tensor) and id(leaf) not in known:
            known.add(id(leaf))
            adopted += 1
            snapshot.adopt(f"unreached leaf #{adopted} {tuple(leaf.shape)}", leaf)
        pending.extend(next_node for next_node, _ in node.next_functions if next_node is not None)
