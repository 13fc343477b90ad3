"""The cache and the prefilter: a warm run answers from the cache, and every change that can
alter a result (the file, a module its regions reach, a new module, a derived API name, the
configuration) is seen. Parallel runs give the one-process output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from ckptlint.engine.cache import FORMAT, CacheEntry, EntryKind, FrozenNames, Index, RuleSet
from ckptlint.finding import Edit, Finding, Fix, Site
from ckptlint.config import Config, load_config
from ckptlint.engine import Linter
from conftest import FIXTURES, lint_project, run_cli

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


_lint = lint_project


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


def _edit_index(project: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    for index in (project / ".ckptlint_cache").glob("*/*[0-9a-f].json"):
        data = json.loads(index.read_text())
        edit(data)
        index.write_text(json.dumps(data))


def _first(data: dict[str, Any], kind: str | None = None, with_findings: bool = False) -> dict[str, Any]:
    entries = data["entries"].values()
    return next(e for e in entries if (kind is None or e["kind"] == kind) and (not with_findings or e.get("findings")))


HAND_EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "a derived name that is not a string": lambda d: _first(d, "analysed")["names"].__setitem__(0, [5]),
    "a finding's line as a string": lambda d: _first(d, with_findings=True)["findings"][0].__setitem__("line", "5"),
    "a site without a path": lambda d: _first(d, with_findings=True)["findings"][0].__setitem__("checkpoint_sites", [{"line": 1}]),
    "an unknown kind": lambda d: _first(d).__setitem__("kind", "mystery"),
    "a project file that is not a path": lambda d: d["files"].append(7),
    "hits that are not a list": lambda d: _first(d).__setitem__("hits", "checkpoint"),
    "a stat record of the wrong length": lambda d: d["stats"].__setitem__("/elsewhere.py", [1, 2]),
    "an unknown rule set": lambda d: _first(d, "analysed").__setitem__("rules", "some"),
    "a dependency number past the table": lambda d: _first(d, "analysed")["deps"].append(10**6),
    "dependencies as an object": lambda d: _first(d, "analysed").__setitem__("deps", {"/p/blocks.py": "d"}),
    "a table row that is not [path, digest]": lambda d: d["modules"].append(["/p/x.py"]),
}


@pytest.mark.parametrize("edit", HAND_EDITS.values(), ids=HAND_EDITS.keys())
def test_a_hand_edited_index_is_ignored_and_rewritten(project: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Loading checks every shape the engine relies on: these used to crash a run or change its findings."""
    (project / "blocks.py").write_text(RANDOM_BLOCK)
    expected = _found(_lint(project, "model.py", cache=False))
    _lint(project, "model.py")
    _edit_index(project, edit)
    assert _found(_lint(project, "model.py")) == expected
    [index] = (project / ".ckptlint_cache").glob("*/*[0-9a-f].json")
    assert Index.from_dict(json.loads(index.read_text())).entries  # rewritten well-formed


CALL_EDITS: dict[str, Callable[[dict[str, Any]], object]] = {
    "a line as a string": lambda d: _first(d, "analysed")["calls"][0].__setitem__("line", "6"),
    "no mode": lambda d: _first(d, "analysed")["calls"][0].pop("mode"),
    "a flag as a string": lambda d: _first(d, "analysed")["calls"][0].__setitem__("mode_defaulted", "no"),
    "calls not a list": lambda d: _first(d, "analysed").__setitem__("calls", {"line": 6}),
}


@pytest.mark.parametrize("edit", CALL_EDITS.values(), ids=CALL_EDITS.keys())
def test_a_cache_with_malformed_calls_is_ignored(project: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """`ckptlint calls` answers from the cache: a described call of another shape would be printed as it is."""
    expected = _lint(project, "model.py").calls
    assert [(c["path"], c["line"], c["mode"]) for c in expected] == [("model.py", 6, "non-reentrant")]
    _edit_index(project, edit)
    again = _lint(project, "model.py")
    assert again.calls == expected and again.analysed == 1


def test_a_malformed_edges_file_counts_as_unknown_edges(project: Path) -> None:
    (project / "blocks.py").write_text(RANDOM_BLOCK)
    _lint(project, "model.py")
    for edges in (project / ".ckptlint_cache").glob("*/*.edges.json"):
        data = json.loads(edges.read_text())
        edges.write_text(json.dumps({**data, "edges": {path: 5 for path in data["edges"]}}))
    (project / "extra.py").write_text("y = 2\n")  # a new module: the edges are consulted
    assert _found(_lint(project, "model.py")) == _found(_lint(project, "model.py", cache=False)) == [("blocks.py", "CKP201", 5)]


def test_an_entry_is_what_it_was_after_a_round_trip() -> None:
    site = Site("model.py", 6, 12, ("forward", "block"))
    fix = Fix("safe", "pass use_reentrant=False", (Edit(6, 30, 6, 30, ", use_reentrant=False"),))
    finding = Finding("blocks.py", 5, 16, "CKP201", "calls `random.random()`", 5, 31, (site,), (fix,))
    entries = [
        CacheEntry(EntryKind.SKIPPED, "d0", frozenset()),
        CacheEntry(EntryKind.SYNTAX, "d1", frozenset({"checkpoint"}), (finding,)),
        CacheEntry(
            EntryKind.ANALYSED, "d2", frozenset({"checkpoint", "ckpt"}), (finding,),
            FrozenNames(frozenset({"ckpt"}), frozenset({"Base"})), {"/p/blocks.py": "d3"}, frozenset({"checkpoint"}),
        ),
        CacheEntry(
            EntryKind.ANALYSED, "d4", frozenset({"checkpoint"}), (), FrozenNames(), {}, frozenset({"checkpoint"}),
            ({"path": "model.py", "line": 6, "column": 11, "api": "torch.utils.checkpoint.checkpoint", "region": "block",
              "mode": "non-reentrant", "mode_defaulted": False, "mode_source": "use_reentrant=False"},),
            RuleSet.CALLS,
        ),
    ]
    for entry in entries:
        data = json.loads(json.dumps(entry.to_dict()))
        again = CacheEntry.from_dict(data)
        assert again == entry and again.to_dict() == data
        assert [f.fixes for f in again.findings] == [f.fixes for f in entry.findings]  # not compared by ==


def test_an_index_numbers_each_shared_dependency_once() -> None:
    shared = {"/p/blocks.py": "d3", "/p/utils.py": "d5"}
    entries = {
        f"/p/model{n}.py": CacheEntry(EntryKind.ANALYSED, f"m{n}", frozenset(), (), FrozenNames(), {f"/p/model{n}.py": f"m{n}", **shared})
        for n in range(3)
    }
    index = Index(entries, files=tuple(entries), compile_calls={"/p/train.py": ("t1", True)})
    data = json.loads(json.dumps(index.to_dict()))
    assert len(data["modules"]) == 5 and all(len(entry["deps"]) == 3 for entry in data["entries"].values())
    again = Index.from_dict(data)
    assert again.entries == index.entries and again.compile_calls == index.compile_calls


def test_a_corrupt_or_unwritable_cache_is_ignored(project: Path) -> None:
    (project / "blocks.py").write_text(RANDOM_BLOCK)
    expected = _found(_lint(project, "model.py"))
    for index in (project / ".ckptlint_cache").glob("*/*.json"):
        index.write_text('{"format": 1, "entries": {"x": 1}')  # truncated JSON
    assert _found(_lint(project, "model.py")) == expected
    for index in (project / ".ckptlint_cache").glob("*/*.json"):
        index.write_text(json.dumps({"format": FORMAT, "entries": [], "stats": 3, "names": None, "files": {}}))
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

    from ckptlint.engine import worker

    for index in range(20):
        (project / f"block_{index}.py").write_text(RANDOM_BLOCK)
        (project / f"model_{index}.py").write_text(MODEL.replace("from blocks import", f"from block_{index} import"))
    monkeypatch.setattr(worker, "start_process", lambda: os._exit(3))  # every worker dies at start
    result = _lint(project, *[f"model_{i}.py" for i in range(20)], jobs=2, cache=False)
    assert len(result.findings) == 20 and not result.problems


# -- a warm run reports what a run without the cache reports --------------------------------


def _same_with_and_without_cache(project: Path, *named: str) -> list[tuple[str, str, int]]:
    warm = [f.to_dict() for f in _lint(project, *named).findings]
    cold = [f.to_dict() for f in _lint(project, *named, cache=False).findings]
    assert warm == cold
    return [(f["path"], f["code"], f["line"]) for f in cold]


def test_a_package_marker_that_comes_or_goes_renames_the_modules_below_it(project: Path) -> None:
    (project / "models").mkdir()
    (project / "models" / "model.py").write_text(MODEL)
    (project / "models" / "blocks.py").write_text(RANDOM_BLOCK)
    everything = ("model.py", "blocks.py", "models/model.py", "models/blocks.py")
    assert _same_with_and_without_cache(project, *everything) == [("models/blocks.py", "CKP201", 5)]
    (project / "models" / "__init__.py").write_text("")  # `from blocks import` now means ./blocks.py
    assert _same_with_and_without_cache(project, *everything, "models/__init__.py") == []
    (project / "models" / "__init__.py").unlink()
    assert _same_with_and_without_cache(project, *everything) == [("models/blocks.py", "CKP201", 5)]


@pytest.mark.parametrize(
    ("imports", "block"),
    [
        ("import pkg.sub as s", "s.inner.Block()"),
        ("from pkg import sub", "sub.inner.Block()"),
        ("from . import sub", "sub.inner.Block()"),
        ("import pkg as P", "P.sub.inner.Block()"),
        ("import pkg\np = pkg", "p.sub.inner.Block()"),
        ("import pkg", "(pkg\n            .sub.inner.Block)()"),
    ],
)
def test_a_submodule_reached_as_an_attribute_is_a_dependency(project: Path, imports: str, block: str) -> None:
    sub = project / "pkg" / "sub"
    sub.mkdir(parents=True)
    (project / "pkg" / "__init__.py").write_text("")
    (sub / "__init__.py").write_text("")
    (sub / "inner.py").write_text("import torch.nn as nn\n\n\nclass Block(nn.Module):\n    def forward(self, x):\n        return x * 2\n")
    (project / "pkg" / "m.py").write_text(
        f"import torch.nn as nn\n{imports}\nfrom torch.utils.checkpoint import checkpoint\n\n\n"
        f"class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.block = {block}\n\n"
        "    def forward(self, x):\n        return checkpoint(self.block, x, use_reentrant=False)\n"
    )
    assert _same_with_and_without_cache(project, "pkg/m.py") == []
    (sub / "inner.py").write_text(
        "import random\n\nimport torch.nn as nn\n\n\nclass Block(nn.Module):\n    def forward(self, x):\n        return x * random.random()\n"
    )
    assert _same_with_and_without_cache(project, "pkg/m.py") == [("pkg/sub/inner.py", "CKP201", 8)]


def test_which_root_wins_a_shared_top_level_name_does_not_depend_on_the_named_files(project: Path) -> None:
    for directory in ("a", "b", "c"):
        (project / directory).mkdir()
    (project / "a" / "utils.py").write_text("def block(x):\n    return x * 2\n")
    (project / "b" / "utils.py").write_text(RANDOM_BLOCK)
    (project / "c" / "train.py").write_text(MODEL.replace("from blocks import", "from utils import"))
    everything = _same_with_and_without_cache(project, "a/utils.py", "b/utils.py", "c/train.py")
    assert _same_with_and_without_cache(project, "b/utils.py", "c/train.py") == everything == []  # a/ sorts first


def test_an_edit_that_restores_size_and_modification_time_is_seen(project: Path) -> None:
    import os

    (project / "blocks.py").write_text(RANDOM_BLOCK)
    old = (project / "blocks.py").stat()
    os.utime(project / "blocks.py", ns=(old.st_atime_ns, old.st_mtime_ns - 10_000_000_000))  # not "racily" new
    assert _found(_lint(project, "model.py")) == [("blocks.py", "CKP201", 5)]
    edited = RANDOM_BLOCK.replace("random.random()", "2.0000000000000")
    assert len(edited) == len(RANDOM_BLOCK)
    before = (project / "blocks.py").stat()
    (project / "blocks.py").write_text(edited)
    os.utime(project / "blocks.py", ns=(before.st_atime_ns, before.st_mtime_ns))  # as `cp -p` or `touch -r` leave it
    assert _same_with_and_without_cache(project, "model.py") == []


def test_names_from_files_outside_the_run_are_not_used(project: Path) -> None:
    (project / "blocks.py").write_text(RANDOM_BLOCK)
    (project / "utils.py").write_text("import functools\nfrom torch.utils.checkpoint import checkpoint\n\nckpt = functools.partial(checkpoint, use_reentrant=False)\n")
    (project / "model.py").write_text("from blocks import block\nfrom utils import ckpt\n\n\ndef forward(x):\n    return ckpt(block, x)\n")
    assert _found(_lint(project, "model.py")) == [("blocks.py", "CKP201", 5)]  # the project run learns `ckpt`
    config = load_config(project / "pyproject.toml", project)
    alone = [
        [f.to_dict() for f in Linter(config, base=project, cache_dir=cache).lint_files([project / "model.py"]).findings]
        for cache in (project / ".ckptlint_cache", None)
    ]
    assert alone[0] == alone[1] == []  # without the project, nothing says `ckpt` is checkpoint


LAYERS = "from transformers.modeling_layers import GradientCheckpointingLayer\n\n\nclass BaseLayer(GradientCheckpointingLayer):\n    pass\n"
LEAF_BODY = "    def forward(self, x):\n        return x * 2  # HAZARD\n\n    def run(self, f, x):\n        return checkpoint(f, x, use_reentrant=False)\n"


@pytest.mark.parametrize(
    "leaf",
    [
        "import torch.nn as nn\nfrom pkg.mid import Mid\n\n\nclass Leaf(\n    nn.Module,  # (plain torch module)\n    Mid,\n):\n",
        "from pkg.mid import Mid as MidLayer\n\n\nclass Leaf(MidLayer):\n",
    ],
    ids=["parenthesis-in-a-comment", "imported-under-another-name"],
)
def test_a_layer_class_learnt_later_is_seen_in_the_first_run(project: Path, leaf: str) -> None:
    (project / "pkg").mkdir()
    (project / "pkg" / "__init__.py").write_text("")
    (project / "pkg" / "layers.py").write_text(LAYERS)
    (project / "pkg" / "mid.py").write_text("from pkg.layers import BaseLayer\n\n\nclass Mid(BaseLayer):\n    pass\n")
    text = "import random\n\nfrom torch.utils.checkpoint import checkpoint\n" + leaf + LEAF_BODY
    (project / "pkg" / "leaf.py").write_text(text)
    files = ("pkg/__init__.py", "pkg/layers.py", "pkg/mid.py", "pkg/leaf.py")
    assert _same_with_and_without_cache(project, *files) == []
    (project / "pkg" / "leaf.py").write_text(text.replace("x * 2  # HAZARD", "x * random.random()"))
    line = text.splitlines().index("        return x * 2  # HAZARD") + 1
    assert _same_with_and_without_cache(project, *files) == [("pkg/leaf.py", "CKP201", line)]


def test_a_file_finds_its_own_names_in_any_order(project: Path) -> None:
    (project / "blocks.py").write_text(RANDOM_BLOCK)
    (project / "model.py").write_text(
        "from functools import partial\n\nfrom torch.utils.checkpoint import checkpoint\n\nfrom blocks import block\n\n"
        "first = partial(checkpoint, use_reentrant=False)\nsecond = first\n\n\ndef forward(x):\n    return second(block, x)\n"
    )
    (project / "layers.py").write_text(
        "import random\n\nfrom transformers.modeling_layers import GradientCheckpointingLayer\n\n\n"
        "class Leaf(Mid):\n    def forward(self, x):\n        return x * random.random()\n\n\n"
        "class Mid(GradientCheckpointingLayer):\n    pass\n"
    )
    expected = [("blocks.py", "CKP201", 5), ("layers.py", "CKP201", 8)]
    assert _same_with_and_without_cache(project, "model.py", "layers.py") == expected
    assert _found(_lint(project, "model.py", "layers.py")) == expected


def test_a_package_wins_over_a_module_of_the_same_name(project: Path) -> None:
    (project / "pkg" / "a").mkdir(parents=True)
    (project / "pkg" / "__init__.py").write_text("")
    (project / "pkg" / "a" / "__init__.py").write_text("def block(x):\n    return x * 2\n")
    (project / "pkg" / "a.py").write_text(RANDOM_BLOCK)  # shadowed: Python imports the package
    (project / "pkg" / "m.py").write_text(MODEL.replace("from blocks import", "from pkg.a import"))
    files = ("pkg/a.py", "pkg/a/__init__.py", "pkg/m.py")
    assert _same_with_and_without_cache(project, *files) == []
    (project / "pkg" / "a" / "__init__.py").write_text(RANDOM_BLOCK)
    assert _same_with_and_without_cache(project, *files) == [("pkg/a/__init__.py", "CKP201", 5)]


PACKAGE_MODEL = """\
from torch.utils.checkpoint import checkpoint

{imports}


def forward(x):
    return checkpoint({block}, x, use_reentrant=False)
"""


@pytest.fixture
def package(project: Path) -> Path:
    (project / "pkg").mkdir()
    (project / "pkg" / "__init__.py").write_text("")
    (project / "pkg" / "blocks.py").write_text(RANDOM_BLOCK)
    return project


@pytest.mark.parametrize(
    "imports, block, redone",
    [
        ("from pkg.blocks import block", "block", 0),  # a module beside an imported one is not what the import loads
        ("import pkg", "pkg.blocks.block", 0),  # a package reached through a chain reaches what it spells
        ("import pkg\n\np = pkg", "p.blocks.block", 0),  # an alias may reach any submodule, by a name spelled somewhere
        ("import pkg\n\np = pkg\nLATER = 'Scratch'", "p.blocks.block", 1),  # as here (`getattr(p, LATER.lower())`)
    ],
)
def test_a_new_module_no_import_can_load_reanalyses_nothing(package: Path, imports: str, block: str, redone: int) -> None:
    """On transformers a scratch module beside a model re-analysed 1,705 of 1,712 files: every
    file importing anything from the package counted as one the new module could change."""
    (package / "main.py").write_text(PACKAGE_MODEL.format(imports=imports, block=block))
    cold = _lint(package, "main.py")
    assert _found(cold) == [("pkg/blocks.py", "CKP201", 5)] and cold.analysed == 2  # main.py and model.py
    (package / "pkg" / "scratch.py").write_text("x = 1\n")
    added = _lint(package, "main.py", "pkg/scratch.py")
    assert (added.analysed, _found(added)) == (redone, _found(cold))
    (package / "pkg" / "scratch.py").unlink()
    removed = _lint(package, "main.py")
    assert (removed.analysed, _found(removed)) == (redone, _found(cold))


def test_a_new_module_a_chain_spells_is_seen(package: Path) -> None:
    (package / "main.py").write_text(PACKAGE_MODEL.format(imports="import pkg", block="pkg.helpers.block"))
    assert _found(_lint(package, "main.py")) == []  # pkg/helpers.py does not exist yet
    (package / "pkg" / "helpers.py").write_text(RANDOM_BLOCK)
    assert _found(_lint(package, "main.py", "pkg/helpers.py")) == [("pkg/helpers.py", "CKP201", 5)]


def test_a_scratch_file_in_a_new_folder_reanalyses_nothing(project: Path) -> None:
    """A new folder without `__init__.py` is an import root of its own: its top-level names are
    modules added, not a reason to forget every analysis."""
    (project / "blocks.py").write_text(RANDOM_BLOCK)
    cold = _lint(project, "model.py", "blocks.py")
    assert cold.analysed == 1
    (project / "scratch").mkdir()
    (project / "scratch" / "jot.py").write_text("x = 1\n")
    added = _lint(project, "model.py", "blocks.py", "scratch/jot.py")
    assert (added.analysed, _found(added)) == (0, _found(cold))
    (project / "scratch" / "blocks.py").write_text(CLEAN_BLOCK)  # a name another root holds: an import of it may change
    shadowing = _lint(project, "model.py", "blocks.py", "scratch/jot.py", "scratch/blocks.py")
    assert shadowing.analysed == 1 and _found(shadowing) == _found(cold)
    (project / "other").mkdir()
    (project / "other" / "notes.py").write_text("y = 2\n")  # a new root holding a name the project's root holds
    assert _lint(project, "model.py", "blocks.py", "other/notes.py").analysed == 1


def test_a_change_to_ckptlints_own_code_is_not_answered_by_the_old_cache(tmp_path: Path) -> None:
    """The cache is keyed by ckptlint's code, not only its version: a checkout whose rules
    changed, at the same version, must not print what the old code found."""
    import shutil
    import subprocess
    import sys

    from conftest import REPO

    code = tmp_path / "code"
    shutil.copytree(REPO / "ckptlint", code / "ckptlint", ignore=shutil.ignore_patterns("__pycache__"))
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[tool.ckptlint]\n")
    (project / "model.py").write_text("from torch.utils.checkpoint import checkpoint\n\n\ndef f(g, x):\n    return checkpoint(g, x)\n")

    def lint() -> str:
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(code), "CKPTLINT_CACHE_DIR": str(tmp_path / "cache")}
        completed = subprocess.run([sys.executable, "-m", "ckptlint", "model.py"], cwd=project, env=env, capture_output=True, text=True, timeout=300)
        assert completed.returncode == 1, completed.stderr
        return completed.stdout

    assert "called without `use_reentrant`" in lint()
    rule = code / "ckptlint" / "rules" / "ckp101.py"
    rule.write_text(rule.read_text().replace("called without `use_reentrant`", "leaves `use_reentrant` out"))
    assert "leaves `use_reentrant` out" in lint()


def test_class_headers_are_read_once_per_content(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run with many files to analyse reads every file's class headers to order them; the
    cache keeps them per digest, so the next such run reads only the files that changed."""
    import ckptlint.engine.run as run_module

    monkeypatch.setattr(run_module, "PREDICT_FROM", 1)  # predict in every run, as one with 64 files to analyse does
    read: list[bytes] = []
    real = run_module.class_headers
    monkeypatch.setattr(run_module, "class_headers", lambda data: read.append(data) or real(data))
    (project / "blocks.py").write_text(RANDOM_BLOCK)
    (project / "layers.py").write_text("import torch.nn as nn\n\n\nclass Base(nn.Module):\n    pass\n")
    cold = _lint(project, "model.py", "blocks.py", "layers.py", "notes.py")
    assert len(read) == 4
    read.clear()
    (project / "model.py").write_text(MODEL + "\n\nx = 1\n")
    warm = _lint(project, "model.py", "blocks.py", "layers.py", "notes.py")
    assert warm.analysed == 1 and len(read) == 1 and b"x = 1" in read[0]
    assert _found(warm) == _found(cold) == _found(_lint(project, "model.py", "blocks.py", "layers.py", "notes.py", cache=False))
    headers = json.loads(next((project / ".ckptlint_cache").glob("*/*.headers.json")).read_text())["headers"]
    assert [record[1] for path, record in headers.items() if path.endswith("layers.py")] == [[["Base", ["Module", "nn"]]]]


@pytest.mark.parametrize("corrupt", ["not json", '{"format": 0, "headers": {}}', '{"format": %d, "headers": {"/x.py": [1]}}'])
def test_a_malformed_headers_file_is_read_again(project: Path, monkeypatch: pytest.MonkeyPatch, corrupt: str) -> None:
    import ckptlint.engine.run as run_module

    monkeypatch.setattr(run_module, "PREDICT_FROM", 1)
    (project / "blocks.py").write_text(RANDOM_BLOCK)
    cold = _lint(project, "model.py", "blocks.py")
    for headers in (project / ".ckptlint_cache").glob("*/*.headers.json"):
        headers.write_text(corrupt.replace("%d", str(FORMAT)))
    (project / "model.py").write_text(MODEL + "\n")
    assert _found(_lint(project, "model.py", "blocks.py")) == _found(cold)
    assert json.loads(next((project / ".ckptlint_cache").glob("*/*.headers.json")).read_text())["format"] == FORMAT  # rewritten


def test_a_package_initialiser_analysed_first_links_no_later_file_to_the_modules_it_re_exports(tmp_path: Path) -> None:
    """`pkg/__init__.py` re-exports the package's models. Analysed in the shared state of a
    worker, it linked `pkg/a.py` (whose `from pkg.blocks import` loads `pkg` first) to
    `pkg/b.py`, which `a.py` never reads: an edit of `b.py` redid `a.py`. In transformers this
    made every file that a worker analysed after `transformers/__init__.py` depend on every
    model that worker had loaded. The initialiser runs in a state of its own."""
    (tmp_path / "pyproject.toml").write_text("")
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from torch.utils.checkpoint import checkpoint\n\nfrom pkg.a import ModelA\nfrom pkg.b import ModelB\n")
    (package / "blocks.py").write_text("import torch.nn as nn\n\n\nclass Block(nn.Module):\n    def forward(self, x):\n        return x * 2\n")
    model = (
        "import torch.nn as nn\nfrom torch.utils.checkpoint import checkpoint\n\nfrom pkg.blocks import Block\n\n\n"
        "class {name}(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.block = Block()\n\n"
        "    def forward(self, x):\n        return checkpoint(self.block, x, use_reentrant=False)\n"
    )
    (package / "a.py").write_text(model.format(name="ModelA"))
    (package / "b.py").write_text(model.format(name="ModelB"))
    initialiser, _, model_a = _dependencies(tmp_path, ["pkg/__init__.py", "pkg/b.py", "pkg/a.py"])
    assert model_a == {"a.py", "blocks.py"}
    assert initialiser == {"__init__.py"}  # what its own analysis read: nothing it re-exports holds a call of its own


def _compiled_model(name: str) -> str:
    """A block whose region appends to a list: replayed in eager mode (CKP203 warning), refused
    by compile(fullgraph=True) (error), skipped under the side-effect flag (note)."""
    return (
        "import torch\nfrom torch import nn\nfrom torch.utils.checkpoint import checkpoint\n\n\n"
        f"class {name}(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.lin = nn.Linear(4, 4)\n"
        "        self.aux_losses = []\n\n    def inner(self, x):\n        self.aux_losses.append(x.mean())\n        return self.lin(x)\n\n"
        "    def forward(self, x):\n        return checkpoint(self.inner, x, use_reentrant=False)\n"
    )


def _ckp203_severities(project: Path, *named: str) -> list[tuple[str, str]]:
    """(path, severity) of each CKP203, after checking that the cache changes nothing."""
    _same_with_and_without_cache(project, *named)
    return [(f.path, str(f.severity)) for f in _lint(project, *named, cache=False).findings if f.code == "CKP203"]


def test_the_side_effect_flag_set_later_redoes_every_model_that_looked_for_it(project: Path) -> None:
    """Two compiled models analysed in one state: the second read the flag's search from a memo,
    which recorded the files it had searched only when it had found a flag. Setting the flag in
    `config.py` then redid the first model alone: the second kept its error."""
    (project / "model_a.py").write_text(_compiled_model("NetA"))
    (project / "model_b.py").write_text(_compiled_model("NetB"))
    (project / "train.py").write_text(
        "import config\nfrom model_a import NetA\nfrom model_b import NetB\n\n"
        "a = NetA()\na.compile(fullgraph=True)\nb = NetB()\nb.compile(fullgraph=True)\n"
    )
    (project / "config.py").write_text('FLAG = "skip_fwd_side_effects_in_bwd_under_checkpoint"\n')
    named = ("model_a.py", "model_b.py", "train.py", "config.py")
    assert _ckp203_severities(project, *named) == [("model_a.py", "error"), ("model_b.py", "error")]
    (project / "config.py").write_text("import torch._dynamo\n\ntorch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True\n")
    assert _ckp203_severities(project, *named) == [("model_a.py", "note"), ("model_b.py", "note")]


@pytest.mark.parametrize("where", ["sub/train.py", "train_beside.py"])
def test_a_context_file_that_comes_to_name_a_model_redoes_it(project: Path, where: str) -> None:
    """A compile in another directory counts for a model only where that file names the model's
    module, and the model's analysis recorded the file only then: a `train.py` edited to
    compile the model left the cached eager verdict (a file beside the model, new, the same)."""
    (project / "model_c.py").write_text(_compiled_model("NetC"))
    (project / "sub").mkdir()
    (project / "sub" / "train.py").write_text("import torch\n\n\ndef other():\n    return 1\n\n\nf = torch.compile(other, fullgraph=True)\n")
    named = ["model_c.py", "sub/train.py"]
    assert _ckp203_severities(project, *named) == [("model_c.py", "warning")]
    (project / where).write_text("import torch\n\nfrom model_c import NetC\n\nnet = NetC()\nnet.compile(fullgraph=True)\n")
    if where not in named:
        named.append(where)
    assert _ckp203_severities(project, *named) == [("model_c.py", "error")]


@pytest.mark.parametrize("before", ["x = 1\n", None], ids=["edited", "added"])
def test_a_file_beside_a_builder_that_comes_to_build_it_redoes_its_users(project: Path, before: str | None) -> None:
    """A builder's constructor sites are read from the files beside its module that name it
    (modules_beside.py), and the analysis recorded only those: `pkg/user.py`, edited (or
    added) to build `Builder(norm_layer=nn.BatchNorm2d)`, left `pkg/model.py`'s cached
    result without the BatchNorm that a run without the cache reports."""
    from test_construction import builder_package

    package = builder_package(project)
    if before is not None:
        (package / "user.py").write_text(before)
    assert _same_with_and_without_cache(project, "pkg/model.py") == []
    (package / "user.py").write_text("from torch import nn\n\nfrom pkg.builder import Builder\n\nBLOCK = Builder(norm_layer=nn.BatchNorm2d).block()\n")
    assert _same_with_and_without_cache(project, "pkg/model.py") == [("pkg/builder.py", "CKP204", 17)]


def test_a_file_beside_that_names_a_module_but_none_of_its_classes_redoes_nothing(project: Path) -> None:
    """What a changed file beside a module can come to be read for is a class of that module
    (modules_beside.py asks for the files that name a class and its module): naming the module
    alone is no such question. transformers' gguf utilities spell `__init__`, the stem of a
    package initialiser that defines no class; an edit of them redid the 212 entries that depend
    on the initialiser. Here `pkg/user.py` comes to import the builder's module without naming
    `Builder`: the model's cached result stands (and equals a cold one); naming the class redoes it."""
    from test_construction import builder_package

    package = builder_package(project)
    (package / "user.py").write_text("x = 1\n")
    assert _same_with_and_without_cache(project, "pkg/model.py") == []
    (package / "user.py").write_text("import pkg.builder as builder\n\nSIZE = 1\n")
    assert _lint(project, "pkg/model.py").analysed == 0
    assert _same_with_and_without_cache(project, "pkg/model.py") == []
    (package / "user.py").write_text("from torch import nn\n\nfrom pkg.builder import Builder\n\nBLOCK = Builder(norm_layer=nn.BatchNorm2d).block()\n")
    assert _lint(project, "pkg/model.py").analysed == 1
    assert _same_with_and_without_cache(project, "pkg/model.py") == [("pkg/builder.py", "CKP204", 17)]


HUB = "import random\n\nimport torch.nn as nn\n\n\nclass Norm(nn.Module):\n    def forward(self, x):\n        return x * random.random()\n"
# `integration.py` reaches hub.py only in `apply_norm`: through an import there, or at the top
INTEGRATIONS = {
    "inside a function": "import torch\n\nSCALE = 2.0\n\n\ndef apply_norm(x):\n    import hub\n\n    return hub.Norm()(x)\n",
    "at module level": "import torch\n\nfrom hub import Norm\n\nSCALE = 2.0\n\n\ndef apply_norm(x):\n    return Norm()(x)\n",
}
REGION_MODEL = "from torch.utils.checkpoint import checkpoint\n\nimport {imported}\n\n\ndef forward(x):\n    return checkpoint({block}, x, use_reentrant=False)\n"


@pytest.fixture(params=sorted(INTEGRATIONS))
def integration(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """`integration.py` imports `hub.py` and uses it in one function only. `model_b.py`'s region
    calls that function; `model_a.py`'s reads a constant of integration.py; `model_h.py` imports hub.py."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "hub.py").write_text(HUB)
    (tmp_path / "integration.py").write_text(INTEGRATIONS[request.param])
    (tmp_path / "model_a.py").write_text(REGION_MODEL.format(imported="integration", block="lambda x: x * integration.SCALE"))
    (tmp_path / "model_b.py").write_text(REGION_MODEL.format(imported="integration", block="integration.apply_norm"))
    (tmp_path / "model_h.py").write_text(REGION_MODEL.format(imported="hub", block="hub.Norm()"))
    return tmp_path


def _dependencies(project: Path, order: list[str]) -> list[set[str]]:
    """The names of the project files each of `order`'s outcomes depends on, analysed in that
    order in one worker."""
    from ckptlint.engine import worker
    from ckptlint.engine.run import Run
    from ckptlint.prefilter import Names

    linter = Linter(load_config(None, project), base=project, jobs=1)
    paths = [str(project / name) for name in order]
    run = Run(linter, paths, [])
    worker.forget()
    try:
        outcomes, _ = worker.run_job(run.settings, Names.of(linter.catalogue), run.roots, paths, [])
    finally:
        worker.forget()
    return [{Path(path).name for path in outcome.dependencies if project in Path(path).parents} for outcome in outcomes]


def test_an_import_is_a_dependency_once_an_analysis_reads_a_name_it_binds(integration: Path) -> None:
    """In transformers, `integrations/bitnet.py` imports `modeling_llama.py` inside one function
    and `configuration_utils.py` reaches bitnet.py: counted as an edge, it made 751 files depend
    on llama's model file, redone at every edit of it; imports at the top that no analysis reads
    through made a model file depend on 60 modules where a fresh analysis of it reads one. An
    analysis reaches what an import loads only through the names it binds, so an import is
    followed once an analysis in the worker has read one (and then for every later file, whose
    memos may hold what was read)."""
    _, model_a, model_b = _dependencies(integration, ["model_h.py", "model_a.py", "model_b.py"])
    assert model_a == {"model_a.py", "integration.py"}  # hub.py is loaded, and not read through integration.py
    assert model_b == {"model_b.py", "integration.py", "hub.py"}  # its region runs apply_norm
    _, model_b, model_a = _dependencies(integration, ["model_h.py", "model_b.py", "model_a.py"])
    assert "hub.py" in model_a  # read before it: what is memoised about integration.py may hold it


def test_an_edit_behind_an_import_a_region_reads_through_redoes_the_file(integration: Path) -> None:
    cold = _lint(integration, "model_a.py", "model_b.py")
    assert _found(cold) == [("hub.py", "CKP201", 8)]
    (integration / "hub.py").write_text(HUB.replace("x * random.random()", "x * 2"))
    warm = _lint(integration, "model_a.py", "model_b.py")
    assert _found(warm) == [] == _found(_lint(integration, "model_a.py", "model_b.py", cache=False))
    assert warm.analysed >= 1


def test_a_star_import_is_read_whole(tmp_path: Path) -> None:
    """`from hub import *` binds no name of its own: the names it brings are looked up in hub.py
    (`star_target`) whatever is read, so it stays a dependency."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "hub.py").write_text(HUB)
    (tmp_path / "integration.py").write_text("from hub import *\n\nSCALE = 2.0\n")
    (tmp_path / "model_h.py").write_text(REGION_MODEL.format(imported="hub", block="hub.Norm()"))
    (tmp_path / "model_a.py").write_text(REGION_MODEL.format(imported="integration", block="integration.Norm()"))
    _, model_a = _dependencies(tmp_path, ["model_h.py", "model_a.py"])
    assert model_a == {"model_a.py", "integration.py", "hub.py"}


def test_a_name_resolved_through_an_evicted_module_is_read_again(tmp_path: Path) -> None:
    """A worker drops most loaded modules every few hundred (`shrink`). What a dotted name
    resolves to was memoised across that, so a re-export (`from hub import Norm` in
    integration.py) answered from the memo read no binding of the reloaded module, whose import
    of hub.py then did not count as read: a file resolving `integration.Norm` after the drop
    would not depend on hub.py. Answers read through a released module are dropped with it."""
    from ckptlint.project import Project

    (tmp_path / "hub.py").write_text(HUB)
    (tmp_path / "integration.py").write_text(INTEGRATIONS["at module level"])
    project = Project([tmp_path])
    assert project.canonical_name("integration.Norm") == "hub.Norm"
    project.evict({tmp_path / "hub.py"})  # integration.py is released
    assert project.loaded_at(str(tmp_path / "integration.py")) is None
    assert project.canonical_name("integration.Norm") == "hub.Norm"
    reloaded = project.loaded_at(str(tmp_path / "integration.py"))
    assert reloaded is not None and reloaded.symbols is not None
    assert "hub.Norm" in reloaded.symbols.imports_read  # the import counts as read in the module now loaded


REGISTRY = '''\
class Registry:
    def __init__(self, name):
        self._classes = {}

    def register_module(self, name=None):
        def add(cls):
            self._classes[name or cls.__name__] = cls
            return cls

        return add

    def build(self, cfg):
        options = dict(cfg)
        return self._classes[options.pop("type")](**options)


BLOCKS = Registry("blocks")
'''
REGISTERED = '''\
from torch import nn

from registry import BLOCKS


@BLOCKS.register_module()
class Block(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.norm = nn.BatchNorm1d(width)

    def forward(self, x):
        return self.norm(x)
'''
BUILDING = '''\
from torch import nn
from torch.utils.checkpoint import checkpoint

import blocks  # registers Block
from registry import BLOCKS


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = BLOCKS.build(dict(type="Block"))

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False)
'''


def test_a_module_read_for_its_registrations_is_a_dependency(tmp_path: Path) -> None:
    """`import blocks` binds a name the model never reads: the registry's build reads the
    registrations of the modules the model imports (zoo.py), which is a read of blocks.py all
    the same, so an edit of its block redoes the model."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "registry.py").write_text(REGISTRY)
    (tmp_path / "blocks.py").write_text(REGISTERED)
    (tmp_path / "model.py").write_text(BUILDING)
    [model] = _dependencies(tmp_path, ["model.py"])
    assert model == {"model.py", "registry.py", "blocks.py"}
    assert _found(_lint(tmp_path, "model.py", "blocks.py")) == [("blocks.py", "CKP204", 13)]
    (tmp_path / "blocks.py").write_text(REGISTERED.replace("BatchNorm1d", "LayerNorm"))
    assert _found(_lint(tmp_path, "model.py", "blocks.py")) == [] == _found(_lint(tmp_path, "model.py", "blocks.py", cache=False))
