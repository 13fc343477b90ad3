"""Shared helpers: where things are, how fixtures mark what they expect, how to run the CLI."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ckptlint.result import LintResult

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"


def load_benchmark(name: str) -> ModuleType:
    """`benchmarks/<name>.py` as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module

_EXPECT = re.compile(r"expect:\s*((?:CKP\d{3}@\d+[\s,]*)+)")
_CALL = re.compile(r"call:\s*((?:[\w.]+@\d+[\s,]*)+)")


def expectations(path: Path) -> tuple[set[tuple[str, int, int]], set[tuple[str, int, int]]]:
    """(code, line, column) of `# expect: CODE@col` and (api, line, column) of `# call: api@col`."""
    findings: set[tuple[str, int, int]] = set()
    calls: set[tuple[str, int, int]] = set()
    text = path.read_bytes().decode("latin-1")
    for number, line in enumerate(re.split(r"\r\n|\r|\n", text), start=1):
        for pattern, into in ((_EXPECT, findings), (_CALL, calls)):
            match = pattern.search(line)
            if match:
                for item in re.split(r"[\s,]+", match.group(1).strip()):
                    name, _, column = item.partition("@")
                    into.add((name, number, int(column)))
    return findings, calls


def fixture_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


_FIXTURES_CACHE = tempfile.TemporaryDirectory(prefix="ckptlint-fixtures-cache-")  # this process's, removed at exit


def lint_fixture(path: Path, project: bool = True) -> LintResult:
    """`path` linted in-process as a pre-commit run lints one file: its own configuration, the
    fixtures the project (none with project=False).

    To find the calls that reach `path`, such a run analyses every checkpoint call of the
    project, 450 files, and the tests lint about 500 paths that way. So they share one cache
    per process, as a user's consecutive runs do (the CLI's default): the first lint analyses
    the fixtures, the others reuse what stands and each still reports its own file. That a
    warm run reports what a cold one does is tested in test_cache and test_cache_differential;
    test_golden and the CLI tests lint the fixtures without this cache."""
    from ckptlint.config import find_config, load_config
    from ckptlint.engine import Linter

    config = load_config(find_config(path), REPO)
    linter = Linter(config, base=REPO, cache_dir=Path(_FIXTURES_CACHE.name))
    return linter.lint_paths([path], project_root=FIXTURES if project else None)


def lint_project(project: Path, *named: str, jobs: int = 1, cache: bool = True) -> LintResult:
    """`named` (relative to `project`) linted in-process with the project's configuration and
    its project scan, on the project's own cache (`.ckptlint_cache/`) or none."""
    from ckptlint.config import load_config
    from ckptlint.engine import Linter

    config = load_config(project / "pyproject.toml", project)
    linter = Linter(config, base=project, jobs=jobs, cache_dir=project / ".ckptlint_cache" if cache else None)
    return linter.lint_files([project / name for name in named], project_root=project)


def run_cli(*args: str, cwd: Path = REPO, input: bytes | None = None, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the real command line in a subprocess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "ckptlint", *args],
        cwd=cwd,
        input=input,
        capture_output=True,
        env=full_env,
        timeout=timeout,
    )


def json_findings(completed: subprocess.CompletedProcess) -> list[dict]:
    return json.loads(completed.stdout)["findings"]


@pytest.fixture
def repo() -> Path:
    return REPO

pytest_plugins = ["pytester"]


def pre_commit_env(home: Path) -> dict[str, str]:
    """The environment for running pre-commit and git in a throwaway repository: its own
    PRE_COMMIT_HOME (hook environments are built there) and a committer identity."""
    identity = {f"GIT_{who}_{what}": value for who in ("AUTHOR", "COMMITTER") for what, value in (("NAME", "t"), ("EMAIL", "t@example.com"))}
    return {**os.environ, "PRE_COMMIT_HOME": str(home), **identity}
