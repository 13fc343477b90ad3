"""The runtime companion: replay each checkpoint call with and without checkpointing and compare.

    with ckptlint.runtime.audit(sample="first") as report:
        train_step(batch)
    report.assert_equivalent()

With `witness=True`, the sampled calls are also watched through the user's own backward:
the recompute torch runs is compared op by op with the forward it replaces (witness.py).

Needs torch (the `runtime` extra; README.md, Installing); the linter never imports this package.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import functools
from typing import Iterator

from ckptlint.project import display_path
from ckptlint.runtime import communication, cost, ddp, differentiation
from ckptlint.runtime.aspects import aspects, summary
from ckptlint.runtime.intercept import Interceptor, InterceptedCall, UnsupportedTorch, probe_guard
from ckptlint.runtime.probe import identity, probe
from ckptlint.runtime.ranks import RankAgreement
from ckptlint.runtime.report import Record, Report
from ckptlint.runtime.witness import Witness

__all__ = ["audit", "Session", "Report", "Record", "UnsupportedTorch", "parse_sample"]


def parse_sample(sample: str | int) -> int | None:
    """`first` -> 1, `all` -> no limit, `N` -> the first N calls of each site."""
    if sample == "first":
        return 1
    if sample == "all":
        return None
    try:
        count = int(sample)
    except (TypeError, ValueError):
        raise ValueError(f"sample must be 'first', 'all' or a positive number, not {sample!r}") from None
    if count < 1:
        raise ValueError(f"sample must be 'first', 'all' or a positive number, not {sample!r}")
    return count


class Session:
    """Interception, per-site sampling and the report for one run."""

    def __init__(
        self,
        sample: str | int = "first",
        wrapper_dirs: tuple[str, ...] = (),
        witness: bool = False,
        rank_timeout: float = 60.0,
        compiled: bool = False,
        cost: bool = False,
    ):
        self.limit = parse_sample(sample)
        self.witness = witness
        self.compiled = compiled  # also replay each probed call under torch.compile (compiled.py)
        self.cost = cost  # also measure what checkpointing each probed call frees and recomputes (cost.py)
        self.rank_timeout = datetime.timedelta(seconds=rank_timeout)
        self.ranks = RankAgreement(self.rank_timeout)
        self.report = Report()
        self.current_test: str | None = None
        self._counts: collections.Counter[tuple[str, int, int]] = collections.Counter()
        self._interceptor = Interceptor(self._on_call, wrapper_dirs)

    def start(self) -> None:
        self._interceptor.install()
        communication.TIMEOUT = self.rank_timeout

    def stop(self) -> None:
        self._interceptor.uninstall()

    def _on_call(self, call: InterceptedCall) -> Witness | None:
        key = (call.site.path, call.site.line, call.site.column)
        if self.limit is not None and self._counts[key] >= self.limit:
            return None
        self._counts[key] += 1
        with probe_guard():
            refusal = self.ranks.agree(f"{display_path(call.site.path)}:{call.site.line}:{call.site.column}#{self._counts[key]}")
            record = probe(call, compiled=self.compiled) if refusal is None else _refused(call, refusal.to_dict())
            if self.cost and refusal is None:
                record.cost = cost.cost_of(call, record, self.ranks.world())
        world = self.ranks.world()
        record.rank = world[0] if world is not None else None
        record.test = self.current_test
        self.report.add(record)
        if refusal is None and any(reason["category"] == communication.HANG_CATEGORY for reason in record.reasons):
            self.ranks.out_of_step = f"a replay's wait expired at {record.site['path']}:{record.site['line']}"
        if call.kind == "reentrant":
            call.backward_failed = functools.partial(_backward_failed, record, call.fn)
        transformed = differentiation.under_function_transform()
        if transformed:  # torch.func refuses checkpointed regions in the forward (CKP304)
            call.forward_failed = functools.partial(differentiation.failed, record, in_forward=True)
        if not self.witness or record.verdict == "error" or transformed:
            return None
        return record.watch(Witness())


def _refused(call: InterceptedCall, reason: dict[str, object]) -> Record:
    """The record of a call this rank must not replay: the ranks are not at the same call."""
    record = Record(**identity(call), verdict="error", reasons=[reason])
    record.aspects = aspects(record.reasons)
    record.summary = summary(record.verdict, record.reasons)
    return record


def _backward_failed(record: Record, fn: object, error: BaseException) -> None:
    """The user's backward raised through a reentrant region: DDP's "ready only once" (CKP303)
    or `.grad()`/`inputs=` refused by reentrant checkpoint (CKP304)."""
    ddp.backward_failed(record, fn, error)
    differentiation.failed(record, error, in_forward=False)


@contextlib.contextmanager
def audit(
    sample: str | int = "first",
    wrapper_dirs: tuple[str, ...] = (),
    witness: bool = False,
    rank_timeout: float = 60.0,
    compiled: bool = False,
    cost: bool = False,
) -> Iterator[Report]:
    """Probe the checkpoint calls made inside the block; yields the Report. With `witness`,
    also compare each sampled call's real recompute in backward with its forward. Under a
    process group, `rank_timeout` bounds how long a rank waits for the others (ranks.py).
    With `compiled`, also replay each call compiled (`backend="aot_eager"`) and compare.
    With `cost`, each record also says what checkpointing the call frees and recomputes (cost.py)."""
    session = Session(sample, wrapper_dirs, witness, rank_timeout, compiled=compiled, cost=cost)
    session.start()
    try:
        yield session.report
    finally:
        session.stop()
