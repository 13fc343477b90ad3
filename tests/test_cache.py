"""The cache and the prefilter: a warm run answers from the cache, and every change that can
alter a result (the file, a module its regions reach, a new module, a derived API name, the
configuration) is seen. Parallel runs give the one-process output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptlint.config import Config, load_config
from ckptlint.engine import Linter
from conftest import FIXTURES, run_cli

MODEL = """\
from torch.utils.checkpoint import checkpoint
from blocks import block


def forward(x):
    return checkpoint(block, x, use_reentrant=False)
"""
CLEAN_BLOCK = "def block(x):\n    return x * 2\n"
RANDOM_BLOCK = "import random\n\n\ndef block(x):\n    return x * random.random()\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\n")
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "blocks.py").write_text(CLEAN_BLOCK)
    (tmp_path / "notes.py").write_text("x = 1\n")
    return tmp_path


def _lint(project: Path, *named: str, jobs: int = 1, cache: bool = True):
    config = load_config(project / "pyproject.toml", project)
    linter = Linter(config, base=project, jobs=jobs, cache_dir=project / ".ckptlint_cache" if cache else None)
    return linter.lint_files([project / name for name in named], project_root=project)


def _found(result) -> list[tuple[str, str, int]]:
    return [(f.path, f.code, f.line) for f in result.findings]


def test_warm_run_analyses_nothing_and_reports_the_same(project: Path) -> None:
    (project / "blocks.py").write_text(RANDOM_BLOCK)
    cold = _lint(project, "model.py", "blocks.py", "notes.py")
    assert _found(cold) == [("blocks.py", "CKP201", 5)]
    assert cold.analysed == 1  # blocks.py and notes.py cannot hold a checkpoint call: only parsed
    warm = _lint(project, "model.py", "blocks.py", "notes.py")
    assert warm.analysed == 0
    assert [f.to_dict() for f in warm.findings] == [f.to_dict() for f in cold.findings]


def test_a_change_in_a_reached_module_relints_the_file_that_checkpoints_it(project: Path) -> None:
    assert _found(_lint(project, "model.py")) == []
    (project / "blocks.py").write_text(RANDOM_BLOCK)  # model.py itself is unchanged
    result = _lint(project, "model.py")
    assert _found(result) == [("blocks.py", "CKP201", 5)]
    assert result.findings[0].sites[0].path == "model.py"
    (project / "blocks.py").write_text(CLEAN_BLOCK)
    assert _found(_lint(project, "model.py")) == []


def test_a_new_module_that_an_import_names_is_seen(project: Path) -> None:
    (project / "model.py").write_text(MODEL.replace("from blocks import block", "from helpers import block"))
    assert _found(_lint(project, "model.py")) == []  # helpers.py does not exist yet
    (project / "helpers.py").write_text(RANDOM_BLOCK)
    assert _found(_lint(project, "model.py")) == [("helpers.py", "CKP201", 5)]
    (project / "helpers.py").unlink()
    assert _found(_lint(project, "model.py")) == []


def test_an_alias_defined_in_another_file_makes_its_callers_candidates(project: Path) -> None:
    (project / "blocks.py").write_text(RANDOM_BLOCK)
    (project / "utils.py").write_text("from functools import partial\n\nfrom torch.utils.checkpoint import checkpoint\n\nckpt = partial(checkpoint, use_reentrant=False)\n")
    # no checkpoint API name in model.py: only the project's alias
    (project / "model.py").write_text("from blocks import block\nfrom utils import ckpt\n\n\ndef forward(x):\n    return ckpt(block, x)\n")
    for _ in range(2):  # cold, then from the cache
        result = _lint(project, "model.py")
        assert _found(result) == [("blocks.py", "CKP201", 5)]
        assert result.findings[0].sites[0].path == "model.py"


def test_an_alias_added_later_invalidates_cached_callers(project: Path) -> None:
    (project / "blocks.py").write_text(RANDOM_BLOCK)
    (project / "utils.py").write_text("def ckpt(fn, *args):\n    return fn(*args)\n")
    (project / "model.py").write_text("from blocks import block\nfrom utils import ckpt\n\n\ndef forward(x):\n    return ckpt(block, x)\n")
    assert _found(_lint(project, "model.py")) == []
    (project / "utils.py").write_text("from torch.utils.checkpoint import checkpoint as ckpt\n")
    assert _found(_lint(project, "model.py")) == [("blocks.py", "CKP201", 5), ("model.py", "CKP101", 6)]


def test_a_layer_subclass_in_another_file_is_a_region(project: Path) -> None:
    (project / "base.py").write_text(
        "from transformers.modeling_layers import GradientCheckpointingLayer\n\n\nclass Base(GradientCheckpointingLayer):\n    pass\n"
    )
    (project / "layer.py").write_text(
        "import random\n\nfrom base import Base\n\n\nclass Layer(Base):\n    def forward(self, x):\n        return x * random.random()\n"
    )
    for _ in range(2):
        assert _found(_lint(project, "layer.py")) == [("layer.py", "CKP201", 8)]


def test_configuration_is_part_of_the_key(project: Path) -> None:
    (project / "blocks.py").write_text(RANDOM_BLOCK)
    (project / "model.py").write_text("from blocks import block\nfrom wrappers import run\n\n\ndef forward(x):\n    return run(block, x)\n")
    assert _found(_lint(project, "model.py")) == []
    (project / "pyproject.toml").write_text('[tool.ckptlint]\ncheckpoint-functions = ["wrappers.run"]\n')
    assert _found(_lint(project, "model.py")) == [("blocks.py", "CKP201", 5)]


def test_cache_directory_layout_and_clean(project: Path) -> None:
    assert run_cli("model.py", cwd=project).returncode == 0
    cache = project / ".ckptlint_cache"
    assert (cache / ".gitignore").read_text().splitlines()[-1] == "*"
    assert (cache / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert list(cache.glob("*/*.json"))
    cleaned = run_cli("clean", cwd=project)
    assert cleaned.returncode == 0 and not cache.exists()
    assert b"Removed" in cleaned.stderr
    assert run_cli("clean", cwd=project).returncode == 0  # nothing to remove is fine


def test_clean_refuses_a_directory_that_is_not_a_cache(project: Path) -> None:
    (project / "precious").mkdir()
    (project / "precious" / "data.txt").write_text("keep me")
    completed = run_cli("clean", "--cache-dir", "precious", cwd=project)
    assert completed.returncode == 2 and b"not a ckptlint cache" in completed.stderr
    assert (project / "precious" / "data.txt").exists()


def test_no_cache_and_cache_dir(project: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    assert run_cli("model.py", "--no-cache", cwd=project).returncode == 0
    assert not (project / ".ckptlint_cache").exists()
    elsewhere = tmp_path_factory.mktemp("cache")
    assert run_cli("model.py", "--cache-dir", str(elsewhere), cwd=project).returncode == 0
    assert (elsewhere / "CACHEDIR.TAG").exists() and not (project / ".ckptlint_cache").exists()
    assert run_cli("model.py", cwd=project, env={"CKPTLINT_CACHE_DIR": str(elsewhere / "env")}).returncode == 0
    assert (elsewhere / "env" / "CACHEDIR.TAG").exists()


def test_a_corrupt_or_unwritable_cache_is_ignored(project: Path) -> None:
    (project / "blocks.py").write_text(RANDOM_BLOCK)
    expected = _found(_lint(project, "model.py"))
    for index in (project / ".ckptlint_cache").glob("*/*.json"):
        index.write_text('{"format": 1, "entries": {"x": 1}')  # truncated JSON
    assert _found(_lint(project, "model.py")) == expected
    for index in (project / ".ckptlint_cache").glob("*/*.json"):
        index.write_text(json.dumps({"format": 1, "entries": [], "stats": 3, "names": None, "files": {}}))
    assert _found(_lint(project, "model.py")) == expected
    blocker = project / "blocked"
    blocker.write_text("a file where the cache directory should be")
    linter = Linter(Config(root=project), base=project, cache_dir=blocker)
    assert _found(linter.lint_files([project / "model.py"], project_root=project)) == expected


def test_parallel_output_is_identical_to_one_process() -> None:
    one = run_cli("--no-cache", "--jobs", "1", "--format", "json", str(FIXTURES / "regions"))
    many = run_cli("--no-cache", "--jobs", "3", "--format", "json", str(FIXTURES / "regions"))
    assert one.returncode == many.returncode == 1
    assert json.loads(one.stdout)["findings"] and one.stdout == many.stdout


def test_parallel_run_on_a_large_project_matches_one_process(project: Path) -> None:
    """Enough candidate files that the pool really starts (see parallel.MIN_FILES_PER_WORKER)."""
    for index in range(40):
        body = RANDOM_BLOCK if index % 3 == 0 else CLEAN_BLOCK
        (project / f"block_{index}.py").write_text(body)
        (project / f"model_{index}.py").write_text(MODEL.replace("from blocks import", f"from block_{index} import"))
    one = [f.to_dict() for f in _lint(project, *[f"model_{i}.py" for i in range(40)], jobs=1, cache=False).findings]
    many = [f.to_dict() for f in _lint(project, *[f"model_{i}.py" for i in range(40)], jobs=2, cache=False).findings]
    assert len(one) == 14 and one == many


def test_a_cache_with_malformed_findings_is_ignored(project: Path) -> None:
    (project / "blocks.py").write_text(RANDOM_BLOCK)
    expected = _found(_lint(project, "model.py"))
    for index in (project / ".ckptlint_cache").glob("*/*[0-9a-f].json"):
        data = json.loads(index.read_text())
        for entry in data["entries"].values():
            if entry.get("findings"):
                entry["findings"] = [{"path": "x"}]
        index.write_text(json.dumps(data))
    assert _found(_lint(project, "model.py")) == expected


def test_a_dying_worker_falls_back_to_one_process(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from ckptlint import worker

    for index in range(20):
        (project / f"block_{index}.py").write_text(RANDOM_BLOCK)
        (project / f"model_{index}.py").write_text(MODEL.replace("from blocks import", f"from block_{index} import"))
    monkeypatch.setattr(worker, "start_process", lambda: os._exit(3))  # every worker dies at start
    result = _lint(project, *[f"model_{i}.py" for i in range(20)], jobs=2, cache=False)
    assert len(result.findings) == 20 and not result.problems
