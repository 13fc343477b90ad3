"""Nothing the linter reads can crash it, and it never imports what it reads.

Pathological inputs get a CKP000 finding or a clear message and every other file is still
linted; an internal error in one file is reported with the file's name and a request to
report it, without losing the other files' findings.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ckptlint.calls import CallFinder
from ckptlint.config import Config
from ckptlint.engine import Linter
from ckptlint.engine.worker import WorkerState
from ckptlint.rules import ALL_RULES
from conftest import run_cli

GOOD = "from torch.utils.checkpoint import checkpoint\n\n\ndef f(block, x):\n    return checkpoint(block, x)\n"


def _deep(terms: int) -> str:
    return (
        "import random\nfrom torch.utils.checkpoint import checkpoint\n\n\ndef block(x):\n"
        f"    return x{' + x' * terms} + random.random()\n\n\n"
        "def forward(x):\n    return checkpoint(block, x)\n"
    )


def _by_file(completed) -> dict[str, list[tuple[str, str]]]:
    found: dict[str, list[tuple[str, str]]] = {}
    for finding in json.loads(completed.stdout)["findings"]:
        found.setdefault(finding["path"], []).append((finding["code"], finding["summary"]))
    return found


def test_deeply_nested_expressions(tmp_path: Path) -> None:
    (tmp_path / "shallow.py").write_text(_deep(500))
    (tmp_path / "deep.py").write_text(_deep(5_000))  # parses, deeper than the analysis follows
    (tmp_path / "deeper.py").write_text(_deep(100_000))  # deeper than the parser builds
    (tmp_path / "good.py").write_text(GOOD)
    completed = run_cli("--no-cache", "--format", "json", ".", cwd=tmp_path)  # json: the libcst fixes run too
    assert completed.returncode == 1, completed.stderr
    found = _by_file(completed)
    assert sorted(code for code, _ in found["shallow.py"]) == ["CKP101", "CKP201"]
    [(code, summary)] = found["deep.py"]
    assert code == "CKP000" and "nested more deeply than ckptlint follows" in summary
    [(code, summary)] = found["deeper.py"]
    assert code == "CKP000" and "nested too deeply for the Python parser" in summary
    assert found["good.py"] == [("CKP101", found["good.py"][0][1])]


def test_a_file_of_several_megabytes(tmp_path: Path) -> None:
    filler = "".join(f"def helper_{i}(x):\n    return x + {i}\n\n\n" for i in range(120_000))
    (tmp_path / "huge.py").write_text(filler + _deep(1))
    assert (tmp_path / "huge.py").stat().st_size > 4_000_000
    completed = run_cli("--no-cache", "--format", "json", "huge.py", cwd=tmp_path)
    assert completed.returncode == 1, completed.stderr
    assert sorted(code for code, _ in _by_file(completed)["huge.py"]) == ["CKP101", "CKP201"]


def test_newer_python_syntax_is_read_on_older_pythons(tmp_path: Path) -> None:
    """Not a CKP000 on any supported Python (libcst reads it: tests/test_newer_syntax.py)."""
    (tmp_path / "generic.py").write_text("type Pair[T] = tuple[T, T]\n\n\ndef first[T](pair: Pair[T]) -> T:\n    return pair[0]\n")
    (tmp_path / "good.py").write_text(GOOD)
    completed = run_cli("--no-cache", "--format", "json", ".", cwd=tmp_path)
    found = _by_file(completed)
    assert "generic.py" not in found
    assert [code for code, _ in found["good.py"]] == ["CKP101"]


def test_a_file_that_vanishes_after_discovery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "flaky.py").write_text(GOOD)
    real_read_bytes = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self.name == "flaky.py":  # stat worked; the file is gone when it is read
            raise FileNotFoundError(2, "No such file or directory", str(self))
        return real_read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    result = Linter(Config(root=tmp_path), base=tmp_path).lint_files([tmp_path / "good.py", tmp_path / "flaky.py", tmp_path / "gone.py"])
    assert sorted((p.path, p.message) for p in result.problems) == [
        ("flaky.py", "cannot read file: No such file or directory"),
        ("gone.py", "cannot read file: No such file or directory"),
    ]
    assert [(f.path, f.code) for f in result.findings] == [("good.py", "CKP101")]


def test_an_internal_error_names_the_file_and_keeps_the_other_findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "boom.py").write_text(GOOD)
    real = CallFinder.checkpoint_calls

    def checkpoint_calls(self, module):  # noqa: ANN001, ANN202
        if module.name == "boom":
            raise ZeroDivisionError("a bug in ckptlint")
        return real(self, module)

    monkeypatch.setattr(CallFinder, "checkpoint_calls", checkpoint_calls)
    result = Linter(Config(root=tmp_path), base=tmp_path).lint_files([tmp_path / "boom.py", tmp_path / "good.py"])
    [problem] = result.problems
    assert problem.path == "boom.py" and problem.fatal
    assert "internal error while analysing this file (ZeroDivisionError: a bug in ckptlint)" in problem.message
    assert "Please report it at https://github.com/ckptlint/ckptlint/issues" in problem.message
    assert [(f.path, f.code) for f in result.findings] == [("good.py", "CKP101")]


def test_an_internal_error_in_a_file_that_adds_names_is_reported_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file whose analysis adds checkpoint names (a checkpointing layer class, a partial) and
    mentions a word of the code around checkpointed models (`gradient_checkpointing`), then
    fails, was keyed without that word and selected again with it, without end."""
    (tmp_path / "boom.py").write_text(
        "import functools\nfrom torch.utils.checkpoint import checkpoint\n"
        "from transformers.modeling_layers import GradientCheckpointingLayer\n\n"
        "ckpt = functools.partial(checkpoint, use_reentrant=False)\n\n\n"
        "class Layer(GradientCheckpointingLayer):\n    gradient_checkpointing = True\n\n    def forward(self, x):\n        return ckpt(abs, x)\n"
    )
    analysed: list[str] = []
    real = WorkerState.analyse

    def analyse(self, path):  # noqa: ANN001, ANN202
        analysed.append(path)
        assert len(analysed) < 10, "analysed again and again"
        return real(self, path)

    def rules_fail(self, context):  # noqa: ANN001, ANN202
        raise ZeroDivisionError("a bug in ckptlint")

    monkeypatch.setattr(WorkerState, "analyse", analyse)
    monkeypatch.setattr(ALL_RULES[0].__class__, "check", rules_fail)
    result = Linter(Config(root=tmp_path), base=tmp_path).lint_files([tmp_path / "boom.py"])
    assert [p.path for p in result.problems] == ["boom.py"]
    assert len(analysed) <= 2  # once, and once more when its names joined the run's


def test_the_cli_reports_an_internal_error_and_exits_two(tmp_path: Path) -> None:
    """The same through the command line, with the error raised inside the analysis."""
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "boom.py").write_text(GOOD)
    (tmp_path / "sitecustomize.py").write_text(
        "import ckptlint.calls as calls\n"
        "real = calls.CallFinder.checkpoint_calls\n"
        "def broken(self, module):\n"
        "    if module.name == 'boom':\n"
        "        raise ZeroDivisionError('a bug in ckptlint')\n"
        "    return real(self, module)\n"
        "calls.CallFinder.checkpoint_calls = broken\n"
    )
    completed = run_cli("--no-cache", "boom.py", "good.py", cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert completed.returncode == 2
    assert b"ckptlint: error: boom.py: internal error while analysing this file" in completed.stderr
    assert b"good.py:5:12: CKP101" in completed.stdout


def test_the_linted_code_is_never_imported_or_run(tmp_path: Path) -> None:
    marker = tmp_path / "IMPORTED"
    evil = f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n\n\ndef block(x):\n    return x\n"
    (tmp_path / "evil.py").write_text(evil)
    (tmp_path / "model.py").write_text(
        "import evil\nfrom evil import block\nfrom torch.utils.checkpoint import checkpoint\n\n\n"
        "def forward(x):\n    return checkpoint(block, x) + checkpoint(evil.block, x)\n"
    )
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\n")
    completed = run_cli("--no-cache", "model.py", cwd=tmp_path)
    assert completed.returncode == 1 and b"CKP101" in completed.stdout
    result = Linter(Config(root=tmp_path), base=tmp_path).lint_files([tmp_path / "model.py"], project_root=tmp_path)
    assert [f.code for f in result.findings] == ["CKP101", "CKP101"]
    assert not marker.exists()
    assert "evil" not in sys.modules and "model" not in sys.modules


def test_checkpoint_call_inside_a_lambda_is_no_internal_error(tmp_path: Path) -> None:
    """A checkpoint call whose enclosing scope is a lambda (its body is one expression, not
    statements) once crashed the training-step pass with an internal error."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "step.py").write_text(
        "import torch\nfrom torch.utils.checkpoint import checkpoint\n\n\n"
        "def run(x, reentrant, transform):\n"
        "    block = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh())\n"
        "    region = lambda v: checkpoint(block, v, use_reentrant=reentrant)  # noqa: E731\n"
        "    if transform == 'grad':\n"
        "        torch.func.grad(lambda v: region(v).sum())(x)\n"
    )
    completed = run_cli("step.py", "--no-cache", cwd=tmp_path)
    assert "internal error" not in completed.stderr.decode(), completed.stderr.decode()
    assert completed.returncode in (0, 1), completed.stderr.decode()


def test_a_module_level_name_rebound_to_its_own_attribute_is_no_endless_alias(tmp_path: Path) -> None:
    """`model = model.module` at module level (unwrapping DDP in a script) once made name
    resolution follow `model` to `model.module`, then to `model.module.module`, for ever."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "model = DDP(torch.nn.Linear(3, 3), find_unused_parameters=True)\n"
        "model = model.module\n"
        "model.forward(torch.ones(3))\n"
    )
    completed = run_cli("train.py", "--no-cache", cwd=tmp_path, timeout=60)
    assert completed.returncode == 0, completed.stdout.decode() + completed.stderr.decode()


def test_a_module_registered_from_a_getattr_on_itself_is_analysed(tmp_path: Path) -> None:
    """transformers' Trainer re-registers attributes read back with `getattr(self, name)`:
    the lookup asked for the modules the class registers, whose value is that lookup again.
    It recursed until Python's limit and the file came back as CKP000, unchecked."""
    (tmp_path / "train.py").write_text(
        "import random\n"
        "import torch\n"
        "from torch.utils.checkpoint import checkpoint\n"
        "\n"
        "\n"
        "class Block(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x * random.random()\n"
        "\n"
        "\n"
        "class Model(torch.nn.Module):\n"
        "    def __init__(self, names):\n"
        "        super().__init__()\n"
        "        self.block = Block()\n"
        "        for name in names:\n"
        "            self.add_module(name, getattr(self, name))\n"
        "\n"
        "    def forward(self, x, name):\n"
        "        return checkpoint(getattr(self, name), x, use_reentrant=False)\n"
    )
    completed = run_cli("train.py", "--no-cache", "--format", "json", cwd=tmp_path, timeout=120)
    findings = json.loads(completed.stdout)["findings"]
    assert [(f["code"], f["line"]) for f in findings] == [("CKP201", 8)], completed.stderr
