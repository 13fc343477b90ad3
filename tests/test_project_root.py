"""The project root and a cache that survives selection changes, seen from the command line.

The project root is `--project-root`, else `project-root =` in the configuration, else the
nearest directory with a build file or `.git` above the named paths, never the `--config`
file's folder; `-v` says which and why, and how to narrow a project scan much larger than
what was named (never a warning: a right root draws one as often). The cache holds findings before selection: a new `--select`, `--ignore`,
`--per-file-ignores` or `--report-unused-noqa` re-analyses no file, and neither does a second
`ckptlint calls`. Each run is a fresh process; `-v`'s last line ("analysed N files; M from
the cache") is what says whether anything was re-analysed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from ckptlint.engine.cache import CACHE_DIR_NAME
from ckptlint.frontend import (
    CACHE_DIR_ENV,
    LARGE_SCAN_FILES,
    LARGE_SCAN_RATIO,
    scope_hint,
)
from ckptlint.result import Scope

# a model whose region draws from Python's random (CKP201) and appends to a list that
# outlives it (CKP203); the call passes use_reentrant, so CKP101 stays silent
MODEL = """\
import random

from torch.utils.checkpoint import checkpoint

seen_shapes = []


class Tower:
    def __init__(self, layer):
        self.layer = layer
        self.trace = []

    def step(self, hidden):
        self.trace.append(hidden.shape)
        return self.layer(hidden) * random.uniform(0.9, 1.1)

    def forward(self, hidden):
        return checkpoint(self.step, hidden, use_reentrant=False)
"""
BARE_CALL = "from torch.utils.checkpoint import checkpoint\n\n\ndef run(fn, x):\n    return checkpoint(fn, x)\n"


def ckptlint(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real command line, with this checkout's code and no cache directory from the caller."""
    env = {key: value for key, value in os.environ.items() if key != CACHE_DIR_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-m", "ckptlint", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def said(completed: subprocess.CompletedProcess[str], what: str) -> str:
    """The value of `-v`'s line `ckptlint: WHAT: value`."""
    match = re.search(rf"^ckptlint: {what}: (.*)$", completed.stderr, re.MULTILINE)
    assert match is not None, completed.stderr
    return match.group(1)


def reuse(completed: subprocess.CompletedProcess[str]) -> tuple[int, int]:
    """(files analysed, files answered from the cache), from `-v`."""
    match = re.search(r"^ckptlint: analysed ([\d,]+) files?; ([\d,]+) from the cache$", completed.stderr, re.MULTILINE)
    assert match is not None, completed.stderr
    return int(match.group(1).replace(",", "")), int(match.group(2).replace(",", ""))


def codes(completed: subprocess.CompletedProcess[str]) -> list[tuple[str, str]]:
    """(path:line, code) of each finding line."""
    return [(line.split(": ")[0].rsplit(":", 1)[0], line.split()[1]) for line in completed.stdout.splitlines() if ": CKP" in line]


def caches(top: Path) -> set[Path]:
    return {path for path in top.rglob(CACHE_DIR_NAME) if path.is_dir()}


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A repository (a `.git` folder) with a package of two modules."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "pkg").mkdir()
    (repo / "pkg" / "model.py").write_text(MODEL)
    (repo / "pkg" / "util.py").write_text("def double(x):\n    return 2 * x\n")
    return repo


# -- the project root ------------------------------------------------------------------


def test_a_config_outside_the_repository_does_not_make_its_folder_the_project(tmp_path: Path, repository: Path) -> None:
    """The issue's case: the configuration's folder, next to the repository, held another
    project; it was scanned, its finding reported, and the cache written there."""
    shared = tmp_path / "shared-configs"
    (shared / "other").mkdir(parents=True)
    (shared / "ckptlint.toml").write_text('ignore = ["CKP203"]\n')
    (shared / "other" / "train.py").write_text(BARE_CALL)  # a CKP101 in another project
    completed = ckptlint("--config", str(shared / "ckptlint.toml"), "-v", "repo/pkg/model.py", cwd=tmp_path)
    assert completed.returncode == 1, completed.stderr
    assert codes(completed) == [("repo/pkg/model.py:15", "CKP201")]  # the configuration applies (no CKP203)
    assert said(completed, "project root") == f"{repository} (the nearest directory with .git at or above the named paths)"
    assert said(completed, "configuration") == str(shared / "ckptlint.toml")
    assert said(completed, "files") == "1 named, 2 in the project scan"
    assert caches(tmp_path) == {repository / CACHE_DIR_NAME}


def test_the_nearest_marker_wins_over_a_configured_folder_above_it(tmp_path: Path, repository: Path) -> None:
    """A package with its own build file inside a configured repository is its own project."""
    (repository / "pyproject.toml").write_text("[tool.ckptlint]\n")
    (repository / "pkg" / "setup.py").write_text("")
    completed = ckptlint("-v", "pkg/model.py", cwd=repository)
    assert said(completed, "project root") == f"{repository / 'pkg'} (the nearest directory with setup.py at or above the named paths)"
    assert said(completed, "configuration") == str(repository / "pyproject.toml")
    assert caches(tmp_path) == {repository / "pkg" / CACHE_DIR_NAME}


def test_project_root_option_and_key(tmp_path: Path, repository: Path) -> None:
    (repository / "pyproject.toml").write_text('[tool.ckptlint]\nproject-root = "pkg"\n')
    (repository / "export.py").write_text("import pkg.model\n")
    completed = ckptlint("-v", "pkg/model.py", cwd=repository)
    assert said(completed, "project root") == f"{repository / 'pkg'} (project-root in {repository / 'pyproject.toml'})"
    assert said(completed, "files") == "1 named, 2 in the project scan"
    completed = ckptlint("-v", "--project-root", ".", "pkg/model.py", cwd=repository)  # the option beats the key
    assert said(completed, "project root") == f"{repository} (--project-root)"
    assert said(completed, "files") == "1 named, 3 in the project scan"  # export.py too
    assert caches(tmp_path) == {repository / "pkg" / CACHE_DIR_NAME, repository / CACHE_DIR_NAME}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--project-root", "missing"], "Directory 'missing' does not exist"),
        (["--project-root", "pkg/model.py"], "Directory 'pkg/model.py' is a file"),
        (["--project-root", "pkg", "--no-project"], "--project-root and --no-project are alternatives"),
    ],
)
def test_a_bad_project_root_option_is_a_usage_error(repository: Path, args: list[str], message: str) -> None:
    completed = ckptlint(*args, "pkg/model.py", cwd=repository)
    assert completed.returncode == 2 and message in completed.stderr, completed.stderr
    assert completed.stdout == ""


def test_a_bad_project_root_key_is_a_usage_error(repository: Path) -> None:
    (repository / "pyproject.toml").write_text('[tool.ckptlint]\nproject-root = "gone"\n')
    completed = ckptlint("pkg/model.py", cwd=repository)
    assert completed.returncode == 2
    assert completed.stderr.startswith(f"ckptlint: error: {repository / 'pyproject.toml'}: [tool.ckptlint] project-root: 'gone' is not a directory")


def test_a_large_project_scan_draws_a_hint_under_verbose_only(tmp_path: Path) -> None:
    """A folder without a build file inside a monorepo: the monorepo is the project. Said under
    `-v`; without it, stderr stays empty (a right root, as in transformers, scans as much)."""
    monorepo = tmp_path / "monorepo"
    (monorepo / ".git").mkdir(parents=True)
    (monorepo / "team" / "experiment").mkdir(parents=True)
    (monorepo / "team" / "experiment" / "model.py").write_text(MODEL)
    bulk = monorepo / "services"
    bulk.mkdir()
    for number in range(LARGE_SCAN_FILES):
        (bulk / f"m{number}.py").write_text("")
    completed = ckptlint("team/experiment/model.py", cwd=monorepo)
    assert completed.stderr == "", completed.stderr
    verbose = ckptlint("-v", "team/experiment/model.py", cwd=monorepo)
    expected = f"ckptlint: the project scan under {monorepo} holds {LARGE_SCAN_FILES + 1:,} files for 1 named; narrow it with --project-root DIR"
    assert expected in verbose.stderr, verbose.stderr
    narrowed = ckptlint("--project-root", "team/experiment", "team/experiment/model.py", cwd=monorepo)
    assert narrowed.stderr == "" and codes(narrowed) == codes(completed)


def test_the_warning_thresholds() -> None:
    assert scope_hint(Path("/r"), Scope(1, LARGE_SCAN_FILES)) is None  # not more than the limit
    assert scope_hint(Path("/r"), Scope(1, LARGE_SCAN_FILES + 1)) is not None
    named = (LARGE_SCAN_FILES + 1) // LARGE_SCAN_RATIO + 1
    assert scope_hint(Path("/r"), Scope(named, LARGE_SCAN_FILES + 1)) is None  # not LARGE_SCAN_RATIO times the named
    assert scope_hint(Path("/r"), Scope(named - 1, LARGE_SCAN_FILES + 1)) is not None
    assert scope_hint(None, Scope(LARGE_SCAN_FILES * 2, 0)) is None  # no project


# -- the cache before selection --------------------------------------------------------


SELECTION_CHANGES = [
    ["--select", "CKP203"],
    ["--ignore", "CKP201"],
    ["--per-file-ignores", "pkg/*:CKP203"],
    ["--report-unused-noqa"],
    ["--extend-select", "CKP1", "--ignore", "CKP2"],
]


def test_a_selection_change_reanalyses_no_file(repository: Path) -> None:
    first = ckptlint("-v", "--select", "CKP201", "pkg", cwd=repository)
    assert codes(first) == [("pkg/model.py:15", "CKP201")]
    assert reuse(first) == (1, 0)
    expected = {
        0: [("pkg/model.py:14", "CKP203")],
        1: [("pkg/model.py:14", "CKP203")],
        2: [("pkg/model.py:15", "CKP201")],
        3: [("pkg/model.py:14", "CKP203"), ("pkg/model.py:15", "CKP201")],
        4: [],
    }
    for number, change in enumerate(SELECTION_CHANGES):
        completed = ckptlint("-v", *change, "pkg", cwd=repository)
        assert reuse(completed) == (0, 1), change
        assert codes(completed) == expected[number], change
        assert codes(completed) == codes(ckptlint(*change, "--no-cache", "pkg", cwd=repository)), change


def test_a_selection_of_call_rules_only_is_cached_for_itself(repository: Path) -> None:
    """A cold run with only call-level rules selected skips region analysis; its entries answer
    only such selections, so a region rule is then analysed once, and after that everything is warm."""
    (repository / "pkg" / "train.py").write_text(BARE_CALL)
    runs = [("CKP101", (2, 0)), ("CKP102", (0, 2)), ("CKP2", (2, 0)), ("CKP101", (0, 2)), ("CKP201", (0, 2))]
    for select, expected in runs:
        completed = ckptlint("-v", "--select", select, "pkg", cwd=repository)
        assert reuse(completed) == expected, select
        assert codes(completed) == codes(ckptlint("--select", select, "--no-cache", "pkg", cwd=repository)), select


def test_calls_is_cached(repository: Path) -> None:
    (repository / "pkg" / "train.py").write_text(BARE_CALL)
    first = ckptlint("calls", "-v", "pkg", cwd=repository)
    assert reuse(first) == (2, 0)
    assert first.stdout.splitlines() == [
        'pkg/model.py:18:16: torch.utils.checkpoint.checkpoint region=self.step mode=non-reentrant source="use_reentrant=False"',
        "pkg/train.py:5:12: torch.utils.checkpoint.checkpoint region=fn mode=reentrant (default) "
        'source="use_reentrant not passed: torch falls back to reentrant"',
    ]
    second = ckptlint("calls", "-v", "pkg", cwd=repository)
    assert reuse(second) == (0, 2) and second.stdout == first.stdout
    (repository / "pkg" / "train.py").write_text(BARE_CALL.replace("(fn, x)", "(fn, x, use_reentrant=False)"))
    third = ckptlint("calls", "-v", "pkg", cwd=repository)
    assert reuse(third) == (1, 1)
    assert third.stdout.splitlines()[1] == (
        'pkg/train.py:5:12: torch.utils.checkpoint.checkpoint region=fn mode=non-reentrant source="use_reentrant=False"'
    )
    check = ckptlint("-v", "pkg", cwd=repository)  # the lint reads what `calls` left, and the other way round
    assert reuse(check) == (0, 2)


def test_unused_noqa_does_not_depend_on_what_the_cache_holds(repository: Path) -> None:
    """`# noqa: CKP203` silences a finding whatever is selected; a run of call-level rules
    only must not leave entries that make it look unused."""
    model = repository / "pkg" / "model.py"
    lines = model.read_text().splitlines()
    lines[13] += "  # noqa: CKP203"  # used: the append is a CKP203
    lines[14] += "  # noqa: CKP205"  # unused: nothing moves devices there
    model.write_text("\n".join(lines) + "\n")
    assert reuse(ckptlint("-v", "--select", "CKP101", "pkg", cwd=repository)) == (1, 0)
    for cache in ([], ["--no-cache"]):
        completed = ckptlint("--select", "CKP001", "--report-unused-noqa", *cache, "pkg", cwd=repository)
        assert codes(completed) == [("pkg/model.py:15", "CKP001")], cache


# -- typing stubs are not code ---------------------------------------------------------

STUB_BLOCKS = """\
import torch
from torch.utils.checkpoint import checkpoint


def make_blocks(add_first):
    mods = [torch.nn.Linear(4, 4)]
    if add_first:
        mods.insert(0, AddOne())
    return torch.nn.Sequential(*mods).to("cpu")


class AddOne(torch.nn.Module):
    def forward(self, x):
        return x.add_(1)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([make_blocks(True), make_blocks(False)])

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return x
"""


STUB_TORCH_NN = """\
from typing import Any, Iterable, Iterator, Optional


class Module:
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def to(self, device: Any) -> Module: ...


class ModuleList(Module):
    def __init__(self, modules: Optional[Iterable[Module]] = ...) -> None: ...
    def __iter__(self) -> Iterator[Module]: ...


Sequential: Any = ...
"""


def test_typing_stubs_of_a_library_in_the_repository_do_not_stand_in_for_it(repository: Path) -> None:
    # xformers keeps mypy stubs for torch in `stubs/` (with no `Sequential`), beside a script
    stubs = repository / "stubs"
    (stubs / "torch" / "nn").mkdir(parents=True)
    (stubs / "torch" / "__init__.pyi").write_text("from . import nn as nn\n")
    (stubs / "torch" / "nn" / "__init__.pyi").write_text(STUB_TORCH_NN)
    (stubs / "numpy.pyi").write_text("def zeros(shape) -> object: ...\n")
    (stubs / "stub_checks.py").write_text("import torch\n")
    (repository / "pkg" / "blocks.py").write_text(STUB_BLOCKS)
    completed = ckptlint("pkg/blocks.py", "--no-cache", cwd=repository)
    assert codes(completed) == [("pkg/blocks.py:14", "CKP204")], completed.stdout + completed.stderr
