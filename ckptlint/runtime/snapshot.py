"""Capture everything a region can change, put it back exactly, and observe what changed.

Restoring is invisible to the user's run: tensors are copied back only when their
version counter moved, and the counter is then set back, so autograd never sees an
in-place modification that the user's own code did not make. `.grad` fields, RNG
streams (the global ones and every generator object the region can reach), containers,
object attributes (buffers reassigned on modules included), closure cells and globals
are restored as they were; so are the attributes of the autograd.Function classes the
region calls (reach.py).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from ckptlint.runtime.reach import Reachable
from ckptlint.runtime.streams import RngState, get_state, set_state

_SET_VERSION = torch._C._autograd._unsafe_set_version_counter
MISSING: Any = object()  # an empty closure cell, an absent global or attribute


def _container_copy(value: Any) -> Any:
    """The stored items: `dict(value)` and `value[key]` call an overridden `__getitem__`, which
    may build a new object at each lookup (transformers' activation table does); `items()` and
    `values()` read what is stored."""
    return dict(value.items()) if isinstance(value, dict) else list(value)


def _same_items(current: dict[Any, Any], saved: dict[Any, Any]) -> bool:
    """Identity, not ==: values may be tensors."""
    return list(current) == list(saved) and all(a is b for a, b in zip(current.values(), saved.values()))


def _restore_container(value: Any, saved: Any) -> None:
    if isinstance(value, dict):
        if not _same_items(value, saved):
            value.clear()
            value.update(saved)
    elif same_elements(value, saved):
        return
    elif isinstance(value, list):
        value[:] = saved
    else:  # set, deque
        value.clear()
        (value.update if isinstance(value, set) else value.extend)(saved)


def _restore_attributes(value: Any, saved: dict[str, Any]) -> None:
    """Through the instance's `__dict__` (bypassing `nn.Module.__setattr__`'s routing), or, for
    a class (an autograd.Function's counter), through setattr: its `__dict__` is read-only."""
    attributes = vars(value)
    added = [key for key in attributes if key not in saved]
    rebound = [(key, item) for key, item in saved.items() if attributes.get(key, MISSING) is not item]
    if isinstance(value, type):
        for key in added:
            delattr(value, key)
        for key, item in rebound:
            setattr(value, key, item)
        return
    for key in added:
        del attributes[key]
    for key, item in rebound:
        attributes[key] = item


def same_elements(current: Any, saved: list[Any]) -> bool:
    """Identity, element by element; a set by membership, since clearing and refilling an
    unchanged set can reorder its iteration (and would then perturb the user's run)."""
    if isinstance(current, (set, frozenset)):
        return len(current) == len(saved) and {id(item) for item in current} == {id(item) for item in saved}
    items = list(current.values()) if isinstance(current, dict) else list(current)
    return len(items) == len(saved) and all(a is b for a, b in zip(items, saved))


def holds_data(tensor: torch.Tensor) -> bool:
    """Whether the tensor's storage holds its values: FSDP2 frees an unsharded parameter's
    storage after forward (`resize_(0)`), and reading such a tensor crashes the process."""
    if tensor.numel() == 0:
        return True
    try:
        return tensor.untyped_storage().nbytes() > 0
    except (RuntimeError, NotImplementedError):  # a wrapper subclass (DTensor): read through its dispatch
        return True


def saved_copy(tensor: torch.Tensor) -> torch.Tensor | None:
    """A copy of the values, or None where there are none to keep (holds_data)."""
    return tensor.detach().clone() if holds_data(tensor) else None


def changed(tensor: torch.Tensor, saved: torch.Tensor | None, version: int) -> bool:
    """Kernels such as batch_norm update running statistics without bumping the version
    counter, so values are compared too. A tensor that held no values when saved is left be."""
    if saved is None or not holds_data(tensor):
        return False
    if tensor._version != version or tensor.shape != saved.shape or tensor.dtype != saved.dtype:
        return True
    return not torch.equal(tensor.detach(), saved)


def cell_contents(cell: Any) -> Any:
    """What a closure cell holds, or MISSING for an empty one."""
    try:
        return cell.cell_contents
    except ValueError:
        return MISSING


class Snapshot:
    """The state a region can reach, as it was when the snapshot was taken."""

    def __init__(self, reach: Reachable):
        self.reach = reach
        self.rng = RngState.capture()
        self.tensors = [(t, saved_copy(t), t._version) for _, t in reach.tensors.values()]
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
        self.cells = [(cell, cell_contents(cell)) for _, cell in reach.cells.values()]
        self.generators = [(generator, get_state(generator)) for _, generator in reach.generators.values()]
        self._adopted: list[int] = []

    def adopt(self, name: str, tensor: torch.Tensor) -> None:
        """Take in a leaf the walk did not find (a replay's backward would write its `.grad`);
        its `.grad` is cleared for the replays like the others'."""
        self.reach.tensors[id(tensor)] = (name, tensor)
        self._adopted.append(id(tensor))
        self.tensors.append((tensor, saved_copy(tensor), tensor._version))
        self.grads.append((tensor, tensor.grad))
        tensor.grad = None

    def release_replay_leaves(self) -> set[str]:
        """Drop the adopted leaves that only the snapshot still holds once the replay's graph is
        gone: the replay made them (T5's `position_bias = torch.zeros(...)` with
        `requires_grad = True`), the next replay makes its own, and theirs is nobody's `.grad`.
        Returns their names."""
        count = len(self._adopted)
        if not count:
            return set()
        tail = list(self.reach.tensors.items())[-count:]
        saved = [(key, name, self.tensors[-count + index][1:], self.grads[-count + index][1], weakref.ref(tensor))
                 for index, (key, (name, tensor)) in enumerate(tail)]
        del tail
        for key, *_ in saved:
            del self.reach.tensors[key]
        del self.tensors[-count:], self.grads[-count:]
        self._adopted.clear()
        dropped = set()
        for key, name, (copy, version), grad, ref in saved:
            tensor = ref()
            if tensor is None:
                dropped.add(name)
                continue
            self.reach.tensors[key] = (name, tensor)
            self.tensors.append((tensor, copy, version))
            self.grads.append((tensor, grad))
            self._adopted.append(key)
        return dropped

    def restore(self) -> None:
        self.rng.restore()
        for generator, state in self.generators:
            set_state(generator, state)
        with torch.no_grad():
            for tensor, saved, version in self.tensors:
                if saved is not None and changed(tensor, saved, version):
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
            _restore_attributes(value, saved_attributes)
        for namespace, name, present, value in self.globals:
            if present:
                if namespace.get(name, MISSING) is not value:
                    namespace[name] = value
            else:
                namespace.pop(name, None)
        for cell, contents in self.cells:
            if cell_contents(cell) is not contents:
                if contents is MISSING:
                    del cell.cell_contents
                else:
                    cell.cell_contents = contents

    def clear_grads(self) -> None:
        """Replays accumulate gradients from zero; the user's `.grad` is restored afterwards."""
        for tensor, _ in self.grads:
            tensor.grad = None

