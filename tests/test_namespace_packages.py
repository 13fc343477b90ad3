"""Directories without `__init__.py` (PEP 420 namespace packages) are packages when their
modules import through them: `pkg/model.py` saying `from pkg.blocks import Block` is module
`pkg.model`, and the hazard in `pkg/blocks.py` is reached as it is with an `__init__.py`.
A directory whose modules never spell its name (`src/`, `tests/`, a script folder) stays a
root, as `sys.path[0]` makes it when a script there runs. Real command-line runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from ckptlint.project import import_root, namespace_root

BLOCKS = """\
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(self.lin(x))


class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)
"""

MODEL = """\
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from {package}.blocks import {block}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = {block}()

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False)
"""


def ckptlint(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "CKPTLINT_CACHE_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", "ckptlint", "--no-cache", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def findings(completed: subprocess.CompletedProcess[str]) -> list[str]:
    """`path:line:column CODE` of each finding line."""
    return [" ".join(line.split()[:2]).rstrip(":") for line in completed.stdout.splitlines() if ": CKP" in line]


def layout(top: Path, package: str, block: str = "Block") -> Path:
    """`package` (dotted: nested directories, none with `__init__.py`) holding blocks.py and model.py."""
    directory = top.joinpath(*package.split("."))
    directory.mkdir(parents=True)
    (directory / "blocks.py").write_text(BLOCKS)
    (directory / "model.py").write_text(MODEL.format(package=package, block=block))
    (top / ".git").mkdir()
    return directory


@pytest.mark.parametrize("named", [["pkg/model.py"], ["."], ["pkg"], ["pkg/model.py", "pkg/blocks.py"]])
def test_a_hazard_reached_through_a_namespace_package_is_found(tmp_path: Path, named: list[str]) -> None:
    layout(tmp_path, "pkg")
    completed = ckptlint(*named, cwd=tmp_path)
    assert findings(completed) == ["pkg/blocks.py:11:16: CKP204"], completed.stdout + completed.stderr
    assert "pkg/model.py:13" in completed.stdout  # the region that reaches it
    assert completed.returncode == 1


def test_a_nested_namespace_package_is_followed(tmp_path: Path) -> None:
    layout(tmp_path, "app.nets")
    completed = ckptlint("app/nets/model.py", cwd=tmp_path)
    assert findings(completed) == ["app/nets/blocks.py:11:16: CKP204"], completed.stdout + completed.stderr


def test_a_regular_package_inside_a_namespace_package_is_followed(tmp_path: Path) -> None:
    directory = layout(tmp_path, "app.nets")
    (directory / "__init__.py").write_text("")  # app/ is the namespace, app/nets a regular package
    completed = ckptlint("app/nets/model.py", cwd=tmp_path)
    assert findings(completed) == ["app/nets/blocks.py:11:16: CKP204"], completed.stdout + completed.stderr


def test_the_safe_twin_a_namespace_package_region_without_a_hazard(tmp_path: Path) -> None:
    layout(tmp_path, "pkg", block="Plain")
    completed = ckptlint(".", cwd=tmp_path)
    assert findings(completed) == [] and completed.returncode == 0, completed.stdout + completed.stderr


def test_a_directory_whose_modules_do_not_spell_its_name_stays_a_root(tmp_path: Path) -> None:
    """A script folder importing its siblings (`from blocks import Block`), a `src/` layout's
    package, and a `tests/` folder importing the package it tests."""
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "blocks.py").write_text(BLOCKS)
    (scripts / "model.py").write_text(MODEL.replace("from {package}.blocks", "from blocks").format(block="Block"))
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "a.py").write_text("from pkg.b import f\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("from pkg.a import f\nimport tests_helpers\n")
    assert import_root(scripts / "model.py") == scripts
    assert import_root(tmp_path / "src" / "pkg" / "a.py") == tmp_path / "src"
    assert namespace_root(tmp_path / "tests") == tmp_path / "tests"
    (tmp_path / ".git").mkdir()
    completed = ckptlint("scripts/model.py", cwd=tmp_path)
    assert findings(completed) == ["scripts/blocks.py:11:16: CKP204"], completed.stdout + completed.stderr


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_the_namespace_spans_the_directories_its_modules_spell(tmp_path: Path) -> None:
    _write(tmp_path, {"a/b/m.py": "from a.b.n import f\n", "c/d/m.py": "from d.n import f\n"})
    assert import_root(tmp_path / "a" / "b" / "m.py") == tmp_path
    assert import_root(tmp_path / "c" / "d" / "m.py") == tmp_path / "c"


def test_a_name_the_directory_holds_is_that_module_not_the_directory(tmp_path: Path) -> None:
    """`reexport/reexport/model.py` saying `from reexport.utils import ckpt`: the inner package."""
    inner = tmp_path / "reexport" / "reexport"
    inner.mkdir(parents=True)
    (inner / "__init__.py").write_text("")
    (inner / "model.py").write_text("from reexport.utils import ckpt\n")
    assert import_root(inner / "model.py") == tmp_path / "reexport"


def test_a_namespace_directory_its_packages_import_through_is_part_of_their_names(tmp_path: Path) -> None:
    """Megatron's wheel has no `megatron/__init__.py` and its packages import `megatron.core.*`:
    the import root is the directory above it. A `src/` layout's packages never import `src.`."""
    _write(tmp_path, {"megatron/core/__init__.py": "import megatron.core.utils\n", "src/pkg/__init__.py": "from pkg.utils import helper\n"})
    assert import_root(tmp_path / "megatron" / "core" / "utils.py") == tmp_path
    assert import_root(tmp_path / "src" / "pkg" / "utils.py") == tmp_path / "src"
    assert import_root(tmp_path / "megatron" / "core" / "__init__.py") == tmp_path  # a regular package inside it
