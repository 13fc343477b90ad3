"""The command line as a user meets it: options, exit codes, formats, stdin, rules."""

from __future__ import annotations

import gc
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ckptlint import __version__
from conftest import REPO, json_findings, run_cli

HAZARD = (
    "from torch.utils.checkpoint import checkpoint\n"
    "\n"
    "def forward(block, x):\n"
    "    return checkpoint(block, x, preserve_rng_state=False)\n"
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "model.py").write_text(HAZARD)
    (tmp_path / "clean.py").write_text("import torch\n\nx = torch.zeros(3)\n")
    return tmp_path


def test_exit_codes(project: Path) -> None:
    assert run_cli("model.py", cwd=project).returncode == 1
    assert run_cli("clean.py", cwd=project).returncode == 0
    assert run_cli("model.py", "--exit-zero", cwd=project).returncode == 0
    assert run_cli("model.py", "--no-such-option", cwd=project).returncode == 2
    assert run_cli("model.py", "--select", "XYZ1", cwd=project).returncode == 2


def test_text_output_is_flake8_style(project: Path) -> None:
    completed = run_cli("model.py", cwd=project)
    lines = completed.stdout.decode().splitlines()
    assert lines[0].startswith("model.py:4:12: CKP101 checkpoint() called without `use_reentrant`")
    assert lines[1].startswith("model.py:4:33: CKP102 preserve_rng_state=False")
    assert lines[-1] == "Found 2 findings in 1 file (checked 1 file)."


def test_summary_counts_the_files_with_findings_then_the_files_checked(project: Path) -> None:
    """As mypy says it: `in 4 files` once counted the files checked, read as 4 files with findings."""
    (project / "other.py").write_text(HAZARD)
    completed = run_cli(".", cwd=project)
    lines = completed.stdout.decode().splitlines()
    assert completed.returncode == 1
    assert lines[-1] == "Found 4 findings in 2 files (checked 3 files)."
    assert run_cli("clean.py", cwd=project).stdout.decode().splitlines()[-1] == "All checks passed (1 file)."


def test_check_subcommand_is_the_default(project: Path) -> None:
    assert run_cli("check", "model.py", cwd=project).stdout == run_cli("model.py", cwd=project).stdout


def test_no_paths_lints_the_working_directory(project: Path) -> None:
    completed = run_cli("--quiet", cwd=project)
    assert completed.returncode == 1
    assert completed.stdout.decode().count("model.py:4:") == 2


def test_select_ignore_extend_select(project: Path) -> None:
    def codes(*args: str) -> list[str]:
        return [f["code"] for f in json_findings(run_cli("model.py", "--format", "json", *args, cwd=project))]

    assert codes() == ["CKP101", "CKP102"]
    assert codes("--select", "CKP102") == ["CKP102"]
    assert codes("--ignore", "CKP1") == []
    assert codes("--ignore", "CKP1", "--select", "CKP102") == ["CKP102"]  # more specific wins
    assert codes("--select", "CKP101", "--extend-select", "CKP102") == ["CKP101", "CKP102"]
    assert codes("--select", "CKP101,CKP102") == ["CKP101", "CKP102"]
    assert codes("--per-file-ignores", "model.py:CKP101") == ["CKP102"]
    assert codes("--per-file-ignores", "other_*.py:CKP101") == ["CKP101", "CKP102"]


def test_unknown_code_is_a_usage_error(project: Path) -> None:
    completed = run_cli("model.py", "--select", "CKP999", cwd=project)
    assert completed.returncode == 2
    assert completed.stderr.decode().strip() == "ckptlint: error: --select: 'CKP999' matches no rule (run `ckptlint rules` to list them)"


def test_json_round_trips(project: Path) -> None:
    completed = run_cli("model.py", "--format", "json", cwd=project)
    data = json.loads(completed.stdout)
    assert data["schema_version"] == 1
    assert data["tool"] == {"name": "ckptlint", "version": __version__}
    assert data["files_checked"] == 1
    first = data["findings"][0]
    assert {k: first[k] for k in ("path", "line", "column", "end_line", "end_column", "code")} == {
        "path": "model.py",
        "line": 4,
        "column": 12,
        "end_line": 4,
        "end_column": 58,
        "code": "CKP101",
    }
    assert first["message"].startswith("checkpoint() called without")
    from ckptlint.finding import Finding

    assert [Finding.from_dict(f).to_dict() for f in data["findings"]] == data["findings"]


def test_statistics_and_show_source(project: Path) -> None:
    completed = run_cli("model.py", "--statistics", "--show-source", cwd=project)
    text = completed.stdout.decode()
    assert "    return checkpoint(block, x, preserve_rng_state=False)\n" in text
    assert "\n               ^^^^^^^^^^^^^^^^^^^^^^^^" in text  # under the call
    assert "1      CKP101\n1      CKP102\n" in text


def test_quiet_prints_findings_only(project: Path) -> None:
    lines = run_cli("model.py", "-q", cwd=project).stdout.decode().splitlines()
    assert len(lines) == 2 and all(line.startswith("model.py:4:") for line in lines)
    assert run_cli("clean.py", "-q", cwd=project).stdout == b""


def test_stdin_with_filename(project: Path) -> None:
    completed = run_cli("-", "--stdin-filename", "pkg/step.py", "--format", "json", cwd=project, input=HAZARD.encode())
    assert completed.returncode == 1
    assert [(f["path"], f["code"]) for f in json_findings(completed)] == [("pkg/step.py", "CKP101"), ("pkg/step.py", "CKP102")]


def test_stdin_without_filename(project: Path) -> None:
    completed = run_cli("-", cwd=project, input=HAZARD.encode())
    assert completed.stdout.decode().startswith("-:4:12: CKP101")


def test_output_file(project: Path) -> None:
    completed = run_cli("model.py", "--format", "json", "-o", "report.json", cwd=project)
    assert completed.returncode == 1 and completed.stdout == b""
    assert len(json.loads((project / "report.json").read_text())["findings"]) == 2


def test_default_excludes_and_extend_exclude(project: Path) -> None:
    for folder in (".venv/lib", "build", "node_modules/x", "__pycache__"):
        (project / folder).mkdir(parents=True)
        (project / folder / "gen.py").write_text(HAZARD)
    (project / "generated").mkdir()
    (project / "generated" / "gen.py").write_text(HAZARD)
    paths = {f["path"] for f in json_findings(run_cli(".", "--format", "json", cwd=project))}
    assert paths == {"model.py", "generated/gen.py"}
    paths = {f["path"] for f in json_findings(run_cli(".", "--format", "json", "--extend-exclude", "generated", cwd=project))}
    assert paths == {"model.py"}


def test_explicit_file_beats_exclude_unless_forced(project: Path) -> None:
    (project / "build").mkdir()
    (project / "build" / "gen.py").write_text(HAZARD)
    assert run_cli("build/gen.py", cwd=project).returncode == 1
    assert run_cli("build/gen.py", "--force-exclude", cwd=project).returncode == 0


def test_pyi_files_are_linted_other_suffixes_only_when_named(project: Path) -> None:
    (project / "stub.pyi").write_text(HAZARD)
    (project / "script").write_text(HAZARD)
    paths = {f["path"] for f in json_findings(run_cli(".", "--format", "json", cwd=project))}
    assert paths == {"model.py", "stub.pyi"}
    assert run_cli("script", cwd=project).returncode == 1


def test_version() -> None:
    completed = run_cli("--version")
    assert completed.stdout.decode().strip() == f"ckptlint {__version__}"


def test_console_script_is_installed(project: Path) -> None:
    executable = shutil.which("ckptlint") or str(Path(sys.executable).parent / "ckptlint")
    completed = subprocess.run([executable, "model.py", "-q"], cwd=project, capture_output=True)
    assert completed.returncode == 1 and completed.stdout.count(b"\n") == 2


def test_rules_lists_every_rule_and_explains_one() -> None:
    from ckptlint.rules import ALL_RULES

    listing = run_cli("rules").stdout.decode().splitlines()
    assert [line.split()[0] for line in listing] == [rule.code for rule in ALL_RULES]
    explained = run_cli("rules", "CKP101")
    text = explained.stdout.decode()
    assert explained.returncode == 0
    assert text.startswith("# CKP101: implicit-use-reentrant\n")
    assert "## Bad\n\n```python\nfrom torch.utils.checkpoint import checkpoint" in text
    assert "use_reentrant=False)\n```" in text
    unknown = run_cli("rules", "CKP999")
    assert unknown.returncode == 2 and b"unknown rule 'CKP999'" in unknown.stderr


def test_calls_subcommand_text(project: Path) -> None:
    completed = run_cli("calls", "model.py", cwd=project)
    assert completed.stdout.decode() == (
        "model.py:4:12: torch.utils.checkpoint.checkpoint region=block mode=reentrant (default) "
        'source="use_reentrant not passed: torch falls back to reentrant"\n'
    )


def test_module_entry_point_from_repo() -> None:
    completed = run_cli("fixtures/calls/import_torch.py", "-q")
    assert completed.stdout.decode().startswith("fixtures/calls/import_torch.py:6:12: CKP101")
    assert REPO.is_dir()


def test_readme_example_output_is_current() -> None:
    readme = (REPO / "README.md").read_text()
    start = readme.index("$ ckptlint examples/\n") + len("$ ckptlint examples/\n")
    shown = readme[start : readme.index("```", start)]
    assert run_cli("examples/").stdout.decode() == shown


def test_the_linter_never_imports_torch() -> None:
    """Every attempt to import torch is written down as it happens (the CLI ends the process
    without running anything after `main`)."""
    code = (
        "import sys\n"
        "class Watch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] == 'torch':\n"
        "            sys.stderr.write('imports torch\\n')\n"
        "        return None\n"
        "sys.meta_path.insert(0, Watch())\n"
        "from ckptlint.cli import main\n"
        "main(['fixtures/regions', '--quiet', '--exit-zero'])\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, timeout=300)
    assert completed.returncode == 0
    assert b"imports torch" not in completed.stderr
    assert b"CKP204" in completed.stdout


def test_a_lint_ends_without_the_interpreters_teardown_and_says_everything() -> None:
    """Collecting the parsed modules at exit cost 0.9 s of a 2.7 s re-lint: the CLI ends the
    process once the report is out. Nothing registered to run at exit runs; the whole report
    (every line of a long one, through a pipe) and the exit code still come out."""
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: sys.stderr.write('teardown ran\\n'))\n"
        "from ckptlint.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code, "fixtures/regions", "--format", "json", "--no-cache"], cwd=REPO, capture_output=True, timeout=300
    )
    assert completed.returncode == 1  # findings
    assert b"teardown ran" not in completed.stderr
    findings = json.loads(completed.stdout)
    assert findings == json.loads(run_cli("fixtures/regions", "--format", "json", "--no-cache").stdout)
    assert len(findings["findings"]) > 50
    help_run = subprocess.run([sys.executable, "-c", code, "rules"], cwd=REPO, capture_output=True, timeout=300)
    assert help_run.returncode == 0 and b"teardown ran" in help_run.stderr  # no lint: an ordinary exit


def test_the_command_line_lints_with_the_collector_paused_and_a_caller_in_process_keeps_it() -> None:
    """The process that `main` starts ends after the report, so the cyclic collector only
    rescans the analysis's trees (0.34 s of a 2 s re-lint of one transformers model after an
    edit): paused for the lint. A caller of the click commands in its own process (an editor's
    server, these tests) keeps its collector."""
    code = (
        "import gc, sys\n"
        "from ckptlint.engine import linter\n"
        "original = linter.Linter.lint_paths\n"
        "def watched(self, *args, **kwargs):\n"
        "    sys.stderr.write(f'collector on: {gc.isenabled()}\\n')\n"
        "    return original(self, *args, **kwargs)\n"
        "linter.Linter.lint_paths = watched\n"
        "from ckptlint.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    completed = subprocess.run([sys.executable, "-c", code, "fixtures/regions", "-q", "--no-cache"], cwd=REPO, capture_output=True, timeout=300)
    assert b"collector on: False" in completed.stderr and b"CKP204" in completed.stdout
    from click.testing import CliRunner

    from ckptlint.cli import cli

    result = CliRunner().invoke(cli, ["check", str(REPO / "fixtures/calls/import_torch.py"), "--no-cache", "-q"])
    assert "CKP101" in result.output
    assert gc.isenabled()


def test_a_profiled_lint_ends_as_usual_so_the_profile_is_written(tmp_path: Path) -> None:
    """`python -m cProfile -o FILE -m ckptlint` writes FILE at exit: no quick exit under a profiler or tracer."""
    profile = tmp_path / "lint.prof"
    command = [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "ckptlint", "fixtures/regions", "-q", "--no-cache"]
    completed = subprocess.run(command, cwd=REPO, capture_output=True, timeout=300)  # cProfile swallows the exit code
    assert b"CKP204" in completed.stdout
    assert profile.stat().st_size > 0


def test_top_level_help_lists_the_default_commands_options() -> None:
    completed = run_cli("--help")
    assert completed.returncode == 0
    text = completed.stdout.decode()
    assert "Commands:" in text and "Options of `ckptlint [check] PATHS...` (the default command):" in text
    for option in ("--select", "--format", "--fix", "--exit-zero", "--cache-dir"):
        assert option in text, option
