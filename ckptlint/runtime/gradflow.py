"""Gradient flow: which tensors reach a region and whether they require grad, and which
parameters checkpointing leaves without a gradient, and why.

Reentrant checkpoint runs the region's forward under `no_grad` and tracks only its top-level
positional tensors. When none of them requires grad the region is not in the graph at all
(CKP301: token ids, a frozen embedding's output, a `.detach()`); a tensor that needs grad and
reaches the region by keyword, closure, `partial` or a global is not tracked either (CKP302).
Either way the parameters inside get no gradient, with only a warning. The replays already
compute both runs' parameter gradients; this module names the parameters whose gradient is
None or zero with checkpointing but not without, and, from what reached the region, the cause.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from ckptlint.runtime.compare import Reason
from ckptlint.runtime.outcome import Outcome
from ckptlint.runtime.reach import KEYWORD, POSITIONAL, Reachable

# the reason's category, and its causes
PARAMETER_GRAD_MISSING = "parameter-grad-missing"
NO_GRAD_INPUT = "no-grad-input"  # no top-level positional tensor input requires grad (CKP301)
NON_POSITIONAL = "non-positional"  # a tensor that requires grad reaches the region another way (CKP302)
UNTRACKED_OUTPUT = "untracked-output"  # the region returns its tensors in a dict or dataclass (CKP306)
UNEXPLAINED = "unexplained"  # neither (or a non-reentrant call): reported, joined to no rule
# what each cause confirms, as join reads it (`Rule.confirmed_by`): CKP301 and CKP302
CONFIRMS_NO_GRAD_INPUT = f"{PARAMETER_GRAD_MISSING}:{NO_GRAD_INPUT}"
CONFIRMS_NON_POSITIONAL = f"{PARAMETER_GRAD_MISSING}:{NON_POSITIONAL}"
CONFIRMS_UNTRACKED_OUTPUT = f"{PARAMETER_GRAD_MISSING}:{UNTRACKED_OUTPUT}"
RULE_OF_CAUSE = {NO_GRAD_INPUT: "CKP301", NON_POSITIONAL: "CKP302", UNTRACKED_OUTPUT: "CKP306"}


@dataclass(frozen=True)
class ReachedTensor:
    """One tensor that reaches the region, other than a module's parameters and buffers."""

    name: str  # as the region reaches it: `args[0]`, `kwargs['mask']`, `h`, `region.args[1]`
    how: str  # reach.HOW: positional, keyword, closure, partial, global, ...
    requires_grad: bool
    is_leaf: bool
    shape: tuple[int, ...]
    dtype: str

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["shape"] = list(self.shape)
        return data


def reached_tensors(args: tuple[Any, ...], kwargs: dict[str, Any], reach: Reachable) -> list[ReachedTensor]:
    """Top-level positional and keyword tensors, then every other tensor the walk found
    (inside argument containers, closures, partials, globals, attributes), in walk order."""
    found = [_reached(f"args[{index}]", POSITIONAL, value) for index, value in enumerate(args) if isinstance(value, torch.Tensor)]
    found += [_reached(f"kwargs[{key!r}]", KEYWORD, value) for key, value in kwargs.items() if isinstance(value, torch.Tensor)]
    for key, (name, tensor) in reach.tensors.items():
        if key not in reach.module_tensors:
            found.append(_reached(name, reach.how.get(key, "unknown"), tensor))
    return found


def _reached(name: str, how: str, tensor: torch.Tensor) -> ReachedTensor:
    return ReachedTensor(name, how, tensor.requires_grad, tensor.is_leaf, tuple(tensor.shape), str(tensor.dtype))


def missing_parameter_grads(plain: Outcome, checkpointed: Outcome) -> list[str]:
    """Parameters the plain run gives a nonzero gradient and the checkpointed run None or zeros."""
    missing = []
    for name, grad in plain.parameter_grads.items():
        if grad is None or not bool(grad.ne(0).any()):
            continue
        other = checkpointed.parameter_grads.get(name)
        if other is None or not bool(other.ne(0).any()):
            missing.append(name)
    return missing


def cause(reentrant: bool, reached: list[ReachedTensor], untracked_container: str | None = None) -> tuple[str, list[ReachedTensor]]:
    """Why gradients went missing, and the tensors that show it. Only reentrant mode drops
    them this way; a grad-requiring tensor arriving other than positionally is the more
    specific cause (it is usually what was meant to carry the gradient); with positional
    inputs that require grad, a result whose tensors sit in a dict or dataclass comes back
    detached (`untracked_container` names its type)."""
    if not reentrant:
        return UNEXPLAINED, []
    elsewhere = [t for t in reached if t.how != POSITIONAL and t.requires_grad]
    if elsewhere:
        return NON_POSITIONAL, elsewhere
    positional = [t for t in reached if t.how == POSITIONAL]
    if not any(t.requires_grad for t in positional):
        return NO_GRAD_INPUT, positional
    if untracked_container is not None:
        return UNTRACKED_OUTPUT, []
    return UNEXPLAINED, []


def missing_grad_reason(missing: list[str], reentrant: bool, reached: list[ReachedTensor], untracked_container: str | None = None) -> dict[str, Any]:
    """The record's reason: the parameters, the cause, the rule it confirms and a sentence."""
    why, tensors = cause(reentrant, reached, untracked_container)
    reason = Reason(PARAMETER_GRAD_MISSING, ", ".join(missing), detail=_sentence(why, tensors, len(missing), untracked_container))
    return {
        **reason.to_dict(),
        "parameters": missing,
        "cause": why,
        "rule": RULE_OF_CAUSE.get(why),
        "tensors": [f"{t.name} ({t.how}, requires_grad={t.requires_grad})" for t in tensors],
    }


def _sentence(why: str, tensors: list[ReachedTensor], count: int, container: str | None = None) -> str:
    lost = f"{count} parameter{'s' if count != 1 else ''} get no gradient with checkpointing"
    if why == UNTRACKED_OUTPUT:
        return (
            f"{lost}: the region returns its tensors inside a {container}, which reentrant checkpoint's "
            f"autograd.Function does not track, so they come back detached (CKP306)"
        )
    if why == NO_GRAD_INPUT:
        inputs = ", ".join(t.name for t in tensors) or "none"
        return (
            f"{lost}: no positional tensor input requires grad (positional tensors: {inputs}), so reentrant "
            f"checkpoint leaves the region out of the graph (CKP301)"
        )
    if why == NON_POSITIONAL:
        names = ", ".join(f"{t.name} by {t.how}" for t in tensors)
        return (
            f"{lost}: tensors that require grad reach the region other than as positional inputs ({names}); "
            f"reentrant checkpoint does not track them (CKP302)"
        )
    return f"{lost}, for a reason the inputs do not show"
