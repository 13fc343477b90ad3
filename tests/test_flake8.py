"""`flake8 --select CKP` reports what ckptlint reports, at the same line and column."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import REPO, json_findings, run_cli

LINE = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+):(?P<column>\d+): (?P<code>CKP\d{3}) ")


def _flake8(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flake8", "--select", "CKP", *args],
        cwd=REPO,
        input=input,
        capture_output=True,
        timeout=300,
    )


def _parse(output: bytes) -> set[tuple[str, int, int, str]]:
    found = set()
    for line in output.decode().splitlines():
        match = LINE.match(line)
        assert match, line
        found.add((match["path"].removeprefix("./"), int(match["line"]), int(match["column"]), match["code"]))
    return found


def test_flake8_agrees_with_ckptlint_on_the_fixtures() -> None:
    # flake8 chooses the files itself: it is told what ckptlint excludes by default (the fake
    # installed libraries in fixtures/site-packages, whose own checkpoint calls are not the project's)
    completed = _flake8("fixtures", "--extend-exclude", "site-packages")
    assert completed.returncode == 1, completed.stderr
    ours = {(f["path"], f["line"], f["column"], f["code"]) for f in json_findings(run_cli("fixtures", "--format", "json"))}
    # flake8 does not run plugins on files it cannot parse itself (it reports E999/E902 for
    # them); the one CKP000 it can show is a file it decodes with its latin-1 fallback.
    unparsable = {"fixtures/bad/syntax_error.py", "fixtures/bad/binary.py"}
    expected = {item for item in ours if not (item[3] == "CKP000" and item[0] in unparsable)}
    if sys.version_info < (3, 14):
        # flake8 parses with the running grammar and stops at E999 on Python 3.14 syntax
        # (PEP 758, PEP 750) that ckptlint reads through libcst (newer_syntax.py)
        expected = {item for item in expected if not item[0].endswith("/newer_python_syntax.py")}
    assert ("fixtures/bad/latin1_without_cookie.py", 3, 12, "CKP000") in expected
    assert _parse(completed.stdout) == expected
    assert len(expected) > 25


def test_flake8_single_file_sees_calls_in_other_files() -> None:
    """utils.py holds a partial with preserve_rng_state=False, called from model.py."""
    completed = _flake8("fixtures/packages/reexport/reexport/utils.py")
    assert _parse(completed.stdout) == {("fixtures/packages/reexport/reexport/utils.py", 7, 27, "CKP102")}


def test_flake8_reads_stdin() -> None:
    source = b"from torch.utils.checkpoint import checkpoint\n\ndef f(b, x):\n    return checkpoint(b, x)\n"
    completed = _flake8("--stdin-display-name", "step.py", "-", input=source)
    assert _parse(completed.stdout) == {("step.py", 4, 12, "CKP101")}


def test_plugin_is_registered() -> None:
    completed = subprocess.run([sys.executable, "-m", "flake8", "--version"], capture_output=True, timeout=60)
    assert b"ckptlint: " in completed.stdout
