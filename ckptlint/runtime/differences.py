"""Everything that came out differently with checkpointing than without: one Reason each.

Tensors (outputs, gradients, state) are compared with dtype-aware tolerances; RNG streams
and generator objects by position; side effects (containers, attributes, globals, closure
cells) by the signature each replay left, so a list appended to twice reads as "1 elements
without checkpointing, 2 with" under the name the region reaches it by (`args[1]`,
`counter`, `region.log`).
"""

from __future__ import annotations

from typing import Any

import torch

from ckptlint.runtime.compare import Reason, compare_tensors, describe_signature_change
from ckptlint.runtime.outcome import Outcome
from ckptlint.runtime.reach import Reachable
from ckptlint.runtime.snapshot import Snapshot
from ckptlint.runtime.streams import same_state

_MOVED = "the generator is at a different position after the step"


def differences(plain: Outcome, checkpointed: Outcome, snapshot: Snapshot, reach: Reachable) -> list[Reason]:
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
            reasons.append(Reason("rng", stream, detail=_MOVED))
    for name in sorted(set(plain.generators) & set(checkpointed.generators)):
        if not same_state(plain.generators[name][1], checkpointed.generators[name][1]):
            reasons.append(Reason("rng", name, detail=_MOVED))
    for category, first, second in (
        ("container", plain.containers, checkpointed.containers),
        ("attribute", plain.attributes, checkpointed.attributes),
        ("global", plain.globals, checkpointed.globals),
        ("closure", plain.closures, checkpointed.closures),
    ):
        _side_effects(reasons, category, first, second)
    return reasons


def _side_effects(reasons: list[Reason], category: str, first: dict[str, Any], second: dict[str, Any]) -> None:
    for name in sorted(set(first) | set(second)):
        a, b = first.get(name, "<unchanged>"), second.get(name, "<unchanged>")
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            _add(reasons, compare_tensors(category, name, a, b))
        elif isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) or a != b:
            reasons.append(Reason(category, name, detail=describe_signature_change(a, b)))


def _add(reasons: list[Reason], reason: Reason | None) -> None:
    if reason is not None:
        reasons.append(reason)
