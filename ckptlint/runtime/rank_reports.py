"""Reports of a `torchrun` job: one file per rank, merged on rank 0.

`ckptlint confirm --report out.json` under torchrun writes `out.rank0.json`, `out.rank1.json`, ...
as each rank's script ends, then rank 0 waits for the others' files (a file, not a collective:
the user's script may have destroyed its process group by then) and writes `out.json`, one
record per call site with each rank's verdict, the ranks that diverged and every reason with the
ranks that saw it. Each file carries the job's identity (torchrun's run id and master port), so a
stale file of an earlier job is never merged.

The other ranks end only once the merged report is written (or after `MERGE_WAIT`): torchrun stops
every rank when one ends abnormally, and a rank that aborts at its interpreter's exit (torch's
gloo exit race, pytorch/pytorch#179291) would otherwise take rank 0's merge down with it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ckptlint.runtime.aspects import aspects, summary
from ckptlint.runtime.report import FAILING, SEVERITY, Record

MERGE_WAIT = 120.0  # seconds rank 0 waits for the other ranks' files


@dataclass(frozen=True)
class Launch:
    """This process's place in a torchrun job, read from the variables torchrun sets."""

    rank: int
    world_size: int
    job: str  # the job's identity: a stale file of another job does not carry it

    @classmethod
    def from_environment(cls) -> Launch | None:
        """None outside a job of two or more ranks."""
        try:
            rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        except (KeyError, ValueError):
            return None
        if world_size < 2:
            return None
        job = f"{os.environ.get('TORCHELASTIC_RUN_ID', '')}:{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}"
        return cls(rank, world_size, job)

    def rank_path(self, report_file: str, rank: int | None = None) -> Path:
        """`out.json` -> `out.rank1.json`."""
        path = Path(report_file)
        return path.with_name(f"{path.stem}.rank{self.rank if rank is None else rank}{path.suffix or '.json'}")


def remove_stale(launch: Launch, report_file: str) -> None:
    """Before the script runs: this rank's file (and on rank 0 the merged one) of an earlier job."""
    stale = [launch.rank_path(report_file)] + ([Path(report_file)] if launch.rank == 0 else [])
    for path in stale:
        path.unlink(missing_ok=True)


def write_rank_report(launch: Launch, report_file: str, data: dict[str, Any], records: list[Record]) -> Path:
    """This rank's report, with what the merge needs (the code each record's replay ran)."""
    payload = {
        **data,
        "rank": launch.rank,
        "world_size": launch.world_size,
        "job": launch.job,
        "executed": [sorted(map(list, record.executed)) for record in records],
        "module_lines": [{name: [list(span) for span in spans] for name, spans in record.module_lines.items()} for record in records],
    }
    path = launch.rank_path(report_file)
    write_whole(path, payload)
    return path


def write_whole(path: Path, data: dict[str, Any]) -> None:
    """Whole or absent: a rank polling for the file never reads half of it."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    partial.replace(path)


def wait_for_merge(launch: Launch, report_file: str, wait: float = MERGE_WAIT) -> bool:
    """On the other ranks: whether rank 0 wrote this job's merged report within `wait` seconds."""
    return _poll(lambda: _of_job(Path(report_file), launch.job) is not None, wait)


def _of_job(path: Path, job: str) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("job") == job else None


def _poll(done: Callable[[], bool], wait: float) -> bool:
    deadline = time.monotonic() + wait
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def collect(launch: Launch, report_file: str, wait: float = MERGE_WAIT) -> tuple[dict[int, dict[str, Any]], list[int]]:
    """On rank 0: every rank's report of this job, and the ranks whose report never came."""
    found: dict[int, dict[str, Any]] = {}

    def all_found() -> bool:
        for rank in set(range(launch.world_size)) - set(found):
            data = _of_job(launch.rank_path(report_file, rank), launch.job)
            if data is not None:
                found[rank] = data
        return len(found) == launch.world_size

    _poll(all_found, wait)
    return found, [rank for rank in range(launch.world_size) if rank not in found]


def records_of(data: dict[str, Any]) -> list[Record]:
    """A rank's records, as the join reads them."""
    fields = set(Record.__dataclass_fields__)
    executed = data.get("executed") or [[] for _ in data["records"]]
    module_lines = data.get("module_lines") or [{} for _ in data["records"]]
    records = []
    for item, ran, lines in zip(data["records"], executed, module_lines):
        record = Record(**{key: value for key, value in item.items() if key in fields})
        record.executed = {(path, first, last) for path, first, last in ran}
        record.module_lines = {name: [(path, first, last) for path, first, last in spans] for name, spans in lines.items()}
        records.append(record)
    return records


def merge(reports: dict[int, dict[str, Any]]) -> list[Record]:
    """One record per call site (site, region, api, test), over every rank's records of it."""
    groups: dict[tuple[Any, ...], list[tuple[int, Record]]] = {}
    for rank in sorted(reports):
        for record in records_of(reports[rank]):
            key = (record.site["path"], record.site["line"], record.site["column"], record.region.get("name"), record.api, record.test)
            groups.setdefault(key, []).append((rank, record))
    return [_merged(group) for group in groups.values()]


def _merged(group: list[tuple[int, Record]]) -> Record:
    verdicts: dict[str, str] = {}
    for rank, record in group:
        previous = verdicts.get(str(rank))
        if previous is None or SEVERITY[record.verdict] > SEVERITY[previous]:
            verdicts[str(rank)] = record.verdict
    _, base = max(group, key=lambda item: SEVERITY[item[1].verdict])
    merged = Record(**{name: getattr(base, name) for name in Record.__dataclass_fields__ if name not in ("reasons", "executed", "rank", "ranks")})
    merged.executed = set().union(*(record.executed for _, record in group))
    merged.module_lines = {name: spans for _, record in group for name, spans in record.module_lines.items()}
    reasons: dict[tuple[str, str], dict[str, Any]] = {}
    for rank, record in group:
        for reason in record.reasons:
            entry = reasons.setdefault((reason["category"], reason["name"]), {**reason, "ranks": []})
            if rank not in entry["ranks"]:
                entry["ranks"].append(rank)
    merged.reasons = list(reasons.values())
    merged.ranks = verdicts
    merged.aspects = aspects(merged.reasons)
    merged.summary = summary(merged.verdict, merged.reasons)
    diverged = [rank for rank, verdict in verdicts.items() if verdict in FAILING]
    if diverged and len(diverged) < len(verdicts):
        merged.summary += f" (on rank {', '.join(diverged)} of {len(verdicts)})"
    return merged


def merged_report(launch: Launch, reports: dict[int, dict[str, Any]], missing: list[int]) -> dict[str, Any]:
    """The merged JSON: per-site records with their ranks, and which ranks never reported."""
    notes = sorted({note for data in reports.values() for note in data.get("notes", [])})
    if missing:
        notes.append(f"no report from rank(s) {', '.join(map(str, missing))}: their process ended before writing one")
    return {"schema_version": 1, "world_size": launch.world_size, "job": launch.job, "ranks_reported": sorted(reports), "notes": notes}
