"""`pytest --ckptlint-confirm[=strict]`: probe the checkpoint calls each test makes.

Registered through the `pytest11` entry point, so it loads in every pytest session: it
imports torch (through ckptlint.runtime) only when the option is given. Verdicts are
attached to each test's report (a "ckptlint" section and user_properties); with
`strict` (`--ckptlint-confirm=strict` or `--ckptlint-strict`), a test that reaches a
diverging call site fails. The options are flags, so `--ckptlint-confirm tests/` lints
`tests/`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generator

import pytest

_FAILING = ("diverges", "error")  # as ckptlint.runtime.report.FAILING, without importing torch here

if TYPE_CHECKING:  # the runtime (and torch) is imported only when the option is given
    from pluggy import Result

    from ckptlint.runtime import Session
    from ckptlint.runtime.report import Record


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ckptlint", "checkpointing replay probe")
    # flags, not an option with an optional value: `--ckptlint-confirm tests/` must not read
    # `tests/` as the mode. `=strict` and `=report` are option names of their own (argparse
    # matches a whole option string before splitting at "="), so that spelling keeps working.
    group.addoption(
        "--ckptlint-confirm",
        "--ckptlint-confirm=report",
        action="store_const",
        const="report",
        dest="ckptlint_confirm",
        default=None,
        help="replay each checkpoint call with and without checkpointing and report divergences",
    )
    group.addoption(
        "--ckptlint-confirm=strict",
        "--ckptlint-strict",
        action="store_const",
        const="strict",
        dest="ckptlint_confirm",
        help="the same, and fail tests that reach a diverging call",
    )
    group.addoption("--ckptlint-sample", default="first", help="which calls of each site to probe: first, all or N")


def pytest_configure(config: pytest.Config) -> None:
    mode = config.getoption("ckptlint_confirm")
    if not mode:
        return
    # a usage error is pytest's one-line "ERROR: ..." and exit 4, where a raise here prints a traceback
    try:
        from ckptlint.runtime import Session, UnsupportedTorch
    except ImportError as exc:
        raise pytest.UsageError(f"--ckptlint-confirm: the runtime companion needs torch ({exc})") from None
    try:
        session = Session(config.getoption("ckptlint_sample"))
        session.start()
    except (UnsupportedTorch, ValueError) as exc:
        raise pytest.UsageError(f"--ckptlint-confirm: {exc}") from None
    config.pluginmanager.register(_Probe(session, mode), "ckptlint-runtime")


class _Probe:
    def __init__(self, session: Session, mode: str):
        self.session = session
        self.mode = mode

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        self.session.current_test = item.nodeid
        start = len(self.session.report.records)
        try:
            yield
        finally:
            item.stash[_RECORDS] = self.session.report.records[start:]
            self.session.current_test = None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Result[pytest.TestReport], None]:
        outcome = yield
        report = outcome.get_result()
        if call.when != "call":
            return
        records = item.stash.get(_RECORDS, [])
        if not records:
            return
        for record in records:
            report.user_properties.append(("ckptlint", record.to_dict()))
        report.sections.append(("ckptlint", "\n".join(record.describe() for record in records)))
        diverging = [record for record in records if record.verdict in _FAILING]
        if self.mode == "strict" and diverging and report.passed:
            report.outcome = "failed"
            report.longrepr = "ckptlint: checkpointing changes the result:\n" + "\n".join(r.describe() for r in diverging)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        records = self.session.report.records
        terminalreporter.section("ckptlint")
        if not records:
            terminalreporter.write_line("no checkpoint call was observed")
            return
        for record in records:
            if record.verdict in _FAILING:
                terminalreporter.write_line(f"{record.test}: {record.describe()}")
        counts = {v: sum(r.verdict == v for r in records) for v in ("equivalent", "diverges", "error")}
        terminalreporter.write_line(
            f"{len(records)} checkpoint call(s) probed: {counts['equivalent']} equivalent, "
            f"{counts['diverges']} diverging, {counts['error']} error"
        )

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.session.stop()


_RECORDS: pytest.StashKey[list[Record]] = pytest.StashKey()
