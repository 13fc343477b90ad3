"""Bad input never stops the run: each problem is a finding or a message, the other files are linted."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ckptlint.config import Config
from ckptlint.engine import Linter
from conftest import FIXTURES, json_findings, run_cli

HAZARD = "from torch.utils.checkpoint import checkpoint\n\ndef f(b, x):\n    return checkpoint(b, x)\n"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A project with one good file to prove that linting goes on."""
    (tmp_path / "good.py").write_text(HAZARD)
    return tmp_path


def _codes_by_file(completed) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for finding in json_findings(completed):
        found.setdefault(Path(finding["path"]).name, set()).add(finding["code"])
    return found


def test_every_committed_bad_file_gives_a_finding_and_the_rest_are_linted(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "bad", tmp_path / "bad")
    completed = run_cli("bad", "--format", "json", cwd=tmp_path)
    assert completed.returncode == 1
    assert completed.stderr == b""
    found = _codes_by_file(completed)
    assert found["syntax_error.py"] == {"CKP000"}
    assert found["binary.py"] == {"CKP000"}
    assert found["latin1_without_cookie.py"] == {"CKP000"}
    assert found["latin1_with_cookie.py"] == {"CKP101"}
    assert "empty.py" not in found
    for name in ("crlf.py", "cr_only.py", "bom_and_unicode.py", "formfeed_and_tab.py"):
        assert found[name] == {"CKP101"}, name


def test_missing_path_is_an_error_and_the_run_continues(tree: Path) -> None:
    completed = run_cli("good.py", "does_not_exist.py", "--format", "json", cwd=tree)
    assert completed.returncode == 2
    assert b"does_not_exist.py: no such file or directory" in completed.stderr
    assert _codes_by_file(completed) == {"good.py": {"CKP101"}}


def test_only_a_missing_path_is_one_error_and_no_summary(tree: Path) -> None:
    completed = run_cli("does_not_exist.py", cwd=tree)
    assert completed.returncode == 2
    assert completed.stdout == b""  # not "All checks passed (0 files)"
    assert completed.stderr.decode().splitlines() == ["ckptlint: error: does_not_exist.py: no such file or directory"]
    with_a_file = run_cli("good.py", "does_not_exist.py", cwd=tree)
    assert with_a_file.returncode == 2 and with_a_file.stdout.decode().splitlines()[-1].startswith("Found 1 finding in 1 file")


def test_directory_symlink_loop_is_reported_once_and_skipped(tree: Path) -> None:
    package = tree / "pkg"
    package.mkdir()
    (package / "model.py").write_text(HAZARD)
    os.symlink(package, package / "loop")
    completed = run_cli(".", "--format", "json", cwd=tree)
    assert completed.returncode == 1  # a loop is a warning, not a failure
    assert b"symlink loop" in completed.stderr
    assert _codes_by_file(completed) == {"good.py": {"CKP101"}, "model.py": {"CKP101"}}


def test_directory_symlinks_inside_the_tree_are_aliases_outside_ones_are_followed(tree: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    (tree / "skills").mkdir()
    (tree / "skills" / "tool.py").write_text(HAZARD)
    (tree / ".claude").mkdir()
    os.symlink("../skills", tree / ".claude" / "skills")  # as in Megatron-LM: the same files again
    outside = tmp_path_factory.mktemp("vendored")
    (outside / "vendored.py").write_text(HAZARD)
    os.symlink(outside, tree / "third_party_link")
    completed = run_cli(".", "--format", "json", cwd=tree)
    assert completed.returncode == 1 and completed.stderr == b""
    paths = sorted(finding["path"] for finding in json_findings(completed))
    assert paths == ["good.py", "skills/tool.py", "third_party_link/vendored.py"]


def test_broken_symlink_is_an_error_and_the_run_continues(tree: Path) -> None:
    os.symlink(tree / "nowhere.py", tree / "ghost.py")
    completed = run_cli(".", "--format", "json", cwd=tree)
    assert completed.returncode == 2
    assert b"ghost.py: broken symlink" in completed.stderr
    assert _codes_by_file(completed) == {"good.py": {"CKP101"}}


def test_unreadable_file_is_an_error_and_the_run_continues(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tree / "secret.py"
    secret.write_text(HAZARD)
    real_read_bytes = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self.name == "secret.py":
            raise PermissionError(13, "Permission denied", str(self))
        return real_read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    result = Linter(Config(root=tree), base=tree).lint_paths([tree])
    assert [(p.path.endswith("secret.py"), p.message, p.fatal) for p in result.problems] == [
        (True, "cannot read file: Permission denied", True)
    ]
    assert [(f.path, f.code) for f in result.findings] == [("good.py", "CKP101")]


def test_unreadable_directory_is_an_error_and_the_run_continues(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tree / "locked").mkdir()
    (tree / "locked" / "x.py").write_text(HAZARD)
    real_scandir = os.scandir

    def scandir(path):
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    result = Linter(Config(root=tree), base=tree).lint_paths([tree])
    assert [(p.path.endswith("locked"), p.fatal) for p in result.problems] == [(True, True)]
    assert "Permission denied" in result.problems[0].message
    assert [(f.path, f.code) for f in result.findings] == [("good.py", "CKP101")]


def test_stdin_with_a_syntax_error_is_a_finding() -> None:
    completed = run_cli("-", "--stdin-filename", "broken.py", "--format", "json", input=b"def f(:\n")
    assert completed.returncode == 1
    assert [(f["path"], f["code"], f["line"]) for f in json_findings(completed)] == [("broken.py", "CKP000", 1)]
