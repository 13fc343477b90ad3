"""The shortcuts that keep the region analysis fast give the answers of the slow way."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ckptlint import project as project_module
from ckptlint.calls import _lines_matching
from ckptlint.config import Config
from ckptlint.engine import Linter, worker
from ckptlint.engine.parallel import Workers
from ckptlint.engine.schedule import by_package
from ckptlint.prefilter import _FEW_WORDS, WORDS_ONLY, Names, whole_words
from ckptlint.project import Project
from ckptlint.source import SourceFile
from ckptlint.syntax import _LEAVES, own_nodes, own_statements, walk, walk_branches

SAMPLE = '''\
import torch
from torch.utils.checkpoint import checkpoint as ckpt

class Block(torch.nn.Module):
    def __init__(self, n: int = 2) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(n, n) for _ in range(n)])
        if not self.layers or n > 3:
            self.cache = None; x = -n ** 2 @ n
        del x

    def forward(self, x):
        return ckpt(lambda y: self.layers[0](y) + 1, x, use_reentrant=False)  # checkpoint_seq
'''


def test_walk_branches_is_walk_without_leaves() -> None:
    tree = ast.parse(SAMPLE)
    assert walk_branches(tree) == [node for node in walk(tree) if node.__class__ not in _LEAVES]


def test_lines_matching_is_a_search_per_line() -> None:
    text = SAMPLE.replace("\n", "\r\n", 3) + "xcheckpoint checkpoint_x _checkpoint\rckpt\nckpt2 élan_ckpt ckpt"
    source = SourceFile("m.py", "m.py", text)
    for words in ({"checkpoint", "ckpt"}, {"checkpoint_seq", "x", "self"}, {"absent"}, {"élan_ckpt", "-odd-"}):
        pattern = Names(set(words)).function_pattern()
        assert pattern is not None
        expected = [number for number, line in enumerate(source.lines, 1) if pattern.search(line)]
        assert _lines_matching(source, pattern, words) == expected


def test_name_memos_are_dropped_when_a_root_is_added(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    (first / "app").mkdir(parents=True)
    (first / "app" / "__init__.py").write_text("from lib import Block\n")
    (second / "lib").mkdir(parents=True)
    (second / "lib" / "__init__.py").write_text("class Block: ...\n")
    project = Project([first])
    assert project.canonical_name("app.Block") == "lib.Block"
    assert project.global_binding("app.Block") is None  # `lib` is in no root yet
    assert project.split_module("lib.Block") is None
    project.add_root(second)
    found = project.global_binding("app.Block")
    assert found is not None and found[1].name == "Block"
    assert project.split_module("lib.Block") == (found[0], ("Block",))


# -- the worker state's memory bound and the run's rounds --------------------------------

WRAPPERS = "from functools import partial\nfrom torch.utils.checkpoint import checkpoint\n\nckpt = partial(checkpoint, use_reentrant=False)\n"
SHARED = "import random\n\n\ndef block(x):\n    return x * random.random()\n"
OWN = "def helper(x):\n    return x + {index}\n"
MODEL = "from shared import block\nfrom own_{index} import helper\nfrom wrappers import ckpt\n\n\ndef forward(x):\n    return ckpt(block, helper(x))\n"


def _zoo(root: Path, models: int) -> list[Path]:
    """`models` model files that share `shared.py` and `wrappers.py`, each with a module of its
    own. Their calls use `ckpt`, a name only `wrappers.py`'s analysis adds: a second round."""
    (root / "pyproject.toml").write_text("[tool.ckptlint]\n")
    (root / "wrappers.py").write_text(WRAPPERS)
    (root / "shared.py").write_text(SHARED)
    for index in range(models):
        (root / f"own_{index}.py").write_text(OWN.format(index=index))
        (root / f"model_{index}.py").write_text(MODEL.format(index=index))
    return [root / "wrappers.py", *(root / f"model_{index}.py" for index in range(models))]


def _lint_counting_parses(root: Path, named: list[Path], monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[str, str, int]], Counter[str]]:
    parsed: Counter[str] = Counter()
    real_parse = project_module.parse

    def counting(source: SourceFile) -> object:
        parsed[Path(source.path).name] += 1
        return real_parse(source)

    monkeypatch.setattr(project_module, "parse", counting)
    result = Linter(Config(root=root), base=root, jobs=1).lint_files(named, project_root=root)
    return [(f.path, f.code, f.line) for f in result.findings], parsed


def test_a_state_past_its_bound_keeps_the_modules_most_files_need(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    named = _zoo(tmp_path, 12)
    unbounded, _ = _lint_counting_parses(tmp_path, named, monkeypatch)
    monkeypatch.setattr(worker, "MAX_MODULES", 4)  # every few files: dropped but for the hottest
    monkeypatch.setattr(worker, "HOT_MODULES", 2)
    bounded, parsed = _lint_counting_parses(tmp_path, named, monkeypatch)
    assert bounded == unbounded and ("shared.py", "CKP201", 5) in bounded
    assert parsed["shared.py"] == parsed["wrappers.py"] == 1  # every model depends on both
    assert all(parsed[f"model_{index}.py"] == 1 for index in range(12))
    monkeypatch.setattr(worker, "HOT_MODULES", 0)  # the old bound: drop everything
    assert _lint_counting_parses(tmp_path, named, monkeypatch)[1]["shared.py"] > 1


def test_a_later_round_reuses_the_modules_an_earlier_one_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    named = _zoo(tmp_path, 3)
    rounds: list[int] = []
    real_execute = Workers.execute

    def counting(self: Workers, settings: Any, roots: Any, feed: Any, *rest: Any) -> Any:
        rounds.append(len(feed))
        return real_execute(self, settings, roots, feed, *rest)

    monkeypatch.setattr(Workers, "execute", counting)
    found, parsed = _lint_counting_parses(tmp_path, named, monkeypatch)
    assert rounds == [1, 3]  # wrappers.py first; the models once `ckpt` is known
    assert found == [("shared.py", "CKP201", 5)]
    assert parsed["wrappers.py"] == 1


def test_evicting_keeps_the_kept_modules_and_what_names_resolve_to(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from b import thing\n")
    (tmp_path / "b.py").write_text("thing = 1\n")
    project = Project([tmp_path])
    kept = project.load(tmp_path / "a.py")
    dropped = project.module_named("b")
    assert dropped is not None and project.global_binding("b.thing") is not None
    assert project.canonical_name("a.thing") == "b.thing"
    project.evict({kept.path})
    assert project.loaded() == [kept]
    assert project.canonical_name("a.thing") == "b.thing"  # a name's answer does not depend on what is loaded
    found = project.global_binding("b.thing")  # held the released module: asked again, loads it again
    assert found is not None and found[0] is not dropped


def test_files_of_a_directory_go_together_largest_directory_first() -> None:
    sizes = {"x/a.py": 1, "y/b.py": 50, "x/c.py": 9, "y/d.py": 2, "z/e.py": 5}
    assert by_package(list(sizes), sizes.__getitem__) == ["y/b.py", "y/d.py", "x/c.py", "x/a.py", "z/e.py"]


def test_own_nodes_are_the_def_s_nodes_each_once_without_nested_definitions() -> None:
    function = ast.parse(
        "def f(a):\n"
        "    if a:\n"
        "        for i in a:\n"
        "            g(lambda: i)\n"
        "    def inner():\n"
        "        hidden()\n"
        "    class Inner:\n"
        "        hidden_too = 1\n"
        "    return a\n"
    ).body[0]
    nodes = [node for node in own_nodes(function) if not isinstance(node, ast.expr_context)]  # shared singletons
    assert len(nodes) == len({id(node) for node in nodes})
    expected = {id(node) for statement in own_statements(function) for node in ast.walk(statement) if not isinstance(node, ast.expr_context)}
    assert {id(node) for node in nodes} == expected
    names = {node.id for node in nodes if isinstance(node, ast.Name)}
    assert {"a", "i", "g"} <= names and not names & {"hidden", "Inner", "hidden_too"}


def test_word_split_is_the_regex_word_scan() -> None:
    data = SAMPLE.encode() + bytes(range(256)) + "élan_ckpt x2 _y".encode()
    assert set(data.translate(WORDS_ONLY).split()) == set(re.findall(rb"\w+", data))


def test_a_few_names_are_found_as_the_word_split_finds_them() -> None:
    data = b"ckpt" + SAMPLE.encode() + bytes(range(256)) + "élan_ckpt x2 _y\nBlock".encode()
    names = [b"ckpt", b"checkpoint", b"checkpoint_seq", b"Block", b"lan_ckpt", b"x2", b"x", b"_y", b"layers", b"seq", b"absent"]
    words = set(data.translate(WORDS_ONLY).split())
    for count in (1, 3, len(names)):
        wanted = frozenset(names[:count])
        assert whole_words(data, wanted) == wanted & words
    many = frozenset(names + [f"name{i}".encode() for i in range(_FEW_WORDS)])
    assert whole_words(data, many) == many & words == {b"ckpt", b"checkpoint", b"checkpoint_seq", b"Block", b"lan_ckpt", b"x2", b"x", b"_y", b"layers"}


def test_lines_without_a_carriage_return_split_as_the_regex_does() -> None:
    for text in ("", "a", "a\n", "a\nb\n\n", "a\r\nb\rc\n", "x\r", "é\nü\x0c\n", SAMPLE):
        source = SourceFile("m.py", "m.py", text)
        assert source.lines == re.split(r"\r\n|\r|\n", text)
        assert source.parse_text == re.sub(r"\r\n|\r|\n", "\n", text)


def test_mentions_answer_each_set_of_names_as_a_fresh_scan_would() -> None:
    """`Mentions` keeps `words - checked` per pair of sets, by identity, since the files the
    cache knows share one `checked`: every answer must still be the scan's for the names asked,
    whichever sets were asked before (a memo by `id` alone would answer for a dead set whose id
    a new one took)."""
    from ckptlint.prefilter import Mentions

    data = {"a.py": b"import ckpt\nx = checkpoint(f, y)\n", "b.py": b"y = 1\n"}
    universe = frozenset({"checkpoint"})
    recorded = {"a.py": (universe, frozenset({"checkpoint"})), "b.py": (universe, frozenset())}
    mentions = Mentions(data.get, recorded)
    assert mentions.of("a.py", frozenset({"checkpoint"})) == {"checkpoint"}
    assert mentions.of("a.py", frozenset({"checkpoint", "ckpt"})) == {"checkpoint", "ckpt"}  # read for the new name
    for round_ in range(200):  # a new set each round, dropped after: ids come back
        names = frozenset({"checkpoint", f"name{round_}", *(["y"] if round_ % 2 else [])})
        assert mentions.of("b.py", names) == ({"y"} if round_ % 2 else set())
        assert mentions.of("a.py", names | {"ckpt"}) == {"checkpoint", "ckpt", *(["y"] if round_ % 2 else [])}
