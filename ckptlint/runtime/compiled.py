"""Replay C: the checkpointed call compiled with `torch.compile(backend="aot_eager")`.

The same hazard behaves differently under compile: dynamo refuses a region with a Python
side effect under `fullgraph=True` ("HOP: Unsafe side effect"), graph-breaks and runs it
eagerly otherwise, and ignores `preserve_rng_state`. So the companion can replay each probed
call compiled as well, from the same snapshot as replays A and B, and report where the
compiled call's results differ from the eager checkpointed one's.

Each replay compiles a function of its own (a fresh code object), so dynamo's caches never
mix with the user's: the compiled code is dropped with it, and code objects dynamo first met
during the replay (any frame dynamo compiled for it) are reset afterwards.
`torch._dynamo.utils.counters` are put back. What stays is documented in docs/runtime.md.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import traceback
import types
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch._dynamo
from torch._dynamo import convert_frame
from torch._dynamo.utils import counters
from torch.utils import checkpoint as torch_checkpoint

from ckptlint.runtime.aspects import aspects
from ckptlint.runtime.compare import Reason
from ckptlint.runtime.differences import differences
from ckptlint.runtime.intercept import InterceptedCall
from ckptlint.runtime.outcome import Outcome
from ckptlint.runtime.reach import Reachable
from ckptlint.runtime.replay import run_replay
from ckptlint.runtime.snapshot import Snapshot

COMPILED_CATEGORY = "compiled"
BACKEND = "aot_eager"
# the keywords public `checkpoint` takes and their defaults (`preserve_rng_state` it reads from
# **kwargs): a compiled replay passes on those the user changed (dynamo 2.13 refuses
# `context_fn=noop_context_fn` given explicitly)
_CHECKPOINT_DEFAULTS = {
    "preserve_rng_state": True,
    **{
        name: parameter.default
        for name, parameter in inspect.signature(torch_checkpoint.checkpoint).parameters.items()
        if parameter.kind is parameter.KEYWORD_ONLY
    },
}


@dataclass
class CompiledReplay:
    """What compiling the checkpointed call did: the record's `compiled` field."""

    fullgraph: str = "ok"  # "ok" or "rejected: <dynamo's first line>"
    graph_breaks: int = 0  # counted in the fullgraph=False compile, after a rejection
    diverges_from_eager: list[str] = field(default_factory=list)  # aspects C differs in from B (eager, checkpointed)
    diverges_from_plain: list[str] = field(default_factory=list)  # aspects C differs in from A (eager, no checkpointing)
    error: str | None = None  # the fullgraph=False compile or its replay raised

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "backend": BACKEND,
            "fullgraph": self.fullgraph,
            "graph_breaks": self.graph_breaks,
            "diverges_from_eager": self.diverges_from_eager,
            "diverges_from_plain": self.diverges_from_plain,
        }
        if self.error is not None:
            data["error"] = self.error
        return data


class CompiledCall:
    """One compile of `call`'s checkpointed region; remembers dynamo's refusal, if any."""

    def __init__(self, fn: Callable[..., Any], flags: dict[str, Any], fullgraph: bool):
        self.refusal: BaseException | None = None
        self._compiled = torch.compile(_fresh_checkpointed(fn, flags), backend=BACKEND, fullgraph=fullgraph)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._compiled(*args, **kwargs)
        except torch._dynamo.exc.TorchDynamoException as exc:
            self.refusal = exc
            raise


def checkpoint_keywords(flags: dict[str, Any]) -> dict[str, Any]:
    """The user's flags that public `checkpoint` takes (not the companion's own), where they
    are not its defaults; `use_reentrant` always."""
    return {
        name: value
        for name, value in flags.items()
        if name in _CHECKPOINT_DEFAULTS and (name == "use_reentrant" or not _is_default(value, _CHECKPOINT_DEFAULTS[name]))
    }


def _is_default(value: Any, default: Any) -> bool:
    return value is default or (isinstance(value, (bool, int, float, str)) and type(value) is type(default) and value == default)


def _fresh_checkpointed(fn: Callable[..., Any], flags: dict[str, Any]) -> Callable[..., Any]:
    """`checkpoint(fn, *args, **flags)` as a function with a code object of its own: dynamo keys
    its caches (and its recompile limit) by code object. It names the module attribute
    `torch.utils.checkpoint.checkpoint`, which dynamo recognises by identity (patched or not),
    so the call is traced as checkpoint's higher-order op, never through its Python."""
    keywords = checkpoint_keywords(flags)

    def checkpointed(*args: Any, **kwargs: Any) -> Any:
        return torch.utils.checkpoint.checkpoint(fn, *args, **keywords, **kwargs)

    return types.FunctionType(checkpointed.__code__.replace(), checkpointed.__globals__, "checkpointed", None, checkpointed.__closure__)


def graph_breaks() -> int:
    return sum(counters["graph_break"].values())


def short(error: BaseException | str) -> str:
    """Dynamo's first line: `HOP: Unsafe side effect`."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


@contextlib.contextmanager
def isolated_dynamo() -> Iterator[None]:
    """Dynamo's process-wide bookkeeping as the user left it: counters put back, code objects
    first seen inside reset (their cache entries are the replay's), compile warnings silenced
    (dynamo shows some once per process: the user's own compile must still see them)."""
    saved_counters = copy.deepcopy(dict(counters))
    seen_before = {id(code) for code in _seen_codes()}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for code in _seen_codes():
            if id(code) not in seen_before:
                torch._C._dynamo.eval_frame.reset_code(code)
        for name, counter in counters.items():  # in place: dynamo's modules may hold a counter itself
            counter.clear()
            counter.update(saved_counters.get(name, {}))


def _seen_codes() -> list[types.CodeType]:
    tracked = convert_frame.input_codes.seen + convert_frame.output_codes.seen
    return [code for code in (reference() for reference in tracked) if code is not None]


def compiled_reasons(differences: list[Reason]) -> list[Reason]:
    """C against B, as reasons of their own aspect: `compiled`, naming what differed."""
    return [
        Reason(COMPILED_CATEGORY, f"{reason.category} {reason.name}", reason.max_abs, reason.max_rel, _detail(reason.detail))
        for reason in differences
    ]


def _detail(detail: str) -> str:
    """The comparison's words for B and C: `1 elements eager, 2 compiled`."""
    if detail.endswith(" with"):
        detail = detail[: -len(" with")] + " compiled"
    detail = detail.replace("without checkpointing", "eager")
    return "compiled vs eager checkpointed replay" + (f": {detail}" if detail else "")


def replay_compiled(call: InterceptedCall, reach: Reachable, snapshot: Snapshot, plain: Outcome, checkpointed: Outcome) -> tuple[CompiledReplay, list[Reason]]:
    """Replay C from the snapshot (the caller restores it afterwards), compared with B and A:
    first with `fullgraph=True`; when dynamo refuses that, again from the snapshot with
    `fullgraph=False`, counting the graph breaks."""
    result = CompiledReplay()
    try:
        outcome = _compiled_outcome(call, reach, snapshot, result)
    except Exception as exc:  # noqa: BLE001 - compiling must never break the user's run
        outcome = Outcome(error="".join(traceback.format_exception_only(type(exc), exc)).strip())
    if outcome.error is not None and checkpointed.error is None:
        result.error = outcome.error
        return result, [Reason(COMPILED_CATEGORY, "compiled replay", detail=f"raised {short(outcome.error)}")]
    from_eager = differences(checkpointed, outcome, snapshot, reach)
    result.diverges_from_eager = aspects(reason.to_dict() for reason in from_eager)
    result.diverges_from_plain = aspects(reason.to_dict() for reason in differences(plain, outcome, snapshot, reach))
    return result, compiled_reasons(from_eager)


def _compiled_outcome(call: InterceptedCall, reach: Reachable, snapshot: Snapshot, result: CompiledReplay) -> Outcome:
    with isolated_dynamo():
        strict = CompiledCall(call.fn, call.flags, fullgraph=True)
        outcome = run_replay(strict, call.args, call.kwargs, reach, snapshot, False, call.replaying)
        if strict.refusal is None:
            return outcome
        result.fullgraph = f"rejected: {short(strict.refusal)}"
        snapshot.restore()
        before = graph_breaks()
        lenient = CompiledCall(call.fn, call.flags, fullgraph=False)
        outcome = run_replay(lenient, call.args, call.kwargs, reach, snapshot, False, call.replaying)
        result.graph_breaks = graph_breaks() - before
        return outcome
