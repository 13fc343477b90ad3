"""Capture everything a region can change, put it back exactly, and observe what changed.

Restoring is invisible to the user's run: tensors are copied back only when their
version counter moved, and the counter is then set back, so autograd never sees an
in-place modification that the user's own code did not make. `.grad` fields, RNG
streams (torch CPU and every initialised CUDA device, Python `random`, NumPy),
containers, object attributes (buffers reassigned on modules included) and globals
are restored as they were.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from typing import Any

import torch

from ckptlint.runtime.reach import Reachable

_SET_VERSION = torch._C._autograd._unsafe_set_version_counter


@dataclass
class RngState:
    cpu: torch.Tensor
    cuda: list[torch.Tensor] | None
    python: tuple[Any, ...]
    numpy: Any | None

    @classmethod
    def capture(cls) -> RngState:
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        numpy = sys.modules.get("numpy")
        return cls(torch.get_rng_state(), cuda, random.getstate(), numpy.random.get_state() if numpy else None)

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        random.setstate(self.python)
        numpy = sys.modules.get("numpy")
        if numpy is not None and self.numpy is not None:
            numpy.random.set_state(self.numpy)

    def differences(self, other: RngState) -> list[str]:
        """Which streams are at a different position."""
        changed = []
        if not torch.equal(self.cpu, other.cpu):
            changed.append("torch CPU generator")
        for index, (mine, theirs) in enumerate(zip(self.cuda or [], other.cuda or [])):
            if not torch.equal(mine, theirs):
                changed.append(f"torch cuda:{index} generator")
        if self.python != other.python:
            changed.append("Python random")
        if self.numpy is not None and other.numpy is not None and not _numpy_states_equal(self.numpy, other.numpy):
            changed.append("NumPy global generator")
        return changed


def _numpy_states_equal(first: Any, second: Any) -> bool:
    name1, keys1, position1, *rest1 = first
    name2, keys2, position2, *rest2 = second
    return name1 == name2 and position1 == position2 and (keys1 == keys2).all() and list(rest1) == list(rest2)


def _container_copy(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else list(value)


def _same_items(current: dict[Any, Any], saved: dict[Any, Any]) -> bool:
    """Identity, not ==: values may be tensors."""
    return list(current) == list(saved) and all(current[key] is saved[key] for key in saved)


def _restore_container(value: Any, saved: Any) -> None:
    if isinstance(value, dict):
        if not _same_items(value, saved):
            value.clear()
            value.update(saved)
    elif isinstance(value, list):
        if len(value) != len(saved) or any(a is not b for a, b in zip(value, saved)):
            value[:] = saved
    else:  # set, deque
        value.clear()
        (value.update if isinstance(value, set) else value.extend)(saved)


def changed(tensor: torch.Tensor, saved: torch.Tensor, version: int) -> bool:
    """Kernels such as batch_norm update running statistics without bumping the version
    counter, so values are compared too."""
    if tensor._version != version or tensor.shape != saved.shape or tensor.dtype != saved.dtype:
        return True
    return not torch.equal(tensor.detach(), saved)


class Snapshot:
    """The state a region can reach, as it was when the snapshot was taken."""

    def __init__(self, reach: Reachable):
        self.reach = reach
        self.rng = RngState.capture()
        self.tensors = [(t, t.detach().clone(), t._version) for _, t in reach.tensors.values()]
        self.grads = [(t, t.grad) for _, t in reach.tensors.values() if t.is_leaf]
        self.containers = [(value, _container_copy(value)) for _, value in reach.containers.values()]
        self.objects = []
        for _, value in reach.objects.values():
            attributes = vars(value)
            internals = {
                key: dict(attributes[key]) for key in ("_parameters", "_buffers", "_modules") if isinstance(attributes.get(key), dict)
            }
            self.objects.append((value, dict(attributes), internals))
        self.globals = [
            (namespace, name, name in namespace, namespace.get(name)) for namespace, name in reach.globals.values()
        ]

    def restore(self) -> None:
        self.rng.restore()
        with torch.no_grad():
            for tensor, saved, version in self.tensors:
                if changed(tensor, saved, version):
                    if tensor.shape == saved.shape and tensor.dtype == saved.dtype:
                        tensor.copy_(saved)
                    else:
                        tensor.data = saved.clone()
                    _SET_VERSION((tensor,), (version,))
        for tensor, grad in self.grads:
            if tensor.grad is not grad:
                tensor.grad = grad
        for value, saved in self.containers:
            _restore_container(value, saved)
        for value, saved_attributes, internals in self.objects:
            attributes = vars(value)
            for key, inner in internals.items():
                if attributes.get(key) is not None and not _same_items(attributes[key], inner):
                    attributes[key].clear()
                    attributes[key].update(inner)
            for key in [k for k in attributes if k not in saved_attributes]:
                del attributes[key]
            for key, item in saved_attributes.items():
                if attributes.get(key, _MISSING) is not item:
                    attributes[key] = item
        for namespace, name, present, value in self.globals:
            if present:
                if namespace.get(name, _MISSING) is not value:
                    namespace[name] = value
            else:
                namespace.pop(name, None)

    def clear_grads(self) -> None:
        """Replays accumulate gradients from zero; the user's `.grad` is restored afterwards."""
        for tensor, _ in self.grads:
            tensor.grad = None


_MISSING = object()
