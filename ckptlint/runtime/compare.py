"""Compare two replays: tensors with dtype-aware tolerances, containers by element signature.

Forward outputs of a diverging region are usually identical; the divergence shows in
vector-Jacobian products and in state after the step, so every one of those is compared.
Containers are compared by the signature of their elements (type, shape, dtype,
requires_grad), never by object identity: the two replays create different objects.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from ckptlint.runtime.aspects import aspect_of

# (rtol, atol) by dtype, as torch.testing.assert_close uses them
TOLERANCES = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}


@dataclass(frozen=True)
class Reason:
    """One thing that came out differently with checkpointing than without."""

    category: str  # output, input-grad, parameter-grad, buffer, rng, container, global, attribute, closure, error
    name: str
    max_abs: float | None = None
    max_rel: float | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The fields, and the aspect (values, gradients, rng-stream, state, side-effects, error)."""
        return {**asdict(self), "aspect": aspect_of(self.category)}

    def describe(self) -> str:
        text = f"{self.category} {self.name}"
        if self.max_abs is not None:
            text += f": max abs diff {self.max_abs:.3g}, max rel diff {self.max_rel:.3g}"
        if self.detail:
            text += f" ({self.detail})"
        return text


def compare_tensors(category: str, name: str, plain: torch.Tensor | None, checkpointed: torch.Tensor | None) -> Reason | None:
    if plain is None and checkpointed is None:
        return None
    if plain is None or checkpointed is None:
        missing = "with checkpointing" if checkpointed is None else "without checkpointing"
        return Reason(category, name, detail=f"no value {missing}")
    if plain.shape != checkpointed.shape or plain.dtype != checkpointed.dtype:
        return Reason(category, name, detail=f"{tuple(plain.shape)} {plain.dtype} vs {tuple(checkpointed.shape)} {checkpointed.dtype}")
    if plain.dtype.is_floating_point or plain.dtype.is_complex:
        rtol, atol = TOLERANCES.get(plain.dtype, (1.3e-6, 1e-5))
        a, b = plain.double(), checkpointed.double().to(plain.device)
        difference = (a - b).abs()
        if difference.numel() == 0:
            return None
        nan_mismatch = bool((a.isnan() != b.isnan()).any())
        difference = torch.where(a.isnan() & b.isnan(), torch.zeros_like(difference), difference)
        if nan_mismatch or bool((difference > atol + rtol * b.abs()).any()):
            max_abs = float(difference.max())
            max_rel = float((difference / b.abs().clamp_min(1e-12)).max())
            return Reason(category, name, max_abs, max_rel, "NaN in one replay only" if nan_mismatch else "")
        return None
    if not torch.equal(plain, checkpointed.to(plain.device)):
        difference = (plain.long() - checkpointed.long().to(plain.device)).abs()
        return Reason(category, name, float(difference.max()), None, "integer or boolean values differ")
    return None


def signature(value: Any, depth: int = 0) -> Any:
    """What a value is, without identity: for containers, element by element."""
    if isinstance(value, torch.Tensor):
        return ("Tensor", tuple(value.shape), str(value.dtype), value.requires_grad)
    if isinstance(value, (int, float, str, bool, type(None), complex)):
        return value
    if depth > 2:
        return type(value).__name__
    if isinstance(value, dict):
        return ("dict", tuple((repr(k), signature(v, depth + 1)) for k, v in value.items()))
    if isinstance(value, (list, tuple, set, frozenset)) or type(value).__name__ == "deque":
        elements = sorted(map(repr, value)) if isinstance(value, (set, frozenset)) else [signature(v, depth + 1) for v in value]
        return (type(value).__name__, len(value), tuple(elements))
    return type(value).__name__


def describe_signature_change(plain: Any, checkpointed: Any) -> str:
    if isinstance(plain, tuple) and isinstance(checkpointed, tuple) and len(plain) == 3 and len(checkpointed) == 3:
        if isinstance(plain[1], int) and isinstance(checkpointed[1], int) and plain[1] != checkpointed[1]:
            return f"{plain[1]} elements without checkpointing, {checkpointed[1]} with"
    if isinstance(plain, (int, float)) and isinstance(checkpointed, (int, float)):
        return f"{plain!r} without checkpointing, {checkpointed!r} with"
    return "differs"
