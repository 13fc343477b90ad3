"""RNG streams a region can draw from: the global ones and generator objects it can reach.

Checkpoint preserves torch's default generators (and only with `preserve_rng_state`);
every other stream a region draws from moves again in the recompute. The companion must
put each one back after each replay, so that the user's step draws exactly what it would
have unobserved, and compare where each stands after the two replays. Besides the global
streams (torch CPU and initialised CUDA devices, Python `random`, NumPy's global
generator), generator objects hang off modules, closure cells and globals: NumPy
`Generator`, `RandomState` and bare bit generators, `random.Random` instances and private
`torch.Generator`s. Their state is captured through each library's own get/set API.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class RngState:
    """The global streams."""

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
        if self.numpy is not None and other.numpy is not None and not same_state(self.numpy, other.numpy):
            changed.append("NumPy global generator")
        return changed


def generator_kind(value: Any) -> str | None:
    """What kind of generator object `value` is, or None if it is none (SystemRandom has no state)."""
    if isinstance(value, random.SystemRandom):
        return None
    if isinstance(value, random.Random):
        return "Python Random"
    if isinstance(value, torch.Generator):
        return "torch Generator"
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        if isinstance(value, numpy.random.Generator):
            return "NumPy Generator"
        if isinstance(value, numpy.random.RandomState):
            return "NumPy RandomState"
        if isinstance(value, numpy.random.BitGenerator):
            return "NumPy BitGenerator"
    return None


def get_state(generator: Any) -> Any:
    if isinstance(generator, random.Random):
        return generator.getstate()
    if isinstance(generator, torch.Generator):
        return generator.get_state()
    if hasattr(generator, "bit_generator"):  # numpy Generator
        return generator.bit_generator.state
    if hasattr(generator, "get_state"):  # numpy RandomState: its own Gaussian cache included
        return generator.get_state(legacy=False)
    return generator.state  # numpy BitGenerator


def set_state(generator: Any, state: Any) -> None:
    if isinstance(generator, random.Random):
        generator.setstate(state)
    elif isinstance(generator, torch.Generator):
        generator.set_state(state)
    elif hasattr(generator, "bit_generator"):
        generator.bit_generator.state = state
    elif hasattr(generator, "set_state"):
        generator.set_state(state)
    else:
        generator.state = state


def same_state(first: Any, second: Any) -> bool:
    """Deep equality over the states these APIs return: tuples, dicts, ints, tensors, arrays."""
    if isinstance(first, torch.Tensor) or isinstance(second, torch.Tensor):
        return isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor) and torch.equal(first, second)
    if isinstance(first, dict) and isinstance(second, dict):
        return first.keys() == second.keys() and all(same_state(first[k], second[k]) for k in first)
    if isinstance(first, (tuple, list)) and isinstance(second, (tuple, list)):
        return len(first) == len(second) and all(same_state(a, b) for a, b in zip(first, second))
    if hasattr(first, "shape") and hasattr(second, "shape"):  # numpy arrays
        return bool(first.shape == second.shape and (first == second).all())
    return bool(first == second)
