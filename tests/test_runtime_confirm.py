"""`ckptlint confirm`, `python -m ckptlint.runtime`, the join with static findings, the pytest plugin."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, run_cli

PROJECT = "fixtures/runtime/project"
EXPECTED = {
    ("CKP201", 17): "confirmed",
    ("CKP203", 18): "confirmed",
    ("CKP204", 19): "confirmed",
    ("CKP203", 42): "not triggered as driven",
    ("CKP201", 52): "not exercised",
    ("CKP101", 64): "confirmed",
    ("CKP102", 67): "confirmed",
}


def _statuses(report: dict) -> dict[tuple[str, int], str]:
    return {(f["code"], f["line"]): f["status"] for f in report["findings"]}


def test_confirm_joins_linted_findings(tmp_path: Path) -> None:
    report_file = tmp_path / "report.json"
    completed = run_cli("confirm", "--lint", PROJECT, "--report", str(report_file), f"{PROJECT}/train.py")
    assert completed.returncode == 3  # the script's own exit code
    assert completed.stdout == b"step done\n"  # the script's own output
    report = json.loads(report_file.read_text())
    assert _statuses(report) == EXPECTED
    missed = {(m["category"], m["region"]) for m in report["missed"]}
    assert missed == {("input-grad", "Noisy.forward"), ("parameter-grad", "Noisy.forward"), ("rng-python", "Noisy.forward")}
    verdicts = {(r["region"]["name"], r["verdict"]) for r in report["records"]}
    assert verdicts == {
        ("Block.forward", "diverges"),
        ("Noisy.forward", "diverges"),
        ("Shape.forward", "equivalent"),
        ("Model.forward.<locals>.<lambda>", "diverges"),
    }
    block = next(r for r in report["records"] if r["region"]["name"] == "Block.forward")
    assert block["site"]["line"] == 64 and block["site"]["path"].endswith("fixtures/runtime/project/model.py")
    assert block["flags"]["use_reentrant"] is True and block["flags"]["use_reentrant_defaulted"] is True
    assert block["api"] == "reentrant" and block["device"] == "cpu"
    assert (block["region"]["first_line"], block["region"]["last_line"]) == (16, 19)
    text = completed.stderr.decode()
    assert "fixtures/runtime/project/model.py:52:41: CKP201 not exercised" in text
    assert "missed by static analysis: rng-python diverges in Noisy.forward" in text


def test_confirm_joins_findings_from_a_file(tmp_path: Path) -> None:
    findings = tmp_path / "findings.json"
    lint = run_cli(PROJECT, "--format", "json", "-o", str(findings))
    assert lint.returncode == 1
    report_file = tmp_path / "report.json"
    completed = run_cli("confirm", "--findings", str(findings), "--report", str(report_file), f"{PROJECT}/train.py")
    assert completed.returncode == 3
    assert _statuses(json.loads(report_file.read_text())) == EXPECTED


def test_confirm_runs_a_module_and_python_dash_m_entry(tmp_path: Path) -> None:
    script = tmp_path / "stepper.py"
    script.write_text(
        "import sys, torch\n"
        "from torch.utils.checkpoint import checkpoint\n"
        "lin = torch.nn.Linear(3, 3)\n"
        "checkpoint(lin, torch.randn(2, 3, requires_grad=True), use_reentrant=False).sum().backward()\n"
        "print('args', sys.argv[1:])\n"
    )
    as_module = run_cli("confirm", "--report", "r.json", "-m", "stepper", "--flag", "x", cwd=tmp_path)
    assert as_module.returncode == 0, as_module.stderr
    assert as_module.stdout == b"args ['--flag', 'x']\n"
    assert json.loads((tmp_path / "r.json").read_text())["records"][0]["verdict"] == "equivalent"
    entry = subprocess.run(
        [sys.executable, "-m", "ckptlint.runtime", str(script), "y"], cwd=tmp_path, capture_output=True, timeout=300
    )
    assert entry.returncode == 0 and entry.stdout == b"args ['y']\n"
    assert b"1 checkpoint call(s) observed: 1 equivalent" in entry.stderr


def test_confirm_usage_errors() -> None:
    assert b"confirm needs a SCRIPT" in run_cli("confirm").stderr
    bad = run_cli("confirm", "--sample", "sometimes", "x.py")
    assert bad.returncode == 2 and b"--sample" in bad.stderr
    both = run_cli("confirm", "--findings", "README.md", "--lint", ".", "x.py")
    assert both.returncode == 2 and b"alternatives" in both.stderr


def test_confirm_a_script_or_module_that_is_not_there_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """A usage error, not a traceback and 1, which is confirm's `a call diverged`."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "broken.py").write_text("import not_installed_anywhere\n")
    cases = {
        ("confirm", "trian.py", "--lr", "3"): "confirm: can't open file 'trian.py': No such file or directory",
        ("confirm", "pkg"): "confirm: can't find '__main__' module in 'pkg'",
        ("confirm", "-m", "trian"): "confirm -m: no module named 'trian'",
        ("confirm", "-m", "pkg.trian"): "confirm -m: no module named 'pkg.trian'",
        ("confirm", "-m", "nopkg.train"): "confirm -m: no module named 'nopkg'",
        ("confirm", "-m", "pkg"): "confirm -m: 'pkg' is a package without a __main__ module, so it cannot be run",
    }
    for command, line in cases.items():
        completed = run_cli(*command, cwd=tmp_path)
        assert (completed.returncode, completed.stdout, completed.stderr.decode()) == (2, b"", f"ckptlint: error: {line}\n"), command
    entry = subprocess.run([sys.executable, "-m", "ckptlint.runtime", "trian.py"], cwd=tmp_path, capture_output=True, timeout=300)
    assert (entry.returncode, entry.stderr.decode()) == (2, "ckptlint: error: confirm: can't open file 'trian.py': No such file or directory\n")
    # a module that is there but imports one that is not fails as the program, as under python -m
    own_failure = run_cli("confirm", "-m", "pkg.broken", cwd=tmp_path)
    assert own_failure.returncode == 1 and b"ModuleNotFoundError: No module named 'not_installed_anywhere'" in own_failure.stderr


def _readme_runtime_install_line() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Installing") :]
    section = section[section.index("The runtime companion needs torch") :]
    block = section[section.index("```sh\n") + len("```sh\n") : section.index("```", section.index("```sh\n") + 5)]
    (line,) = block.strip().splitlines()
    return line


def test_confirm_without_torch_gives_the_readme_install_line(tmp_path: Path) -> None:
    """`pip install 'ckptlint[runtime]'` cannot work while ckptlint is not on PyPI."""
    (tmp_path / "train.py").write_text("print('the script ran')\n")
    no_torch = "import sys\nsys.modules['torch'] = None  # import torch fails\nfrom ckptlint.cli import main\nmain(['confirm', 'train.py'])\n"
    completed = subprocess.run([sys.executable, "-c", no_torch], cwd=tmp_path, capture_output=True, timeout=300)
    assert completed.returncode == 2 and completed.stdout == b""
    (line,) = completed.stderr.decode().splitlines()
    assert line.startswith("ckptlint: error: the runtime companion needs torch (")
    assert line.endswith(": " + _readme_runtime_install_line() + " (README.md, Installing)")


def test_the_runtime_extra_brings_numpy() -> None:
    """torch 2.14/2.15 warn `Failed to initialize NumPy` at import without it."""
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert "numpy" in extras["runtime"]


# torch laid out in a way the companion does not know, before anything of ckptlint runs
BREAK_TORCH = "import torch.utils.checkpoint as cp\ncp.CheckpointFunction.apply = object()\n"
REFUSAL = (
    "ckptlint's runtime companion does not support torch {version}: "
    "torch.utils.checkpoint.CheckpointFunction.apply is an object of type 'object'; please report it"
)


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def test_confirm_refuses_an_unknown_torch_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(BREAK_TORCH)
    (tmp_path / "train.py").write_text("print('the script ran')\n")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), str(REPO), os.environ.get("PYTHONPATH")]))}
    for command in (["confirm", "train.py"], ["confirm", "--lint", "train.py", "train.py"]):
        completed = run_cli(*command, cwd=tmp_path, env=env)
        assert completed.returncode == 2
        assert completed.stdout == b""  # refused before the script ran
        assert completed.stderr.decode() == "ckptlint: error: " + REFUSAL.format(version=_torch_version()) + "\n"


TEST_FILE = '''
import random, torch
from torch.utils.checkpoint import checkpoint

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
    def forward(self, x):
        return torch.tanh(self.lin(x) * random.random())

def test_diverging():
    checkpoint(Block(), torch.randn(2, 3, requires_grad=True), use_reentrant=False).sum().backward()

def test_clean():
    checkpoint(torch.nn.Linear(3, 3), torch.randn(2, 3, requires_grad=True), use_reentrant=False).sum().backward()
'''


def _plugin() -> tuple[str, ...]:
    """Load the plugin by name where ckptlint is not installed (a venv that has only PYTHONPATH,
    as benchmarks/torch_versions.py runs); where its entry point exists, a second `-p` would clash."""
    installed = any(e.value == "ckptlint.pytest_plugin" for e in importlib.metadata.entry_points(group="pytest11"))
    return () if installed else ("-p", "ckptlint.pytest_plugin")


def test_pytest_plugin_strict_fails_tests_that_diverge(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_model=TEST_FILE)
    result = pytester.runpytest_subprocess(*_plugin(), "--ckptlint-confirm=strict", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_diverging*", "*ckptlint: checkpointing changes the result*"])
    result.stdout.fnmatch_lines(["*2 checkpoint call(s) probed: 1 equivalent, 1 diverging, 0 error*"])


def test_pytest_plugin_report_mode_passes_and_reports(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_model=TEST_FILE)
    result = pytester.runpytest_subprocess(*_plugin(), "--ckptlint-confirm", "-p", "no:cacheprovider", "-rA")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_model.py::test_diverging: *diverges*"])


@pytest.mark.parametrize(("flags", "failed"), [(["--ckptlint-confirm"], 0), (["--ckptlint-strict"], 1), (["--ckptlint-confirm=strict"], 1)])
def test_pytest_plugin_options_do_not_swallow_the_test_path(pytester: pytest.Pytester, flags: list[str], failed: int) -> None:
    pytester.makepyfile(test_model=TEST_FILE)
    pytester.makepyfile(test_other="def test_never_collected():\n    assert False\n")
    result = pytester.runpytest_subprocess(*_plugin(), *flags, "test_model.py", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2 - failed, failed=failed)  # test_model.py only: the path is a path


def test_pytest_plugin_refuses_an_unknown_torch_in_one_line(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(BREAK_TORCH)
    pytester.makepyfile(test_model=TEST_FILE)
    result = pytester.runpytest_subprocess(*_plugin(), "--ckptlint-confirm=strict", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    # other plugins may warn on stderr (pytest-asyncio's config warning): the refusal is the one error line
    assert [line for line in result.errlines if "ERROR" in line or "rror:" in line] == [
        "ERROR: --ckptlint-confirm: " + REFUSAL.format(version=_torch_version())
    ]
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_pytest_plugin_is_dormant_without_the_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_model="import sys\ndef test_no_torch():\n    assert 'ckptlint.runtime' not in sys.modules\n")
    pytester.runpytest_subprocess(*_plugin(), "-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_confirm_exits_1_when_a_call_diverges_unless_exit_zero(tmp_path: Path) -> None:
    script = tmp_path / "noisy.py"
    script.write_text(
        "import random\nimport torch\nfrom torch.utils.checkpoint import checkpoint\n\n"
        "def region(x):\n    return x * random.random()\n\n"
        "x = torch.randn(3, requires_grad=True)\ncheckpoint(region, x, use_reentrant=True).sum().backward()\n"
    )
    diverging = run_cli("confirm", str(script), cwd=tmp_path)
    assert diverging.returncode == 1 and b"diverges" in diverging.stderr, diverging.stderr.decode()
    assert run_cli("confirm", "--exit-zero", str(script), cwd=tmp_path).returncode == 0


def test_the_shipped_example_says_what_its_crash_demonstrates() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "tinygpt.train"], cwd=REPO / "examples", capture_output=True, timeout=300
    )
    assert completed.returncode == 1
    message = completed.stderr.decode().strip().splitlines()[-1]
    assert message.startswith("tinygpt.train: step 2 failed as ckptlint predicts (CKP202 at tinygpt/blocks.py:32)"), message
    assert "Traceback" not in completed.stderr.decode()


def test_confirm_script_sees_what_python_script_sees(tmp_path: Path) -> None:
    """`confirm path/to/train.py ARGS` is `python path/to/train.py ARGS`: the script's directory
    first on sys.path (a sibling module imports), `__name__ == "__main__"`, argv, exit status."""
    project = tmp_path / "project" / "scripts"
    project.mkdir(parents=True)
    (project / "helpers.py").write_text("VALUE = 'sibling imported'\n")
    (project / "train.py").write_text(
        "import sys\nimport helpers\n"
        "print(helpers.VALUE, __name__, sys.argv, sys.path[0].endswith('scripts'))\n"
        "sys.exit(int(sys.argv[-1]))\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = os.path.join("..", "project", "scripts", "train.py")

    python = subprocess.run([sys.executable, script, "--lr", "4"], cwd=elsewhere, capture_output=True, timeout=300)
    confirmed = run_cli("confirm", script, "--lr", "4", cwd=elsewhere)

    assert python.stdout == b"sibling imported __main__ ['../project/scripts/train.py', '--lr', '4'] True\n"
    assert (confirmed.returncode, confirmed.stdout) == (python.returncode, python.stdout) == (4, python.stdout)
