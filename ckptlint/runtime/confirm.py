"""`ckptlint confirm SCRIPT [ARGS]...`: run a script as `python SCRIPT ARGS` would, probing
every checkpoint call, then join what was observed with the static findings."""

from __future__ import annotations

import json
import os
import runpy
import sys
import traceback
from pathlib import Path
from typing import Any, Sequence

from ckptlint.runtime import Session
from ckptlint.runtime.join import join, render

DIVERGED = 1  # the exit code when the script succeeded and a call diverged (as a linter's findings)


def static_findings(findings_file: str | None, lint_paths: Sequence[str]) -> tuple[list[dict[str, Any]], str] | None:
    """Findings to join, and the directory their relative paths start from."""
    if findings_file:
        data = json.loads(Path(findings_file).read_text(encoding="utf-8"))
        return data["findings"], os.getcwd()
    if lint_paths:
        from ckptlint.frontend import linter_for, project_root_for, resolve_config

        targets = [Path(p) for p in lint_paths]
        config = resolve_config(None, targets)
        root = project_root_for(config, targets)
        # in this process (the script runs next) and with the cache `ckptlint` uses
        result = linter_for(config, root, jobs=1).lint_paths(targets, project_root=root)
        return [finding.to_dict() for finding in result.findings], os.getcwd()
    return None


def run_script(target: str, arguments: Sequence[str], as_module: bool) -> int:
    """Run like `python SCRIPT ARGS` (or `python -m MODULE ARGS`); return its exit code."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [target, *arguments]
    try:
        if as_module:
            sys.path.insert(0, os.getcwd())
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
) -> int:
    """Run the script under the companion and report; the exit code is the script's when it
    failed, else 1 when a call diverged or its replay raised (unless `exit_zero`), else 0."""
    session = Session(sample, witness=witness)
    session.start()
    try:
        exit_code = run_script(target, arguments, as_module)
    finally:
        session.stop()
    report = session.report
    static = static_findings(findings_file, lint_paths)
    joined = missed = None
    if static is not None:
        joined, missed = join(report.records, *static)
    text = report.render()
    if joined is not None:
        text += "\n" + render(joined, missed or [])
    for note in report.notes:
        text += f"\nnote: {note}"
    print(text, file=sys.stderr)
    if report_file:
        Path(report_file).write_text(report.to_json(findings=joined, missed=missed), encoding="utf-8")
    if exit_code == 0 and report.diverging() and not exit_zero:
        return DIVERGED
    return exit_code
