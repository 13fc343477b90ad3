"""Run a region once without and once with checkpointing, from the same state, and record both.

Each replay runs on detached clones of the inputs (keeping `requires_grad`), pulls a
fixed cotangent through `backward()` (drawn from a private generator, never the global
RNG; reentrant checkpoint rejects `autograd.grad`), and records outputs, input and
parameter gradients, and the state the region left behind. Tensors the region appended
to containers it can reach count as outputs: a MoE auxiliary loss collected in a list
only gets its gradient through that list.
"""

from __future__ import annotations

import contextlib
import sys
import traceback
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Callable, Literal

import torch

from ckptlint.runtime.compare import Reason, compare_tensors, describe_signature_change, signature
from ckptlint.runtime.reach import Reachable, is_library_file
from ckptlint.runtime.snapshot import RngState, Snapshot, changed

COTANGENT_SEED = 20260101

# the events and hook type of `sys.setprofile` (typeshed's `_typeshed.ProfileFunction`)
_ProfileEvent = Literal["call", "return", "c_call", "c_return", "c_exception"]
_ProfileFunction = Callable[[FrameType, _ProfileEvent, Any], object]


@dataclass
class Outcome:
    outputs: list[torch.Tensor | None] = field(default_factory=list)
    input_grads: list[torch.Tensor | None] = field(default_factory=list)
    parameter_grads: dict[str, torch.Tensor | None] = field(default_factory=dict)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # state tensors the replay changed
    containers: dict[str, Any] = field(default_factory=dict)
    attributes: dict[str, Any] = field(default_factory=dict)
    globals: dict[str, Any] = field(default_factory=dict)
    rng: RngState | None = None
    error: str | None = None
    executed: set[tuple[str, int, int]] = field(default_factory=set)  # code run: (file, first line, last line)


def clone_inputs(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        copy = value.detach().clone()
        if value.requires_grad and (copy.is_floating_point() or copy.is_complex()):
            copy.requires_grad_(True)
        return copy
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(clone_inputs(v) for v in value)
    if isinstance(value, list):
        return [clone_inputs(v) for v in value]
    if isinstance(value, dict) and type(value) is dict:
        return {k: clone_inputs(v) for k, v in value.items()}
    return value


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


class _CodeTracer:
    """Which project functions a replay ran (a profile hook: cheap, chains to an existing one)."""

    def __init__(self) -> None:
        self.executed: set[tuple[str, int, int]] = set()
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
            if not is_library_file(code.co_filename):
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


def _replay(run: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], reach: Reachable, snapshot: Snapshot, trace: bool) -> Outcome:
    outcome = Outcome()
    inputs = clone_inputs(args)
    keyword_inputs = clone_inputs(kwargs)
    before = {id(value): list(value) if not isinstance(value, dict) else list(value.values()) for _, value in reach.containers.values()}
    snapshot.clear_grads()
    try:
        with torch.enable_grad():
            if trace:
                with _CodeTracer() as tracer:
                    result = run(*inputs, **keyword_inputs)
                outcome.executed = tracer.executed
            else:
                result = run(*inputs, **keyword_inputs)
            outputs = tensors_in(result)
            outcome.outputs = [t.detach().clone() for t in outputs]
            outputs.extend(_appended_tensors(reach, before))
            differentiable = [t for t in outputs if t.requires_grad and (t.is_floating_point() or t.is_complex())]
            if differentiable:
                torch.autograd.backward(differentiable, [_cotangent(t, i) for i, t in enumerate(differentiable)])
    except Exception as exc:  # the replay itself failing is a finding (CheckpointError and the like)
        outcome.error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    outcome.input_grads = [
        t.grad.detach().clone() if isinstance(t, torch.Tensor) and t.grad is not None else None for t in tensors_in(inputs)
    ]
    outcome.parameter_grads = {
        name: (p.grad.detach().clone() if p.grad is not None else None) for name, p in reach.parameters()
    }
    _observe_state(outcome, reach, snapshot)
    return outcome


def _appended_tensors(reach: Reachable, before: dict[int, list[Any]]) -> list[torch.Tensor]:
    new: list[torch.Tensor] = []
    for _, value in reach.containers.values():
        elements = list(value.values()) if isinstance(value, dict) else list(value)
        old = {id(e) for e in before.get(id(value), [])}
        new.extend(t for e in elements if id(e) not in old for t in tensors_in(e))
    return new


def _observe_state(outcome: Outcome, reach: Reachable, snapshot: Snapshot) -> None:
    outcome.rng = RngState.capture()
    for (name, tensor), (_, saved, version) in zip(reach.tensors.values(), snapshot.tensors):
        if changed(tensor, saved, version):
            outcome.tensors[name] = tensor.detach().clone()
    for value, saved in snapshot.containers:
        current = list(value.values()) if isinstance(value, dict) else list(value)
        old = list(saved.values()) if isinstance(saved, dict) else list(saved)
        if len(current) != len(old) or any(a is not b for a, b in zip(current, old)):
            name = reach.containers[id(value)][0]
            outcome.containers[name] = signature(value)
    for value, saved_attributes, internals in snapshot.objects:
        name = reach.objects[id(value)][0]
        attributes = vars(value)
        for key, registry in internals.items():  # buffers and parameters reassigned on modules
            for item_name, item in attributes.get(key, {}).items():
                if registry.get(item_name) is not item and isinstance(item, torch.Tensor):
                    outcome.tensors[f"{name}.{item_name}"] = item.detach().clone()
        for key, item in attributes.items():
            if key in internals or saved_attributes.get(key, _MISSING) is item:
                continue
            outcome.attributes[f"{name}.{key}"] = item.detach().clone() if isinstance(item, torch.Tensor) else signature(item)
    for namespace, global_name, present, value in snapshot.globals:
        current = namespace.get(global_name, _MISSING)
        if current is not value or (present is False and current is not _MISSING):
            outcome.globals[global_name] = signature(current) if current is not _MISSING else "<deleted>"


_MISSING = object()


def differences(plain: Outcome, checkpointed: Outcome, snapshot: Snapshot, reach: Reachable) -> list[Reason]:
    """Everything that came out differently with checkpointing."""
    reasons: list[Reason] = []
    if checkpointed.error and not plain.error:
        reasons.append(Reason("error", "checkpointed replay", detail=checkpointed.error))
    for index, (a, b) in enumerate(zip(plain.outputs, checkpointed.outputs)):
        _add(reasons, compare_tensors("output", f"output[{index}]", a, b))
    for index, (a, b) in enumerate(zip(plain.input_grads, checkpointed.input_grads)):
        _add(reasons, compare_tensors("input-grad", f"input[{index}]", a, b))
    for name in plain.parameter_grads:
        _add(reasons, compare_tensors("parameter-grad", name, plain.parameter_grads[name], checkpointed.parameter_grads.get(name)))
    originals = {name: saved for (name, _), (_, saved, _) in zip(reach.tensors.values(), snapshot.tensors)}
    for name in sorted(set(plain.tensors) | set(checkpointed.tensors)):
        before = originals.get(name)
        _add(reasons, compare_tensors("buffer", name, plain.tensors.get(name, before), checkpointed.tensors.get(name, before)))
    if plain.rng is not None and checkpointed.rng is not None:
        for stream in plain.rng.differences(checkpointed.rng):
            reasons.append(Reason("rng", stream, detail="the generator is at a different position after the step"))
    for category, first, second in (
        ("container", plain.containers, checkpointed.containers),
        ("attribute", plain.attributes, checkpointed.attributes),
        ("global", plain.globals, checkpointed.globals),
    ):
        for name in sorted(set(first) | set(second)):
            a, b = first.get(name, "<unchanged>"), second.get(name, "<unchanged>")
            if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
                _add(reasons, compare_tensors(category, name, a, b))
            elif isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) or a != b:
                reasons.append(Reason(category, name, detail=describe_signature_change(a, b)))
    return reasons


def _add(reasons: list[Reason], reason: Reason | None) -> None:
    if reason is not None:
        reasons.append(reason)
