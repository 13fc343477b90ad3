"""Version tests decided by the library versions the code runs with: the arm an older torch would
take runs nothing here (analysis/semantics/version_tests.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ckptlint.analysis.semantics.version_tests import version_test
from ckptlint.project import Project
from ckptlint.versions import LibraryVersion, Versions
from conftest import json_findings, run_cli

SOURCE = '''import torch
import torch.distributed as dist
from packaging import version
from torch.utils.checkpoint import checkpoint

torch_version_above_1_13 = version.parse(torch.__version__) >= version.parse("1.13.0")


def reduce_scatter(output, x, group):
    if torch_version_above_1_13:
        return dist.reduce_scatter_tensor(output, x, group=group)
    else:
        return dist._reduce_scatter_base(output, x, group=group)


def gather(out, x):
    if version.parse(torch.__version__) < version.parse("3.0"):
        return dist.all_gather_into_tensor(out, x)
    else:
        return dist.all_gather(out, x)


class Block(torch.nn.Module):
    def forward(self, x, out):
        reduce_scatter(out, x, None)
        return gather(out, x)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x, out):
        return checkpoint(self.block, x, out, use_reentrant=False)
'''


def _lines(tmp_path: Path, dependencies: str) -> list[int]:
    """CKP401 lines with torch known only from the project's pins: the stand-in interpreter names
    an empty site-packages, so the machine's own torch is not read."""
    interpreter = tmp_path / "bin" / "python"
    interpreter.parent.mkdir()
    (tmp_path / "site-packages").mkdir()
    interpreter.write_text('#!/bin/sh\nprintf \'["%s/site-packages"]\\n\' "$(cd "$(dirname "$0")/.." && pwd)"\n', encoding="utf-8")
    interpreter.chmod(0o755)
    (tmp_path / "pyproject.toml").write_text(
        f'[project]\nname = "demo"\ndependencies = [{dependencies}]\n\n[tool.ckptlint]\npython = "bin/python"\n', encoding="utf-8"
    )
    (tmp_path / "dist_utils.py").write_text(SOURCE, encoding="utf-8")
    completed = run_cli("--no-cache", "--format", "json", "dist_utils.py", cwd=tmp_path)
    return sorted(f["line"] for f in json_findings(completed) if f["code"] == "CKP401")


def test_a_pinned_torch_decides_the_version_arms(tmp_path: Path) -> None:
    assert _lines(tmp_path, '"torch>=2.1,<3"') == [11, 18]


def test_an_open_range_decides_only_what_it_bounds(tmp_path: Path) -> None:
    assert _lines(tmp_path, '"torch>=2.1"') == [11, 18, 20]  # `< 3.0` may be either


def test_without_a_known_version_both_arms_count(tmp_path: Path) -> None:
    assert _lines(tmp_path, '"numpy"') == [11, 13, 18, 20]


@pytest.mark.parametrize(
    ("test", "low", "high", "expected"),
    [
        ('version.parse(torch.__version__) >= version.parse("1.13")', (2, 1), None, True),
        ('version.parse(torch.__version__) < version.parse("1.13")', (2, 1), None, False),
        ('version.parse("2.0") <= version.parse(torch.__version__)', (2, 1), None, True),
        ('version.parse(torch.__version__) >= version.parse("2.5")', (2, 1), None, None),
        ('version.parse(torch.__version__) >= version.parse("2.5")', (2, 1), (2, 4), False),
        ('version.parse(torch.__version__) > version.parse("2.1")', (2, 1), (2, 1), False),
        ('version.parse(numpy.__version__) >= version.parse("1.0")', (2, 1), None, None),
    ],
)
def test_version_comparisons(tmp_path: Path, test: str, low: tuple[int, ...], high: tuple[int, ...] | None, expected: bool | None) -> None:
    (tmp_path / "m.py").write_text(f"import numpy\nimport torch\nfrom packaging import version\nflag = {test}\n", encoding="utf-8")
    project = Project([tmp_path])
    module = project.module_named("m")
    assert module is not None
    compare = next(node for node in ast.walk(module.tree) if isinstance(node, ast.Compare))
    versions = Versions((LibraryVersion("torch", "test", "test", low, high),))
    assert version_test(compare, module, module.scope, versions) is expected
