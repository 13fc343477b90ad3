"""Installed libraries as read-only context: where they are (`--python`, the running
interpreter), how names resolve into them, that their hazards are reported at the project
line that reaches them, the off switch, the cache, and parallel runs.

The libraries here are copies of fixtures/site-packages (fakezoo) in a temporary
site-packages, named by a stand-in interpreter: tests never depend on what happens to be
installed on the machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ckptlint.config import ConfigError, load_config
from ckptlint.engine import Linter
from ckptlint.frontend import libraries_for
from ckptlint.libraries import NEVER_READ, PythonError, fingerprint, libraries, library_directories
from ckptlint.project import Project
from conftest import FIXTURES, json_findings, run_cli

MODEL = (FIXTURES / "regions" / "hazards" / "library_block.py").read_text()
CONV_BN = "fakezoo/blocks.py"
NORM_LINE = 21  # `return self.act(self.norm(self.conv(x)))` in ConvBN.forward

EXPECTED = [
    ("model.py", "CKP204", 19, 13),  # self.block(x): ConvBN's BatchNorm
    ("model.py", "CKP201", 20, 13),  # self.noise(x): Jitter draws from `random`
    ("model.py", "CKP201", 21, 16),  # jitter(x)
    ("model.py", "CKP204", 32, 16),  # checkpoint(self.head, x): the library block is the region
]


def fake_python(directory: Path, *entries: Path | str) -> Path:
    """A stand-in interpreter that prints this import path, whatever it is asked."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "python"
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' '{json.dumps([os.fspath(e) for e in entries])}'\n")
    script.chmod(0o755)
    return script


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A site-packages holding fakezoo, outside the project."""
    directory = tmp_path / "env" / "lib" / "site-packages"
    shutil.copytree(FIXTURES / "site-packages", directory)
    return directory


@pytest.fixture
def project(tmp_path: Path, site: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    python = fake_python(tmp_path / "env" / "bin", "", "/usr/lib/python3.11", site)
    (root / "pyproject.toml").write_text(f'[tool.ckptlint]\npython = "{python}"\n')
    (root / "model.py").write_text(MODEL)
    return root


def _lint(project: Path, jobs: int = 1, cache: bool = True, **overrides: object):
    config = load_config(project / "pyproject.toml", project).with_overrides(**overrides)
    linter = Linter(config, base=project, jobs=jobs, cache_dir=project / ".ckptlint_cache" if cache else None)
    return linter.lint_files([project / "model.py"], project_root=project)


def _found(result) -> list[tuple[str, str, int, int]]:
    return [(f.path, f.code, f.line, f.column) for f in result.findings]


# -- reported at the project line, with the chain into the library -----------------------


def test_library_hazards_are_reported_at_the_project_line_with_the_chain(project: Path) -> None:
    result = _lint(project, cache=False)
    assert _found(result) == EXPECTED
    messages = {(f.line, f.code): f.message for f in result.findings}
    assert messages[(19, "CKP204")].endswith(
        f"(in region checkpointed at model.py:31 via Stage.forward -> ConvBN.forward ({CONV_BN}:{NORM_LINE}))"
    )
    assert "via Stage.forward -> Jitter.forward -> jitter (fakezoo/noise.py:8)" in messages[(20, "CKP201")]
    assert messages[(32, "CKP204")].endswith(f"(in region checkpointed at model.py:32 via ConvBN.forward ({CONV_BN}:{NORM_LINE}))")


def test_a_library_is_never_linted_nor_reported_in(project: Path, site: Path) -> None:
    """fakezoo/wrapped.py holds a checkpoint call without use_reentrant and a region that
    appends to `self.calls`: neither is the project's finding, even with the library's
    files named and the region reached from the project (outside any region of its own)."""
    (project / "model.py").write_text(
        "from fakezoo import Checkpointed, ConvGN\n\n\ndef run(x):\n    return Checkpointed(ConvGN(8))(x)\n"
    )
    result = _lint(project, cache=False)
    assert result.findings == []
    assert all(not f.path.startswith(("fakezoo", os.fspath(site))) for f in result.findings)


def test_a_library_region_called_inside_a_project_region_is_followed(project: Path) -> None:
    """The library's own checkpoint call is opaque (torch), but what its module does is not."""
    (project / "model.py").write_text(
        "from torch.utils.checkpoint import checkpoint\n"
        "from fakezoo import Checkpointed, ConvGN\n\n\n"
        "def run(x):\n"
        "    block = Checkpointed(ConvGN(8))\n"
        "    return checkpoint(block, x, use_reentrant=False)\n"
    )
    result = _lint(project, cache=False)
    assert _found(result) == [("model.py", "CKP203", 7, 12)]
    assert "`.append()` on `self.calls`" in result.findings[0].message
    assert "via Checkpointed.forward (fakezoo/wrapped.py:14)" in result.findings[0].message


# -- where libraries are ---------------------------------------------------------------


def test_python_names_a_real_interpreter(tmp_path: Path, site: Path) -> None:
    """A real virtual environment: its site-packages is asked from its own interpreter."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", os.fspath(tmp_path / "venv")], check=True)
    python = tmp_path / "venv" / "bin" / "python"
    venv_site = Path(subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True, text=True, check=True).stdout.strip())
    shutil.copytree(site / "fakezoo", venv_site / "fakezoo")
    root = tmp_path / "project"
    root.mkdir()
    (root / "model.py").write_text(MODEL)
    completed = run_cli("model.py", "--python", os.fspath(python), "--format", "json", "--no-cache", cwd=root)
    assert completed.returncode == 1, completed.stderr
    assert [(f["path"], f["code"], f["line"], f["column"]) for f in json_findings(completed)] == EXPECTED
    assert library_directories(os.fspath(python)) == (os.fspath(venv_site),)


def test_no_libraries_and_libraries_false_turn_it_off(project: Path) -> None:
    assert _lint(project, cache=False, libraries=False).findings == []
    completed = run_cli("model.py", "--no-libraries", "--format", "json", "--no-cache", cwd=project)
    assert completed.returncode == 0 and json_findings(completed) == []
    (project / "pyproject.toml").write_text((project / "pyproject.toml").read_text() + "libraries = false\n")
    completed = run_cli("model.py", "--format", "json", "--no-cache", cwd=project)
    assert completed.returncode == 0 and json_findings(completed) == []


@pytest.mark.parametrize(
    "script, reason",
    [
        (None, "No such file or directory"),
        ("#!/bin/sh\necho hello\n", "did not print its import path"),
        ("#!/bin/sh\necho boom >&2\nexit 3\n", "boom"),
    ],
    ids=["missing", "not-python", "failing"],
)
def test_a_bad_python_is_a_one_line_usage_error(project: Path, script: str | None, reason: str) -> None:
    python = os.fspath(project / "bin" / "python")
    if script is not None:
        fake_python(project / "bin").write_text(script)
    completed = run_cli("model.py", "--python", python, cwd=project)
    assert completed.returncode == 2
    assert completed.stdout == b""
    lines = completed.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"ckptlint: error: cannot ask the Python interpreter {python} for its installed libraries: ")
    assert reason in lines[0] and "--no-libraries" in lines[0]


def test_a_bad_python_in_the_configuration_is_a_config_error(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.ckptlint]\npython = "bin/missing"\n')
    config = load_config(project / "pyproject.toml", project)
    assert config.python == os.fspath(project / "bin" / "missing")  # relative to the configuration
    with pytest.raises(ConfigError, match="cannot ask the Python interpreter .*bin/missing"):
        libraries_for(config)
    (project / "pyproject.toml").write_text("[tool.ckptlint]\nlibraries = 1\n")
    with pytest.raises(ConfigError, match=r"\[tool.ckptlint\] libraries: expected true or false"):
        load_config(project / "pyproject.toml", project)
    (project / "pyproject.toml").write_text('[tool.ckptlint]\npython = ""\n')
    with pytest.raises(ConfigError, match=r"\[tool.ckptlint\] python: expected the path of a Python interpreter"):
        load_config(project / "pyproject.toml", project)


def test_the_flake8_plugin_lints_without_libraries_when_python_is_bad(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ckptlint.flake8_plugin import findings_for_file

    (project / "pyproject.toml").write_text('[tool.ckptlint]\npython = "bin/missing"\n')
    monkeypatch.chdir(project)
    assert findings_for_file(os.fspath(project / "model.py"), MODEL) == []  # no crash, no libraries


def test_only_site_and_dist_packages_entries_are_kept(tmp_path: Path, site: Path) -> None:
    dist = tmp_path / "usr" / "lib" / "python3" / "dist-packages"
    dist.mkdir(parents=True)
    python = fake_python(tmp_path / "bin", "", ".", "/usr/lib/python311.zip", tmp_path, site, dist, tmp_path / "gone" / "site-packages", site)
    assert library_directories(os.fspath(python)) == (os.fspath(site), os.fspath(dist))


def test_the_running_interpreter_is_read_in_process(monkeypatch: pytest.MonkeyPatch, site: Path, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "path", ["", os.fspath(tmp_path), os.fspath(site)])
    assert library_directories(None) == (os.fspath(site),)


def test_an_interpreter_is_asked_once_per_modification(tmp_path: Path, site: Path) -> None:
    counter = tmp_path / "asked"
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text(f"#!/bin/sh\necho x >> '{counter}'\nprintf '%s\\n' '{json.dumps([os.fspath(site)])}'\n")
    python.chmod(0o755)
    for _ in range(3):
        assert library_directories(os.fspath(python)) == (os.fspath(site),)
    assert counter.read_text().count("x") == 1
    later = time.time() + 5
    os.utime(python, (later, later))  # a new interpreter file (an upgrade): asked again
    library_directories(os.fspath(python))
    assert counter.read_text().count("x") == 2


def test_no_interpreter_is_asked_when_libraries_are_off(tmp_path: Path) -> None:
    assert libraries("/nonexistent/python", enabled=False).paths == ()
    with pytest.raises(PythonError):
        libraries("/nonexistent/python")


# -- resolution ------------------------------------------------------------------------


def test_names_resolve_into_libraries_after_the_project(tmp_path: Path, site: Path) -> None:
    (site / "nspkg" / "inner").mkdir(parents=True)  # a namespace package: no __init__.py
    (site / "nspkg" / "inner" / "layers.py").write_text("from torch import nn\n\n\nclass Norm(nn.BatchNorm1d):\n    pass\n")
    project = Project([tmp_path], libraries=[site])
    assert project.canonical_name("fakezoo.ConvBN") == "fakezoo.blocks.ConvBN"  # the __init__ re-export, followed
    found = project.global_binding("fakezoo.ConvBN")
    assert found is not None and found[0].library and found[0].name == "fakezoo.blocks"
    assert found[0].source.display_path == "fakezoo/blocks.py"
    module = project.module_named("nspkg.inner.layers")
    assert module is not None and module.library and module.name == "nspkg.inner.layers"
    assert module.source.display_path == "nspkg/inner/layers.py"
    assert project.module_directory("nspkg") == site / "nspkg"
    # the project's own module of the same name wins, as the script's directory does on sys.path
    (tmp_path / "fakezoo.py").write_text("class ConvBN:\n    pass\n")
    shadowed = Project([tmp_path], libraries=[site])
    found = shadowed.global_binding("fakezoo.ConvBN")
    assert found is not None and not found[0].library and found[0].source.display_path.endswith("fakezoo.py")


def test_torch_numpy_and_the_standard_library_are_never_read(tmp_path: Path, site: Path) -> None:
    for name in ("torch", "numpy", "triton", "random", "functools"):
        (site / name).mkdir()
        (site / name / "__init__.py").write_text("import random\n\n\ndef helper():\n    return random.random()\n")
    project = Project([tmp_path], libraries=[site])
    for name in ("torch", "numpy", "triton", "random", "functools"):
        assert project.module_named(name) is None, name
        assert project.global_binding(f"{name}.helper") is None, name
    assert {"torch", "numpy", "triton"} <= NEVER_READ


def test_no_libraries_means_names_outside_the_project_stay_unresolved(tmp_path: Path, site: Path) -> None:
    assert Project([tmp_path]).global_binding("fakezoo.ConvBN") is None
    assert Project([tmp_path]).module_named("fakezoo") is None


# -- the cache ---------------------------------------------------------------------------


def test_changing_a_library_file_redoes_the_results_that_read_it(project: Path, site: Path) -> None:
    cold = _lint(project)
    assert _found(cold) == EXPECTED and cold.analysed == 1
    warm = _lint(project)
    assert warm.analysed == 0 and _found(warm) == EXPECTED
    blocks = site / "fakezoo" / "blocks.py"
    original = blocks.read_text()
    blocks.write_text(original.replace("self.norm = nn.BatchNorm2d(channels)", "self.norm = nn.GroupNorm(4, channels)"))
    upgraded = _lint(project)
    assert upgraded.analysed == 1
    assert _found(upgraded) == [f for f in EXPECTED if f[1] != "CKP204"]
    blocks.write_text(original)
    assert _found(_lint(project)) == EXPECTED


def test_installing_a_distribution_changes_the_cache_key(project: Path, site: Path) -> None:
    before = fingerprint((os.fspath(site),))
    assert _lint(project).analysed == 1
    shutil.move(site / "fakezoo-1.0.dist-info", site / "fakezoo-1.1.dist-info")  # pip install -U fakezoo
    assert fingerprint((os.fspath(site),)) != before
    assert _lint(project).analysed == 1
    assert _lint(project).analysed == 0


def test_a_library_installed_later_is_seen(project: Path, site: Path) -> None:
    """An import that resolved to nothing resolves once the package is installed."""
    moved = site.parent / "fakezoo-away"
    shutil.move(site / "fakezoo", moved)
    assert _found(_lint(project)) == []
    shutil.move(moved, site / "fakezoo")
    assert _found(_lint(project)) == EXPECTED


def test_parallel_runs_match_one_process(project: Path) -> None:
    """Enough candidate files that the pool really starts (parallel.MIN_FILES_PER_WORKER)."""
    named = []
    for index in range(24):
        (project / f"model_{index}.py").write_text(MODEL)
        named.append(project / f"model_{index}.py")
    config = load_config(project / "pyproject.toml", project)
    one = Linter(config, base=project, jobs=1).lint_files(named, project_root=project)
    many = Linter(config, base=project, jobs=2).lint_files(named, project_root=project)
    assert len(one.findings) == 24 * len(EXPECTED)
    assert [f.to_dict() for f in one.findings] == [f.to_dict() for f in many.findings]
