"""`ckptlint confirm SCRIPT [ARGS]...`: run a script as `python SCRIPT ARGS` would, probing
every checkpoint call, then join what was observed with the static findings."""

from __future__ import annotations

import importlib.util
import json
import os
import runpy
import sys
import traceback
from pathlib import Path
from typing import Any, Sequence

from ckptlint.runtime import Session
from ckptlint.runtime import cost_text, rank_reports
from ckptlint.runtime.join import join, render, static_hints
from ckptlint.runtime.report import FAILING, Record, Report

DIVERGED = 1  # the exit code when the script succeeded and a call diverged (as a linter's findings)


def static_findings(findings_file: str | None, lint_paths: Sequence[str]) -> tuple[list[dict[str, Any]], str] | None:
    """Findings to join, and the directory their relative paths start from."""
    static = static_results(findings_file, lint_paths)
    return None if static is None else (static[0], static[2])


def static_results(
    findings_file: str | None, lint_paths: Sequence[str], want_hints: bool = False
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str] | None:
    """Findings to join, the checkpoint calls the lint found (as `ckptlint calls` describes
    them: with `want_hints` and `--lint`, each with its static cost hints; none from a findings
    file), and the directory their relative paths start from."""
    if findings_file:
        data = json.loads(Path(findings_file).read_text(encoding="utf-8"))
        return data["findings"], [], os.getcwd()
    if lint_paths:
        from ckptlint.frontend import linter_for, project_root_for, resolve_config

        targets = [Path(p) for p in lint_paths]
        config = resolve_config(None, targets)
        root = project_root_for(config, targets)
        # in this process (the script runs next) and with the cache `ckptlint` uses
        result = linter_for(config, root, jobs=1, want_hints=want_hints).lint_paths(targets, project_root=root)
        return [finding.to_dict() for finding in result.findings], result.calls, os.getcwd()
    return None


class TargetNotFound(Exception):
    """`-m MODULE` names nothing `python -m` could run: a usage error (exit 2), not the script's failure."""


def find_module(name: str) -> None:
    """Raise TargetNotFound unless `python -m name` would find a module to run. Parent packages
    are imported, as runpy imports them (so under the session); an error inside one is the
    program's own failure and propagates."""
    if not all(part.isidentifier() for part in name.split(".")):
        raise TargetNotFound(f"confirm -m: {name!r} is not a module name")
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or name
        if name != missing and not name.startswith(missing + "."):
            raise  # a module the package imports is missing: its own failure
        spec = None
        name = missing
    if spec is None:
        raise TargetNotFound(f"confirm -m: no module named {name!r}")
    if spec.submodule_search_locations is not None and importlib.util.find_spec(f"{name}.__main__") is None:
        raise TargetNotFound(f"confirm -m: {name!r} is a package without a __main__ module, so it cannot be run")


def run_script(target: str, arguments: Sequence[str], as_module: bool) -> int:
    """Run like `python SCRIPT ARGS` (or `python -m MODULE ARGS`); return its exit code.
    Raises TargetNotFound for a module that does not exist (the CLI checks a script's path)."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [target, *arguments]
    try:
        if as_module:
            sys.path.insert(0, os.getcwd())
            find_module(target)
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
        return 0
    except SystemExit as exit_:
        code = exit_.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except TargetNotFound:
        raise
    except BaseException:  # noqa: BLE001 - report like the interpreter would, then our report
        traceback.print_exc()
        return 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def confirm(
    target: str,
    arguments: Sequence[str],
    as_module: bool = False,
    sample: str = "first",
    report_file: str | None = None,
    findings_file: str | None = None,
    lint_paths: Sequence[str] = (),
    witness: bool = False,
    exit_zero: bool = False,
    rank_timeout: float = 60.0,
    compiled: bool = False,
    cost: bool = False,
) -> int:
    """Run the script under the companion and report; the exit code is the script's when it
    failed, else 1 when a call diverged or its replay raised (unless `exit_zero`), else 0.
    Under torchrun with `report_file`, each rank writes its own report and rank 0 the merged one."""
    launch = rank_reports.Launch.from_environment()
    if launch is not None and report_file:
        rank_reports.remove_stale(launch, report_file)
    session = Session(sample, witness=witness, rank_timeout=rank_timeout, compiled=compiled, cost=cost)
    session.start()
    try:
        exit_code = run_script(target, arguments, as_module)
    finally:
        session.stop()
    report = session.report
    records = report.records
    if launch is not None and report_file:
        records = _report_job(launch, report, report_file, findings_file, lint_paths)
    else:
        _report(report, records, report.to_dict(), report_file, findings_file, lint_paths)
    if exit_code == 0 and any(r.verdict in FAILING for r in records) and not exit_zero:
        return DIVERGED
    return exit_code


def _report(
    report: Report,
    records: list[Record],
    data: dict[str, Any],
    report_file: str | None,
    findings_file: str | None,
    lint_paths: Sequence[str],
) -> None:
    """Print the records joined with the static findings (and, under --cost, the static cost
    hints of the calls the lint found); write the JSON report."""
    measured = any(record.cost is not None for record in records)
    static = static_results(findings_file, lint_paths, want_hints=measured)
    if static is not None:
        findings, calls, base = static
        data["findings"], data["missed"] = join(records, findings, base)
        if measured:
            assert len(data["records"]) == len(records)  # the report's records, in the same order
            for record, written in zip(records, data["records"]):
                hints = static_hints(record, calls, base)
                if record.cost is not None and hints:
                    record.cost = written["cost"] = {**record.cost, "static_hints": hints}
    text = report.render(records)
    costs = cost_text.render(records)  # only records measured with --cost carry a cost
    if costs:
        text += "\n" + costs
    if static is not None:
        text += "\n" + render(data["findings"], data["missed"])
    for note in data.get("notes", report.notes):
        text += f"\nnote: {note}"
    print(text, file=sys.stderr)
    if report_file:
        rank_reports.write_whole(Path(report_file), data)


def _report_job(
    launch: rank_reports.Launch, report: Report, report_file: str, findings_file: str | None, lint_paths: Sequence[str]
) -> list[Record]:
    """Each rank writes its own report; rank 0 merges them, joins the static findings once and
    prints; the others end once it is written (rank_reports.py says why). Returns the records
    whose verdicts decide this rank's exit code: the merged ones on rank 0, none elsewhere
    (torchrun stops the job when one rank fails, and rank 0 may still be merging)."""
    written = rank_reports.write_rank_report(launch, report_file, report.to_dict(), report.records)
    if launch.rank != 0:
        print(f"ckptlint confirm: rank {launch.rank} wrote {written}; rank 0 writes the merged report to {report_file}", file=sys.stderr)
        if not rank_reports.wait_for_merge(launch, report_file):
            print(f"ckptlint confirm: rank {launch.rank} ends without rank 0's merged report ({rank_reports.MERGE_WAIT:.0f} s)", file=sys.stderr)
        return []
    reports, missing = rank_reports.collect(launch, report_file)
    records = rank_reports.merge(reports)
    data = {**rank_reports.merged_report(launch, reports, missing), "records": [r.to_dict() for r in records]}
    _report(report, records, data, report_file, findings_file, lint_paths)
    return records
