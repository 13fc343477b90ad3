"""What kind of difference each reason is, and the sentence a record's verdict carries.

"diverges" alone cannot tell a gradient bug from a stream that moved: a Python `random`
draw under non-reentrant checkpoint is redrawn in the recompute (the stream ends
elsewhere) while the saved scalar keeps every gradient equal. Each reason category
belongs to one aspect, and a record lists the aspects that differ and says in one
sentence which differ and which are equal, so a user can tell them apart at a glance.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

# reason category -> aspect
ASPECT_OF = {
    "error": "error",
    "output": "values",
    "input-grad": "gradients",
    "parameter-grad": "gradients",
    "parameter-grad-missing": "gradients",  # the parameters checkpointing leaves without one, and why
    "rng": "rng-stream",
    "buffer": "state",
    "container": "side-effects",
    "attribute": "side-effects",
    "global": "side-effects",
    "closure": "side-effects",
    "ddp": "error",  # the user's backward under DistributedDataParallel raised (ddp.py)
    "differentiation": "error",  # checkpoint refused autograd.grad, backward(inputs=), torch.func (differentiation.py)
    # the witness: backward's recompute differs from the forward it replaces. Its own aspect, not
    # "gradients": a saved tensor can differ where the gradient does not (relu's mask)
    "recompute": "recompute",
    # a process group's communication: repeated at recompute (communication.py), or a wait that
    # never ended (the ranks out of step, a replay's receive: ranks.py)
    "communication": "communication",
    "hang": "error",
    # replay C (`--compiled`): the checkpointed call compiled differs from it run eagerly (compiled.py)
    "compiled": "compiled",
}
ORDER = ("error", "values", "gradients", "rng-stream", "state", "side-effects")
_WORDS = {
    "values": "outputs",
    "gradients": "gradients",
    "rng-stream": "RNG stream position",
    "state": "state",
    "side-effects": "side effects",
    "recompute": "the recompute's saved tensors",  # only with the witness, so never listed as equal
    "communication": "communication",  # only under a process group, so never listed as equal
    "compiled": "the compiled replay",  # only with --compiled, so never listed as equal
}
_EQUAL_WORDS = {**_WORDS, "rng-stream": "RNG streams"}


def aspect_of(category: str) -> str:
    return ASPECT_OF.get(category, category)


def aspects(reasons: Iterable[Mapping[str, Any]]) -> list[str]:
    """The aspects that differ, in a fixed order."""
    found = {aspect_of(reason["category"]) for reason in reasons}
    return [aspect for aspect in ORDER if aspect in found] + sorted(found - set(ORDER))


def summary(verdict: str, reasons: Sequence[Mapping[str, Any]]) -> str:
    """One sentence: what differs (RNG streams named) and what is equal."""
    differing = aspects(reasons)
    if verdict == "not replayed":
        return "not replayed: DistributedDataParallel would count the replay's backward as this step's"
    if verdict == "error":
        errors = [reason for reason in reasons if aspect_of(reason["category"]) == "error"]
        if errors:
            first = errors[0]
            detail = str(first.get("detail") or "").strip().splitlines()
            verb = "" if first["category"] == "hang" else " raised"  # a wait that ended, not an exception of the user's
            return f"{first['name']}{verb}" + (f": {detail[-1]}" if detail else "")
    words = []
    for aspect in differing:
        if aspect == "error":
            continue
        text = _WORDS.get(aspect, aspect)
        if aspect == "rng-stream":
            streams = [str(reason["name"]) for reason in reasons if reason["category"] == "rng"]
            text += f" ({', '.join(streams)})"
        words.append(text)
    equal = [_EQUAL_WORDS[aspect] for aspect in ORDER[1:] if aspect not in differing]
    parts = []
    if words:
        parts.append(f"{_and(words)} {'differs' if len(words) == 1 else 'differ'}")
    if equal:
        parts.append(f"{_and(equal)} {'is' if len(equal) == 1 else 'are'} equal")
    return "; ".join(parts)


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
