"""Every rank probes the same calls in the same order, or none does.

A replay of a region that communicates issues its collectives again; they only match when every
rank replays the same call at the same time. Before probing, a rank says which call it is about
to probe (its site and how many times it has probed it) under its own key in the process
group's store, and waits, with a timeout, for every other rank's entry of the same round. A
store is not a collective: waiting on it never consumes a message meant for the user's run, and
a rank that does not come (it is blocked in a receive outside any checkpoint call, or runs
other calls) costs a timeout and an `error` record, never a hang. After one disagreement the
ranks are out of step for good, so this rank stops probing; its calls run as they would.
"""

from __future__ import annotations

import datetime
from typing import Any

import torch

from ckptlint.runtime.communication import HANG_CATEGORY
from ckptlint.runtime.compare import Reason

_PREFIX = "ckptlint/probe/"
_SESSIONS = [0]  # sessions started in this process: each has its own rounds (every rank starts them in order)


class RankAgreement:
    """The store rounds of one run on one rank; inactive without a process group of 2 or more."""

    def __init__(self, timeout: datetime.timedelta):
        self.timeout = timeout
        self.session = _SESSIONS[0]
        _SESSIONS[0] += 1
        self.round = 0
        self.out_of_step: str | None = None  # why this rank stopped probing

    @staticmethod
    def world() -> tuple[int, int] | None:
        """(rank, world size) when a process group of more than one rank is up."""
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return None
        return dist.get_rank(), dist.get_world_size()

    def agree(self, call: str) -> Reason | None:
        """None when every rank is about to probe `call`; else why this one must not replay it."""
        world = self.world()
        if world is None:
            return None
        if self.out_of_step is not None:
            return _reason(f"not replayed: the ranks are out of step since {self.out_of_step}")
        rank, size = world
        try:
            store = _store(self.session)
        except RuntimeError as error:
            self.out_of_step = f"the process group's store could not be used ({error})"
            return _reason(f"not replayed: {self.out_of_step}")
        number, self.round = self.round, self.round + 1
        store.set(f"{number}/{rank}", call)
        others = [r for r in range(size) if r != rank]
        missing = []
        for other in others:
            try:
                store.wait([f"{number}/{other}"], self.timeout)
            except RuntimeError:  # the store's timeout (DistStoreError is a RuntimeError)
                missing.append(other)
        if missing:
            self.out_of_step = (
                f"rank(s) {', '.join(map(str, missing))} did not reach a checkpoint call within "
                f"{self.timeout.total_seconds():g} s while rank {rank} was about to probe {call}"
            )
            return _reason(
                f"{self.out_of_step}: the ranks do not run the same checkpoint calls (a region that waits for a message "
                "another rank sends outside its own checkpoint calls is a hang at recompute); not replayed"
            )
        named = {other: store.get(f"{number}/{other}").decode() for other in others}
        differing = {other: value for other, value in named.items() if value != call}
        if differing:
            elsewhere = ", ".join(f"rank {other} at {value}" for other, value in sorted(differing.items()))
            self.out_of_step = f"rank {rank} was about to probe {call} and {elsewhere}"
            return _reason(f"{self.out_of_step}: the ranks run different checkpoint calls; not replayed")
        return None


def _store(session: int) -> Any:
    from torch.distributed import distributed_c10d

    return distributed_c10d.PrefixStore(f"{_PREFIX}{session}/", distributed_c10d._get_default_store())


def _reason(detail: str) -> Reason:
    return Reason(HANG_CATEGORY, "ranks out of step", detail=detail)
