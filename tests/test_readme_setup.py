"""The README's install commands, run as a new user runs them: from a clean clone, in a fresh venv.

The set-up block's two commands are read from README.md and run literally by bash, with the
fresh venv's `bin` first on PATH (so `python3` and `ckptlint` are the venv's). The first runs
in an isolated venv, which proves ckptlint installs and runs with nothing but its declared
dependencies. The second runs in a venv that sees this machine's packages (torch and the test
tools are already there, as on CI after `.ci/run`'s install); the tests it starts are narrowed
with PYTEST_ADDOPTS to one small file, so the suite does not run itself recursively.
The git-URL form (`pip install 'ckptlint @ git+URL@REV'`) is run with the clone's file URL and
its commit sha. Slow (venvs and pip): about a minute.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from conftest import REPO, pre_commit_env

README = REPO / "README.md"


def _setup_commands() -> list[str]:
    """The shell commands in the README's "Set-up" block, comments left out."""
    readme = README.read_text(encoding="utf-8")
    section = readme[readme.index("## Set-up") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, "README's Set-up section has no ```sh block"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _example_output() -> str:
    readme = README.read_text(encoding="utf-8")
    start = readme.index("$ ckptlint examples/\n") + len("$ ckptlint examples/\n")
    return readme[start : readme.index("```", start)]


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean clone of this repository's committed HEAD: what a new user checks out."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.fail("this test needs git and a git checkout of ckptlint (CI clones one)")
    destination = tmp_path_factory.mktemp("readme") / "ckptlint"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(destination)], check=True, capture_output=True)
    return destination


def _fresh_venv(where: Path, system_site_packages: bool) -> dict[str, str]:
    """A new venv at `where`; the environment that puts it first on PATH, as `activate` does."""
    venv.EnvBuilder(with_pip=True, system_site_packages=system_site_packages, clear=True).create(where)
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{where / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(where)
    return env


def _bash(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=1200)


def test_set_up_has_the_two_documented_commands() -> None:
    install_and_lint, install_and_test = _setup_commands()
    assert install_and_lint.endswith("ckptlint examples/")
    assert install_and_test.endswith("python3 -m pytest")


def test_first_command_installs_and_lints_the_examples_in_an_isolated_venv(clone: Path, tmp_path: Path) -> None:
    install_and_lint = _setup_commands()[0]
    env = _fresh_venv(tmp_path / "venv", system_site_packages=False)

    ran = _bash(install_and_lint, clone, env)

    assert ran.returncode == 1, ran.stdout + ran.stderr  # the examples have findings
    assert ran.stdout.endswith(_example_output()), ran.stdout[-3000:] + ran.stderr[-3000:]
    # the linter ran from the venv, not from this checkout
    assert (tmp_path / "venv" / "bin" / "ckptlint").exists()


def test_second_command_installs_the_test_dependencies_and_runs_pytest(clone: Path, tmp_path: Path) -> None:
    install_and_test = _setup_commands()[1]
    env = _fresh_venv(tmp_path / "venv", system_site_packages=True)
    env["PYTEST_ADDOPTS"] = "-q -p no:cacheprovider tests/test_rules.py"

    ran = _bash(install_and_test, clone, env)

    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert re.search(r"\d+ passed", ran.stdout), ran.stdout[-3000:]
    # the tests imported the clone's ckptlint (the editable install), not this checkout's
    where = _bash("python3 -c 'import ckptlint, os; print(os.path.dirname(ckptlint.__file__))'", tmp_path, env)
    assert Path(where.stdout.strip()) == clone / "ckptlint", where.stdout + where.stderr


def test_install_from_a_git_url_at_a_commit(clone: Path, tmp_path: Path) -> None:
    """README: `pip install 'ckptlint @ git+URL@REV'` with a commit sha (or tag) as REV."""
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, check=True, capture_output=True, text=True).stdout.strip()
    env = _fresh_venv(tmp_path / "venv", system_site_packages=False)

    # file://localhost/...: the pip that a new venv bundles rejects a URL without a host in `name @ URL`
    installed = _bash(f"python3 -m pip install 'ckptlint @ git+file://localhost{clone}@{sha}'", tmp_path, env)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    ran = _bash(f"ckptlint {clone / 'examples'}", tmp_path, env)

    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert ran.stdout.rstrip().endswith("Found 8 findings in 2 files (checked 4 files)."), ran.stdout



def test_pre_commit_snippet_with_a_commit_sha(clone: Path, tmp_path: Path) -> None:
    """README's pre-commit configuration, pointed at the clone with `rev:` its commit sha."""
    readme = README.read_text(encoding="utf-8")
    section = readme[readme.index("### pre-commit") :]
    snippet = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert snippet is not None
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, check=True, capture_output=True, text=True).stdout.strip()
    config, replaced = re.subn(r"repo: \S+", f"repo: {clone}", snippet.group(1))
    config, revised = re.subn(r"rev: \S+", f"rev: {sha}", config)
    assert replaced == revised == 1, snippet.group(1)
    user = tmp_path / "user"
    user.mkdir()
    env = pre_commit_env(tmp_path / "pre-commit-home")
    subprocess.run(["git", "init", "-q"], cwd=user, check=True)
    (user / ".pre-commit-config.yaml").write_text(config)
    (user / "model.py").write_text("from torch.utils.checkpoint import checkpoint\n\n\ndef forward(block, x):\n    return checkpoint(block, x)\n")
    subprocess.run(["git", "add", "."], cwd=user, check=True)

    ran = subprocess.run(
        [sys.executable, "-m", "pre_commit", "run", "--all-files", "--color", "never"],
        cwd=user, env=env, capture_output=True, text=True, timeout=900,
    )

    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "model.py:5:12: CKP101" in ran.stdout, ran.stdout
