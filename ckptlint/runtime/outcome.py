"""What one replay produced and what it left behind, recorded before the snapshot is restored.

Side effects are observed against the snapshot, by identity (a replay that rebinds a
closure cell, appends to a list or reassigns an attribute leaves a different object
there), and recorded by signature, never identity, so that the two replays can be
compared. Argument containers the replay was given a private copy of (their tensors
need detaching) are observed on that copy. Generator objects are recorded by state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ckptlint.runtime.compare import signature
from ckptlint.runtime.reach import Reachable
from ckptlint.runtime.snapshot import MISSING, Snapshot, cell_contents, changed, same_elements
from ckptlint.runtime.streams import RngState, generator_kind, get_state


@dataclass
class Outcome:
    outputs: list[torch.Tensor | None] = field(default_factory=list)
    input_grads: list[torch.Tensor | None] = field(default_factory=list)
    parameter_grads: dict[str, torch.Tensor | None] = field(default_factory=dict)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # state tensors the replay changed
    containers: dict[str, Any] = field(default_factory=dict)
    attributes: dict[str, Any] = field(default_factory=dict)
    globals: dict[str, Any] = field(default_factory=dict)
    closures: dict[str, Any] = field(default_factory=dict)  # closure cells the replay rebound
    rng: RngState | None = None
    generators: dict[str, tuple[str, Any]] = field(default_factory=dict)  # "name (kind)" -> (kind, state after)
    error: str | None = None
    executed: set[tuple[str, int, int]] = field(default_factory=set)  # code run: (file, first line, last line)
    module_calls: dict[int, set[tuple[str, int]]] = field(default_factory=dict)  # id(module) -> project lines that called it
    # the region's result holds tensors in something other than a tensor or a tuple (a dict, a
    # dataclass, a ModelOutput): reentrant checkpoint's autograd.Function does not track those
    untracked_container: str | None = None


@dataclass
class ArgumentCopy:
    """A container argument the replay got a copy of, and the elements the copy started with."""

    name: str
    value: Any
    elements: list[Any]


def elements(value: Any) -> list[Any]:
    return list(value.values()) if isinstance(value, dict) else list(value)


def observe_state(outcome: Outcome, reach: Reachable, snapshot: Snapshot, copies: list[ArgumentCopy]) -> None:
    """Record what the replay changed, compared with the snapshot."""
    outcome.rng = RngState.capture()
    for name, generator in reach.generators.values():
        kind = generator_kind(generator) or type(generator).__name__
        outcome.generators[f"{name} ({kind})"] = (kind, get_state(generator))
    for (name, tensor), (_, saved, version) in zip(reach.tensors.values(), snapshot.tensors):
        if changed(tensor, saved, version):
            outcome.tensors[name] = tensor.detach().clone()
    for value, saved in snapshot.containers:
        if not same_elements(value, elements(saved)):
            outcome.containers[reach.containers[id(value)][0]] = signature(value)
    for copy in copies:
        if not same_elements(copy.value, copy.elements):
            outcome.containers[copy.name] = signature(copy.value)
    for value, saved_attributes, internals in snapshot.objects:
        name = reach.objects[id(value)][0]
        attributes = vars(value)
        for key, registry in internals.items():  # buffers and parameters reassigned on modules
            for item_name, item in attributes.get(key, {}).items():
                if registry.get(item_name) is not item and isinstance(item, torch.Tensor):
                    outcome.tensors[f"{name}.{item_name}"] = item.detach().clone()
        for key, item in attributes.items():
            if key in internals or saved_attributes.get(key, MISSING) is item:
                continue
            outcome.attributes[f"{name}.{key}"] = item.detach().clone() if isinstance(item, torch.Tensor) else signature(item)
    for namespace, global_name, present, value in snapshot.globals:
        current = namespace.get(global_name, MISSING)
        if current is not value or (present is False and current is not MISSING):
            outcome.globals[global_name] = signature(current) if current is not MISSING else "<deleted>"
    names = {id(cell): name for name, cell in reach.cells.values()}
    for cell, contents in snapshot.cells:
        current = cell_contents(cell)
        if current is not contents:
            value = current.detach().clone() if isinstance(current, torch.Tensor) else signature(current)
            outcome.closures[names[id(cell)]] = value if current is not MISSING else "<deleted>"
