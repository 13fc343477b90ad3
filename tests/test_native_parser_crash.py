"""A crash of libcst's native parser costs one file, never the run (nesting.py, contained_lowering.py).

libcst reads the files `ast` rejects (newer_syntax.py) and the calls that fixes rewrite. Its
parser is native code without a depth limit: 1,500 nested brackets overflowed the stack and
ckptlint died with SIGSEGV (exit 139, no output, no finding for any other file), and so did
flake8 with the plugin and the language server. Each surface is run for real here.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import pytest_lsp
from conftest import json_findings, lint_project, run_cli
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient
from test_lsp import _open, _refined, _start

from ckptlint.nesting import IN_PROCESS_TOKENS, measure

HAZARD = """import random
from torch.utils.checkpoint import checkpoint


def block(x):
    return x * random.random()


def forward(x):
    return checkpoint(block, x, use_reentrant=False)
"""
HAZARD_FINDING = "model.py:6:16: CKP201 "
PREFIX = "import os\n\nvalue = "
LIMIT_COLUMN = len("value = ") + 201  # where the 201st bracket opens, on line 3
LINE = re.compile(r"^(?P<path>[^:\s]+):(?P<line>\d+):(?P<column>\d+): (?P<code>CKP\d{3}) (?P<message>.*)$")


def _parentheses(depth: int) -> str:
    return PREFIX + "(" * depth + "1" + ")" * depth + "\n"


def _findings(completed: subprocess.CompletedProcess) -> dict[str, tuple[int, int, str, str]]:
    """The text report, by file (one finding each in these tests)."""
    found = {}
    for line in completed.stdout.decode().splitlines():
        match = LINE.match(line)
        if match:
            found[match["path"]] = (int(match["line"]), int(match["column"]), match["code"], match["message"])
    return found


@pytest.mark.parametrize(
    "text, too_deep, safe",
    [
        ("x = " + "(" * 200 + "1" + ")" * 200 + "\n", None, True),  # CPython's limit, and libcst's safe margin
        ("x = " + "(" * 201 + "1" + ")" * 201 + "\n", (1, 205), False),
        ("x = " + "[{" * 101 + "]}" * 101 + "\n", (1, 205), False),  # every kind of bracket counts
        ("s = '" + "(" * 300 + "'\n# " + "(" * 300 + "\n", None, True),  # not in strings or comments
        ("x = [\n" + "    1,\n" * (IN_PROCESS_TOKENS // 2) + "]\n", None, False),  # a long statement
        ("x = 1\n" * 10_000, None, True),  # many short ones
        # 3.11 has no tokens inside an f-string, so it counts its characters; 3.12 has tokens
        ('x = f"{' + "a" * IN_PROCESS_TOKENS + '}"\n', None, sys.version_info >= (3, 12)),
        ('x = "{' + "a" * IN_PROCESS_TOKENS + '}"\n', None, True),  # a plain string is one token
        ("def f():\n  return 1\n return 2\n", None, False),  # the tokenizer stops: not ruled out
    ],
    ids=["200", "201", "mixed", "strings", "long", "short", "f-string", "string", "untokenizable"],
)
def test_nesting_is_measured_from_the_tokens(text: str, too_deep: tuple[int, int] | None, safe: bool) -> None:
    nesting = measure(text)
    assert nesting.too_deep == too_deep
    assert nesting.safe_in_process is safe


@pytest.mark.parametrize("jobs", [["-j1"], []], ids=["-j1", "default-jobs"])
def test_brackets_nested_past_pythons_limit_are_that_files_ckp000(tmp_path: Path, jobs: list[str]) -> None:
    (tmp_path / "deep.py").write_text(_parentheses(1_500))
    (tmp_path / "deeper.py").write_text(_parentheses(10_000))
    (tmp_path / "model.py").write_text(HAZARD)
    completed = run_cli("--no-cache", *jobs, ".", cwd=tmp_path)
    assert completed.returncode == 1, (completed.returncode, completed.stderr)
    found = _findings(completed)
    message = "cannot parse file: brackets nested more than 200 levels deep, the limit of every Python version's parser"
    for name in ("deep.py", "deeper.py"):
        line, column, code, text = found[name]
        assert (line, column, code) == (3, LIMIT_COLUMN, "CKP000")
        assert text.startswith(message)
    assert HAZARD_FINDING in completed.stdout.decode()
    assert "Found 3 findings in 3 files (checked 3 files)." in completed.stdout.decode()


@pytest.mark.parametrize("jobs", [["-j1"], []], ids=["-j1", "default-jobs"])
def test_a_crash_inside_libcst_is_that_files_ckp000(tmp_path: Path, jobs: list[str]) -> None:
    """Python 3.11 reads an f-string as one token, so brackets nested in its replacement field
    reach libcst, which crashes (in the child process that reads such a text); from 3.12 the
    tokenizer sees them and the file is refused before libcst."""
    (tmp_path / "fstring.py").write_text(PREFIX + 'f"{' + "(" * 1_500 + "1" + ")" * 1_500 + '}"\n')
    (tmp_path / "model.py").write_text(HAZARD)
    completed = run_cli("--no-cache", *jobs, ".", cwd=tmp_path)
    assert completed.returncode == 1, (completed.returncode, completed.stderr)
    line, _, code, message = _findings(completed)["fstring.py"]
    assert (line, code) == (3, "CKP000")
    if sys.version_info < (3, 12):
        assert "libcst's parser, which reads newer Python, crashed (SIGSEGV) on this file" in message
        assert "its longest statement, at line 3, is 3,008 tokens long" in message
    else:
        assert "brackets nested more than 200 levels deep" in message
    assert HAZARD_FINDING in completed.stdout.decode()


def test_a_call_libcst_could_crash_on_gets_no_fix_and_the_run_goes_on(tmp_path: Path) -> None:
    """`ast` reads 600 nested lambda defaults; libcst, which builds the fixes, overflows on them."""
    defaults = "lambda a=" * 600 + "1" + ":1" * 600
    (tmp_path / "model.py").write_text(
        "from torch.utils.checkpoint import checkpoint\n\n\n"
        f"def deep(block, x):\n    return checkpoint(block, x, {defaults})\n\n\n"
        "def plain(block, x):\n    return checkpoint(block, x)\n"
    )
    completed = run_cli("--no-cache", "--format", "json", "model.py", cwd=tmp_path)
    assert completed.returncode == 1, (completed.returncode, completed.stderr)
    found = [(f["line"], f["code"], len(f.get("fixes") or [])) for f in json_findings(completed)]
    assert found == [(5, "CKP101", 0), (9, "CKP101", 2)]


def test_flake8_reports_the_other_files_beside_a_deep_one(tmp_path: Path) -> None:
    """The plugin lints the whole project in flake8's process: a crash there ended flake8."""
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\n")
    (tmp_path / "deep.py").write_text(_parentheses(1_500))
    (tmp_path / "model.py").write_text(HAZARD)
    completed = subprocess.run(
        [sys.executable, "-m", "flake8", "--select", "CKP", "model.py"],
        cwd=tmp_path,
        capture_output=True,
        timeout=300,
        check=False,
        env={**os.environ, "CKPTLINT_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert completed.returncode == 1, (completed.returncode, completed.stderr)
    assert completed.stdout.decode().startswith(HAZARD_FINDING)


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "ckptlint", "lsp"]))
async def client(lsp_client: LanguageClient):
    yield
    await lsp_client.shutdown_session()


async def test_the_language_server_survives_a_deep_file(client: LanguageClient, tmp_path: Path) -> None:
    """The file-local lint runs in a thread of the server: a crash there ended the server."""
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\n")
    await _start(client, tmp_path)
    deep = tmp_path / "deep.py"
    deep.write_text(_parentheses(1_500))
    _open(client, deep, deep.read_text())
    [diagnostic] = await asyncio.wait_for(_refined(client, deep), 120)
    assert diagnostic.code == "CKP000" and "200 levels" in diagnostic.message
    assert diagnostic.range.start == types.Position(line=2, character=LIMIT_COLUMN - 1)
    model = tmp_path / "model.py"
    model.write_text(HAZARD)
    _open(client, model, HAZARD)
    assert {d.code for d in await asyncio.wait_for(_refined(client, model, ends=1), 120)} == {"CKP201"}


def test_a_parse_that_timed_out_is_reported_but_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A timeout says more about the machine's load than about the file: the next run asks again."""
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\n")
    (tmp_path / "odd.py").write_text("def f():\n  return 1\n return 2\n")  # not ruled out: read in the child

    def lint() -> list[str]:
        return [finding.summary for finding in lint_project(tmp_path, "odd.py").findings]

    monkeypatch.setattr("ckptlint.contained_lowering.child_timeout", lambda text: 0.0001)
    (timed_out,) = lint()
    assert "took longer than 0 s" in timed_out
    monkeypatch.undo()
    (again,) = lint()
    assert again.startswith("syntax error: unindent does not match any outer indentation level") and "took longer" not in again
