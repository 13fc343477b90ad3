"""Probe one intercepted call: replay it both ways from one snapshot, compare, restore."""

from __future__ import annotations

import dataclasses
import traceback
from typing import Any

from ckptlint.runtime.aspects import aspects, summary
from ckptlint.runtime.communication import HANG_CATEGORY, Communication, CommunicationTimeout, counting
from ckptlint.runtime.compare import Reason
from ckptlint.runtime.compiled import replay_compiled
from ckptlint.runtime.ddp import ddp_of, replay_would_change_run
from ckptlint.runtime.differences import differences
from ckptlint.runtime.differentiation import under_function_transform
from ckptlint.runtime.gradflow import missing_grad_reason, missing_parameter_grads, reached_tensors
from ckptlint.runtime.intercept import InterceptedCall
from ckptlint.runtime.reach import Reachable, is_library_file, reachable
from ckptlint.runtime.replay import run_replay
from ckptlint.runtime.sac import SacListing, is_selective
from ckptlint.runtime.report import NESTED, NOT_REPLAYED, Record
from ckptlint.runtime.snapshot import Snapshot


def probe(call: InterceptedCall, compiled: bool = False) -> Record:
    """Never raises: an internal error becomes an `error` record, and state is restored.
    With `compiled`, replay C (the checkpointed call under torch.compile) runs too."""
    if under_function_transform():
        # a replay would run under torch.func's transform (which refuses `requires_grad_` and
        # checkpointed regions alike) and change the error the user sees: the call runs as is
        return Record(**identity(call), verdict=NOT_REPLAYED, summary=TRANSFORMED)
    record = _probe(call, compiled and not call.flags.get("nested"))
    if call.flags.get("nested"):
        return _nested(record)
    record.aspects = aspects(record.reasons)
    record.summary = summary(record.verdict, record.reasons)
    return record


TRANSFORMED = "not replayed: the call runs inside a torch.func transform"


def identity(call: InterceptedCall) -> dict[str, Any]:
    """The fields every record of `call` starts with."""
    return {
        "site": call.site.to_dict(),
        "region": call.region,
        "api": call.kind,
        "flags": {key: _plain(value) for key, value in call.flags.items()},
        "device": call.device,
        "constructed_at": call.constructed_at.to_dict() if call.constructed_at else None,
        "callers": [site.to_dict() for site in call.callers],
    }


def _probe(call: InterceptedCall, compiled: bool) -> Record:
    record = Record(**identity(call), verdict="equivalent")
    try:
        reach = reachable(call.fn, call.args, call.kwargs)
        reached = reached_tensors(call.args, call.kwargs, reach)  # before the replays adopt leaves
        record.inputs = [tensor.to_dict() for tensor in reached]
        record.ddp = ddp_of(reach)
        if replay_would_change_run(record.ddp):
            record.verdict = NOT_REPLAYED
            return record
        snapshot = Snapshot(reach)
    except Exception:  # noqa: BLE001 - a probe must never break the user's run
        record.verdict = "error"
        record.reasons = [Reason("error", "ckptlint", detail="could not snapshot the region's state: " + traceback.format_exc(limit=1)).to_dict()]
        return record
    compiled_differences: list[Reason] = []
    try:
        with counting() as plain_communication:
            plain = run_replay(call.run_plain, call.args, call.kwargs, reach, snapshot, True, call.replaying)
        for name in snapshot.release_replay_leaves():
            plain.parameter_grads.pop(name, None)
            plain.tensors.pop(name, None)
        snapshot.restore()
        listing = SacListing() if is_selective(call.flags.get("context_fn")) else None
        run_checkpointed = _listing(call, listing).run_checkpointed
        with counting() as checkpointed_communication:
            checkpointed = run_replay(run_checkpointed, call.args, call.kwargs, reach, snapshot, False, call.replaying)
        if listing is not None:
            listing.release()
            record.sac = listing.to_dict() if listing.seen else None
        if compiled and not plain.error:
            snapshot.restore()
            compiled_replay, compiled_differences = replay_compiled(call, reach, snapshot, plain, checkpointed)
            record.compiled = compiled_replay.to_dict()
    finally:
        snapshot.restore()
    record.executed = plain.executed
    record.module_lines = module_lines(reach, plain.module_calls)
    timed_out = _timed_out(plain.error, checkpointed.error)
    if timed_out:
        record.verdict = "error"
        record.reasons = [timed_out.to_dict()]
        return record
    if plain.error:
        record.verdict = "error"
        record.reasons = [Reason("error", "replay without checkpointing", detail=plain.error).to_dict()]
        return record
    reasons = differences(plain, checkpointed, snapshot, reach)
    if plain_communication is not None and checkpointed_communication is not None:
        communication = Communication.of(plain_communication, checkpointed_communication)
        record.communication = communication.to_dict()
        repeated = communication.reason()
        if repeated is not None:
            reasons.append(repeated)
    reasons.extend(compiled_differences)
    record.reasons = [reason.to_dict() for reason in reasons]
    missing = missing_parameter_grads(plain, checkpointed)
    if missing:
        record.reasons.append(missing_grad_reason(missing, call.kind == "reentrant", reached, plain.untracked_container))
    if checkpointed.error:
        record.verdict = "error"
    elif record.reasons:
        record.verdict = "diverges"
    return record


def _listing(call: InterceptedCall, listing: SacListing | None) -> InterceptedCall:
    """The call as replay B runs it: with its selective-checkpoint contexts observed."""
    if listing is None:
        return call
    return dataclasses.replace(call, flags={**call.flags, "context_fn": listing.context_fn(call.flags["context_fn"])})


def _timed_out(*errors: str | None) -> Reason | None:
    """A replay whose communication wait expired (communication.bounded_waits)."""
    for error in errors:
        if error and CommunicationTimeout.__name__ in error:
            detail = error.split(f"{CommunicationTimeout.__name__}: ", 1)[-1]
            return Reason(HANG_CATEGORY, "replay's communication timed out", detail=detail)
    return None


NESTED_SUMMARY = "replayed inside the forward or recompute of an enclosing checkpoint call, whose record judges it"


def module_lines(reach: Reachable, calls: dict[int, set[tuple[str, int]]]) -> dict[str, list[tuple[str, int, int]]]:
    """Each region module replay A called, by its name in the reasons (`region.norm`): the project
    lines that called it, and its class's `forward` when the project defines it (an in-place write
    to its own buffer, `self.usage.mul_()`, lies there)."""
    found: dict[str, list[tuple[str, int, int]]] = {}
    for key, lines in calls.items():
        named = reach.objects.get(key)
        if named is None or key not in reach.modules:
            continue
        name, module = named
        spans = [(path, line, line) for path, line in sorted(lines)]
        code = getattr(getattr(type(module), "forward", None), "__code__", None)
        if code is not None and not is_library_file(code.co_filename):
            numbers = [line for _, _, line in code.co_lines() if line is not None]
            spans.append((code.co_filename, min(numbers, default=code.co_firstlineno), max(numbers, default=code.co_firstlineno)))
        found[name] = spans
    return found


def _nested(record: Record) -> Record:
    """A call probed inside another checkpoint's forward or recompute: its replays ran (the
    recompute must save what the forward saved), but what they show there (under the outer's
    saved-tensor hooks, or in the middle of a backward pass) is not the user's result."""
    record.verdict = NESTED
    record.reasons = []
    record.executed = set()
    record.module_lines = {}
    record.summary = NESTED_SUMMARY
    return record


def _plain(value: Any) -> bool | int | float | str | None:
    if isinstance(value, (bool, int, float, str, type(None))):
        return value
    return getattr(value, "__qualname__", None) or type(value).__name__
