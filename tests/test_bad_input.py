"""Bad input never stops the run: each problem is a finding or a message, the other files are linted."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

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


def test_a_virtual_environment_is_skipped_whatever_it_is_called(tree: Path) -> None:
    """Found by its pyvenv.cfg (discovery.py reads it from the directory's listing)."""
    (tree / "myenv" / "lib").mkdir(parents=True)
    (tree / "myenv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (tree / "myenv" / "lib" / "installed.py").write_text(HAZARD)
    completed = run_cli(".", "--format", "json", cwd=tree)
    assert _codes_by_file(completed) == {"good.py": {"CKP101"}}
    named = run_cli("myenv", "--format", "json", cwd=tree)  # named, it is linted
    assert _codes_by_file(named) == {"installed.py": {"CKP101"}}


def test_broken_symlink_is_an_error_and_the_run_continues(tree: Path) -> None:
    os.symlink(tree / "nowhere.py", tree / "ghost.py")
    completed = run_cli(".", "--format", "json", cwd=tree)
    assert completed.returncode == 2
    assert b"ghost.py: broken symlink" in completed.stderr
    assert _codes_by_file(completed) == {"good.py": {"CKP101"}}


# Unreadable for real: mode 000 under a process that honours it. Root reads anything through
# two capabilities (capabilities(7)); a root test run (CI containers, this machine) drops them
# from the bounding set before exec, so the CLI runs as root but is refused as any user is.
PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2


def _without_read_override(libc: ctypes.CDLL) -> Callable[[], None]:
    def drop() -> None:  # in the forked child, before exec
        for capability in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
            if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) refused")

    return drop


@pytest.fixture(scope="session")
def unprivileged(tmp_path_factory: pytest.TempPathFactory) -> Callable[[], None] | None:
    """The `preexec_fn` under which mode 000 is unreadable (None when it already is); the
    tests are skipped only where neither works, which a probe decides."""
    preexec = None
    if os.geteuid() == 0:
        if not sys.platform.startswith("linux"):
            pytest.skip("running as root, and capabilities can only be dropped on Linux")
        preexec = _without_read_override(ctypes.CDLL(None, use_errno=True))
    probe = tmp_path_factory.mktemp("probe") / "secret"
    probe.write_text("")
    probe.chmod(0)
    try:
        refused = subprocess.run([sys.executable, "-c", f"open({str(probe)!r})"], capture_output=True, preexec_fn=preexec)
    except subprocess.SubprocessError as exc:
        pytest.skip(f"running as root and cannot drop CAP_DAC_OVERRIDE: {exc}")
    finally:
        probe.chmod(0o600)
    if b"PermissionError" not in refused.stderr:
        pytest.skip("mode 000 files stay readable here (root with its capabilities kept)")
    return preexec


def run_unprivileged(preexec: Callable[[], None] | None, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ckptlint", "--no-cache", *args], cwd=cwd, capture_output=True, timeout=300, preexec_fn=preexec)


@pytest.fixture
def locked(tree: Path) -> Iterator[Path]:
    """`tree` with `secret.py` and the directory `locked/` (holding a hazard) at mode 000."""
    (tree / "secret.py").write_text(HAZARD)
    (tree / "locked").mkdir()
    (tree / "locked" / "x.py").write_text(HAZARD)
    (tree / "secret.py").chmod(0)
    (tree / "locked").chmod(0)
    yield tree
    (tree / "locked").chmod(0o700)  # so that pytest can remove it
    (tree / "secret.py").chmod(0o600)


def test_unreadable_directory_and_file_are_one_line_each_and_the_rest_is_linted(locked: Path, unprivileged: Callable[[], None] | None) -> None:
    completed = run_unprivileged(unprivileged, ".", "--format", "json", cwd=locked)
    assert completed.returncode == 2
    assert completed.stderr.decode().splitlines() == [
        "ckptlint: error: locked: cannot read directory: Permission denied",
        "ckptlint: error: secret.py: cannot read file: Permission denied",
    ]
    report = json.loads(completed.stdout)
    assert [(f["path"], f["code"]) for f in report["findings"]] == [("good.py", "CKP101")]
    assert [(p["path"], p["fatal"]) for p in report["problems"]] == [("locked", True), ("secret.py", True)]


@pytest.mark.parametrize("output_format", ["text", "json", "sarif"])
def test_unreadable_file_named_on_the_command_line_is_not_a_usage_error(
    locked: Path, unprivileged: Callable[[], None] | None, output_format: str
) -> None:
    completed = run_unprivileged(unprivileged, "secret.py", "locked/x.py", "good.py", "--format", output_format, cwd=locked)
    assert completed.returncode == 2
    assert completed.stderr.decode().splitlines() == [
        "ckptlint: error: locked/x.py: cannot read: Permission denied",  # its directory may not be searched
        "ckptlint: error: secret.py: cannot read file: Permission denied",
    ]
    out = completed.stdout.decode()
    if output_format == "text":
        assert out.splitlines()[-1] == "Found 1 finding in 1 file (checked 1 file)."
    else:
        assert "good.py" in json.dumps(json.loads(out))  # the report is printed, and whole


def test_unreadable_directory_in_the_project_scan_does_not_stop_the_run(locked: Path, unprivileged: Callable[[], None] | None) -> None:
    """A named file's project (checkpoint calls elsewhere that reach it) is walked too."""
    (locked / "pyproject.toml").write_text("")
    completed = run_unprivileged(unprivileged, "good.py", "-v", cwd=locked)
    assert completed.returncode == 1, completed.stderr.decode()
    assert "Traceback" not in completed.stderr.decode()
    assert completed.stdout.decode().splitlines()[-1] == "Found 1 finding in 1 file (checked 1 file)."
    skipped = [line for line in completed.stderr.decode().splitlines() if "project scan: skipped" in line]
    assert skipped == [
        f"ckptlint: project scan: skipped {locked / 'locked'}: cannot read directory: Permission denied "
        "(a checkpoint call there that reaches a named file is not seen)"
    ]  # named, it is an error; in the scan, a -v line
    assert "skipped" not in run_unprivileged(unprivileged, "good.py", cwd=locked).stderr.decode()


def test_stdin_with_a_syntax_error_is_a_finding() -> None:
    completed = run_cli("-", "--stdin-filename", "broken.py", "--format", "json", input=b"def f(:\n")
    assert completed.returncode == 1
    assert [(f["path"], f["code"], f["line"]) for f in json_findings(completed)] == [("broken.py", "CKP000", 1)]


def test_a_failure_reading_a_files_dependencies_costs_that_file_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading what an analysis depends on reads files too (a package under a mode-000 folder
    raised PermissionError there): it is inside the file's guard, so the run goes on."""
    from ckptlint.config import Config
    from ckptlint.engine import Linter, worker

    call = "from torch.utils.checkpoint import checkpoint\n\n\ndef f(g, x):\n    return checkpoint(g, x)\n"
    (tmp_path / "good.py").write_text(call)
    (tmp_path / "boom.py").write_text(call)
    real = worker.dependencies

    def dependencies(project, loaded):  # noqa: ANN001, ANN202
        if loaded.name == "boom":
            raise PermissionError(13, "Permission denied")
        return real(project, loaded)

    monkeypatch.setattr(worker, "dependencies", dependencies)
    result = Linter(Config(root=tmp_path), base=tmp_path, jobs=1).lint_files([tmp_path / "boom.py", tmp_path / "good.py"])
    [problem] = result.problems
    assert problem.path == "boom.py" and "internal error while analysing this file (PermissionError" in problem.message
    assert [(f.path, f.code) for f in result.findings] == [("good.py", "CKP101")]
