"""Fixes and noqa edits as a user applies them: --fix, --unsafe-fixes, --diff, --add-noqa,
--report-unused-noqa. Round trips on real files, and the fixed code run under torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import run_cli

BEFORE = '''\
import torch
from torch.utils.checkpoint import checkpoint, checkpoint_sequential


def block(x):
    return torch.sin(x) * 2


def forward(x, options):
    y = checkpoint(  # the first block
        block,
        x,
    )
    y = checkpoint(block, y, **options)  # may carry use_reentrant: left alone
    y = checkpoint(block, y, use_reentrant=None)
    y = checkpoint_sequential([torch.nn.Identity(), torch.nn.Tanh()], 2, y)
    return checkpoint(block, y, preserve_rng_state=True)
'''

SAFE = '''\
import torch
from torch.utils.checkpoint import checkpoint, checkpoint_sequential


def block(x):
    return torch.sin(x) * 2


def forward(x, options):
    y = checkpoint(  # the first block
        block,
        x,
        use_reentrant=True,
    )
    y = checkpoint(block, y, **options)  # may carry use_reentrant: left alone
    y = checkpoint(block, y, use_reentrant=True)
    y = checkpoint_sequential([torch.nn.Identity(), torch.nn.Tanh()], 2, y, use_reentrant=True)
    return checkpoint(block, y, preserve_rng_state=True, use_reentrant=True)
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\n")
    (tmp_path / "model.py").write_text(BEFORE)
    return tmp_path


def test_safe_fix_round_trip_keeps_layout_and_comments(project: Path) -> None:
    completed = run_cli("--fix", "model.py", cwd=project)
    assert completed.returncode == 0, completed.stdout
    assert (project / "model.py").read_text() == SAFE
    assert b"Fixed 4 findings." in completed.stderr
    again = run_cli("--fix", "model.py", cwd=project)  # idempotent
    assert again.returncode == 0 and b"Fixed" not in again.stderr
    assert (project / "model.py").read_text() == SAFE


def test_unsafe_fixes_choose_use_reentrant_false(project: Path) -> None:
    assert run_cli("--fix", "--unsafe-fixes", "model.py", cwd=project).returncode == 0
    assert (project / "model.py").read_text() == SAFE.replace("use_reentrant=True", "use_reentrant=False")


def test_diff_writes_nothing_and_exits_one(project: Path) -> None:
    completed = run_cli("--diff", "model.py", cwd=project)
    assert completed.returncode == 1
    diff = completed.stdout.decode()
    assert diff.startswith("--- a/model.py\n+++ b/model.py\n")
    assert "+        use_reentrant=True,\n" in diff and "-    y = checkpoint(block, y, use_reentrant=None)\n" in diff
    assert (project / "model.py").read_text() == BEFORE
    (project / "model.py").write_text(SAFE)
    clean = run_cli("--diff", "model.py", cwd=project)
    assert clean.returncode == 0 and clean.stdout == b""


def test_remaining_findings_are_reported_after_fixing(project: Path) -> None:
    (project / "model.py").write_text(BEFORE.replace("preserve_rng_state=True", "preserve_rng_state=False"))
    completed = run_cli("--fix", "model.py", cwd=project)
    assert completed.returncode == 1
    assert [line.split()[1] for line in completed.stdout.decode().splitlines()[:-1]] == ["CKP102"]


def test_stdin_fix_prints_the_fixed_file(project: Path) -> None:
    completed = run_cli("--fix", "-", "--stdin-filename", "model.py", cwd=project, input=BEFORE.encode())
    assert completed.returncode == 0
    assert completed.stdout.decode() == SAFE
    assert (project / "model.py").read_text() == BEFORE  # the file on disk is not the input


def test_fix_keeps_encoding_bom_and_line_endings(tmp_path: Path) -> None:
    latin = "# -*- coding: latin-1 -*-\nfrom torch.utils.checkpoint import checkpoint\n\n\ndef f(b, x):\n    s = 'café'; return checkpoint(b, x)\n"
    (tmp_path / "latin.py").write_bytes(latin.replace("\n", "\r\n").encode("latin-1"))
    bom = "from torch.utils.checkpoint import checkpoint\n\n\ndef f(b, x):\n    return checkpoint(b, x)\n"
    (tmp_path / "bom.py").write_bytes(b"\xef\xbb\xbf" + bom.encode())
    assert run_cli("--fix", "latin.py", "bom.py", cwd=tmp_path).returncode == 0
    expected = latin.replace("checkpoint(b, x)", "checkpoint(b, x, use_reentrant=True)")
    assert (tmp_path / "latin.py").read_bytes() == expected.replace("\n", "\r\n").encode("latin-1")
    assert (tmp_path / "bom.py").read_bytes() == b"\xef\xbb\xbf" + bom.replace("checkpoint(b, x)", "checkpoint(b, x, use_reentrant=True)").encode()


def test_fix_leaves_files_it_cannot_parse(tmp_path: Path) -> None:
    broken = "from torch.utils.checkpoint import checkpoint\ncheckpoint(f, x\n"
    (tmp_path / "broken.py").write_text(broken)
    completed = run_cli("--fix", "broken.py", cwd=tmp_path)
    assert completed.returncode == 1 and b"CKP000" in completed.stdout
    assert (tmp_path / "broken.py").read_text() == broken


_RUN_FIXED = """
import warnings
warnings.simplefilter("error")  # a use_reentrant warning fails the run
import torch
sys_path = {path!r}
import importlib.util
spec = importlib.util.spec_from_file_location("model", sys_path)
model = importlib.util.module_from_spec(spec)
spec.loader.exec_module(model)
x = torch.ones(3, requires_grad=True)
y = model.forward(x, {{"use_reentrant": False}})
y.sum().backward()
print(repr(x.grad.tolist()))
"""


def _run_model(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _RUN_FIXED.format(path=str(path))], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("flags", [["--fix"], ["--fix", "--unsafe-fixes"]], ids=["safe", "unsafe"])
def test_fixed_code_runs_under_torch_without_warning_or_type_error(project: Path, flags: list[str]) -> None:
    pytest.importorskip("torch")
    original = _run_model(project / "model.py")
    assert original.returncode != 0 and "use_reentrant parameter should be passed explicitly" in original.stderr
    assert run_cli(*flags, "model.py", cwd=project).returncode == 0
    fixed = _run_model(project / "model.py")
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout.strip().startswith("[")


def test_adding_the_keyword_next_to_kwargs_would_raise(project: Path) -> None:
    """What TorchFix does to `checkpoint(f, x, **kwargs)`, and why ckptlint never does it."""
    pytest.importorskip("torch")
    naive = SAFE.replace("**options)", "**options, use_reentrant=True)")
    (project / "model.py").write_text(naive)
    completed = _run_model(project / "model.py")
    assert "got multiple values for keyword argument 'use_reentrant'" in completed.stderr


NOQA_BEFORE = textwrap.dedent(
    '''\
    import random
    from torch.utils.checkpoint import checkpoint


    def block(x):
        return x * random.random()  # noqa: E501


    def forward(x):
        y = checkpoint(  # keep me
            block,
            x,
        )
        s = """
        text"""; z = checkpoint(block, y, preserve_rng_state=False)
        return z
    '''
)


def test_add_noqa_silences_every_finding_and_is_idempotent(project: Path) -> None:
    (project / "model.py").write_text(NOQA_BEFORE)
    completed = run_cli("--add-noqa", "model.py", cwd=project)
    assert completed.returncode == 0
    assert b"Added noqa comments for 4 findings in 1 file." in completed.stderr
    text = (project / "model.py").read_text()
    assert "return x * random.random()  # noqa: E501,CKP201\n" in text
    assert "y = checkpoint(  # keep me  # noqa: CKP101\n" in text
    assert 'text"""; z = checkpoint(block, y, preserve_rng_state=False)  # noqa: CKP101,CKP102\n' in text
    assert run_cli("model.py", cwd=project).returncode == 0
    assert run_cli("--add-noqa", "model.py", cwd=project).returncode == 0
    assert (project / "model.py").read_text() == text
    # and none of the added codes is unused
    assert run_cli("--report-unused-noqa", "model.py", cwd=project).returncode == 0


def test_add_noqa_from_stdin_prints_the_text(project: Path) -> None:
    completed = run_cli("--add-noqa", "-", cwd=project, input=NOQA_BEFORE.encode())
    assert completed.returncode == 0
    assert "# noqa: E501,CKP201" in completed.stdout.decode()


def test_report_unused_noqa(project: Path) -> None:
    source = (
        "from torch.utils.checkpoint import checkpoint\n"
        "\n"
        "\n"
        "def f(b, x):\n"
        "    y = checkpoint(b, x, use_reentrant=False)  # noqa: CKP101, E501\n"
        "    return checkpoint(b, y)  # noqa: CKP101,CKP201\n"
    )
    (project / "model.py").write_text(source)
    assert run_cli("model.py", cwd=project).returncode == 0  # off by default
    completed = run_cli("--report-unused-noqa", "model.py", cwd=project)
    assert completed.returncode == 1
    lines = completed.stdout.decode().splitlines()[:-1]
    assert [line.split(" ", 2)[:2] for line in lines] == [["model.py:5:48:", "CKP001"], ["model.py:6:30:", "CKP001"]]
    assert "CKP101" in lines[0] and "CKP201" in lines[1] and "E501" not in completed.stdout.decode()
    (project / "pyproject.toml").write_text("[tool.ckptlint]\nreport-unused-noqa = true\n")
    assert run_cli("model.py", cwd=project).returncode == 1
    assert run_cli("--ignore", "CKP001", "model.py", cwd=project).returncode == 0


FROZEN_BASE = '''import torch
from torch.utils.checkpoint import checkpoint


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(100, 16)
        self.embed.requires_grad_(False)
        self.block = torch.nn.Linear(16, 16)

    def forward(self, ids):
        return checkpoint(self.block, self.embed(ids))
'''


def test_no_safe_fix_keeps_reentrant_mode_where_gradients_already_fail(tmp_path: Path) -> None:
    """CKP101's safe fix (`use_reentrant=True`) keeps today's behaviour; where CKP301 says that
    behaviour loses the region's gradients, only the unsafe `use_reentrant=False` is offered."""
    (tmp_path / "model.py").write_text(FROZEN_BASE)
    safe = run_cli("--fix", "model.py", cwd=tmp_path)
    assert (tmp_path / "model.py").read_text() == FROZEN_BASE
    assert "CKP101" in safe.stdout.decode() and "CKP301" in safe.stdout.decode()
    assert run_cli("--fix", "--unsafe-fixes", "model.py", cwd=tmp_path).returncode == 0
    fixed = (tmp_path / "model.py").read_text()
    assert fixed == FROZEN_BASE.replace("self.embed(ids))", "self.embed(ids), use_reentrant=False)")
