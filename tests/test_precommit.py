"""The pre-commit hook, for real: `pre-commit try-repo` installs this project and runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import REPO, pre_commit_env

HAZARD = "from torch.utils.checkpoint import checkpoint\n\n\ndef forward(block, x):\n    return checkpoint(block, x)\n"
FIXED = HAZARD.replace("checkpoint(block, x)", "checkpoint(block, x, use_reentrant=False)")


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_hook_fails_on_a_finding_and_passes_once_fixed(tmp_path: Path) -> None:
    user_repo = tmp_path / "user"
    user_repo.mkdir()
    _git(user_repo, "init", "-q")
    (user_repo / "model.py").write_text(HAZARD)
    (user_repo / "notes.txt").write_text("checkpoint(block, x)\n")  # not Python: the hook must not see it
    _git(user_repo, "add", "model.py", "notes.txt")
    env = pre_commit_env(tmp_path / "pre-commit-home")
    command = [sys.executable, "-m", "pre_commit", "try-repo", str(REPO), "ckptlint", "--all-files", "--color", "never"]

    failed = subprocess.run(command, cwd=user_repo, env=env, capture_output=True, text=True, timeout=900)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "model.py:5:12: CKP101 checkpoint() called without `use_reentrant`" in failed.stdout
    assert "notes.txt" not in failed.stdout

    (user_repo / "model.py").write_text(FIXED)
    _git(user_repo, "add", "model.py")
    passed = subprocess.run(command, cwd=user_repo, env=env, capture_output=True, text=True, timeout=900)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "Passed" in passed.stdout
