"""The shortcuts that keep the region analysis fast give the answers of the slow way."""

from __future__ import annotations

import ast
from pathlib import Path

from ckptlint.calls import _lines_matching
from ckptlint.prefilter import Names
from ckptlint.project import Project
from ckptlint.source import SourceFile
from ckptlint.syntax import _LEAVES, walk, walk_branches

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
