"""Static cost hints (analysis/regions/cost_hints.py): every call in fixtures/cost_hints has exactly the
hints its line marks (`# hint: KIND`; no mark, no hint), in-process and through `ckptlint calls`;
a lint neither computes them nor changes its findings."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from ckptlint.config import Config, find_config, load_config
from ckptlint.engine import Linter
from ckptlint.engine.cache import CacheEntry, MalformedCache
from conftest import FIXTURES, REPO, fixture_files, run_cli

HINTS = FIXTURES / "cost_hints"
_HINT = re.compile(r"#\s*hint:\s*([\w-]+(?:\s*,\s*[\w-]+)*)")
MESSAGES = {
    "single-cheap-op": (
        "the region is one elementwise op or norm (nn.LayerNorm): it saves little beyond its input, which the checkpoint "
        "keeps anyway, while the checkpoint adds a call and a recompute; checkpoint it together with the layers around it, "
        "or not at all"
    ),
    "embedding": (
        "the region is an embedding lookup (nn.Embedding): its backward keeps only the indices, which the checkpoint keeps "
        "as well, so checkpointing it frees nothing; leave it out of the region"
    ),
    "last-block": (
        "every block of `self.blocks` is checkpointed, the last one included: its recompute runs first in backward, right "
        "after the head's forward, so checkpointing it lowers no peak memory while it still pays the recompute; skip the "
        "last block (`if i < len(self.blocks) - 1`, or loop over `self.blocks[:-1]` and call the last block plainly)"
    ),
}


def _relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def expected_hints() -> dict[tuple[str, int], list[str]]:
    """(path, line) -> the hint kinds its `# hint:` comment marks."""
    found: dict[tuple[str, int], list[str]] = {}
    for path in fixture_files(HINTS):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            match = _HINT.search(line)
            if match:
                found[(_relative(path), number)] = [kind.strip() for kind in match.group(1).split(",")]
    return found


def _hints_by_call(calls: list[dict[str, Any]]) -> dict[tuple[str, int], list[str]]:
    return {(c["path"], c["line"]): [h["kind"] for h in c["hints"]] for c in calls if c["path"].startswith("fixtures/cost_hints/")}


def _lint(want_hints: bool, cache_dir: Path | None = None, path: Path = HINTS):
    config = load_config(find_config(path), REPO)
    return Linter(config, base=REPO, want_hints=want_hints, cache_dir=cache_dir).lint_paths([path], project_root=FIXTURES)


def _assert_marked(calls: list[dict[str, Any]]) -> None:
    actual = _hints_by_call(calls)
    expected = expected_hints()
    assert set(expected) <= set(actual), f"marked lines without a recognised call: {sorted(set(expected) - set(actual))}"
    assert {site: kinds for site, kinds in actual.items() if kinds} == expected
    # the safe twins are recognised calls too, with no hint
    assert sum(1 for kinds in actual.values() if not kinds) >= 15


def test_every_call_has_exactly_the_marked_hints_in_process() -> None:
    result = _lint(want_hints=True)
    _assert_marked(result.calls)
    assert {kind for kinds in expected_hints().values() for kind in kinds} == {"single-cheap-op", "embedding", "last-block"}


def test_a_function_named_checkpoint_that_is_not_torchs_is_no_call_and_gets_no_hint() -> None:
    result = _lint(want_hints=True, path=HINTS / "not_torch_checkpoint.py")
    assert [c for c in result.calls if c["path"].endswith("not_torch_checkpoint.py")] == []


def test_the_messages_say_why_and_what_to_do() -> None:
    by_site = {(c["path"], c["line"]): c["hints"] for c in _lint(want_hints=True).calls}
    norm = by_site[("fixtures/cost_hints/single_cheap_op.py", 52)]
    embedding = by_site[("fixtures/cost_hints/embedding.py", 16)]
    loop = by_site[("fixtures/cost_hints/last_block.py", 26)]
    assert norm == [{"kind": "single-cheap-op", "message": MESSAGES["single-cheap-op"]}]
    assert embedding == [{"kind": "embedding", "message": MESSAGES["embedding"]}]
    assert loop == [{"kind": "last-block", "message": MESSAGES["last-block"]}]
    relu = by_site[("fixtures/cost_hints/single_cheap_op.py", 51)]
    assert relu[0]["message"].startswith("the region is one elementwise op or norm (F.relu): ")


def test_a_lint_computes_no_hints_and_its_findings_are_unchanged() -> None:
    linted, hinted = _lint(want_hints=False), _lint(want_hints=True)
    assert linted.calls and all("hints" not in call and "coverage" not in call for call in linted.calls)
    assert [{k: v for k, v in call.items() if k not in ("hints", "coverage")} for call in hinted.calls] == linted.calls
    assert linted.findings == hinted.findings == []


def test_cli_calls_json_lists_the_hints() -> None:
    completed = run_cli("calls", "fixtures/cost_hints", "--format", "json", "--no-cache")
    assert completed.returncode == 0, completed.stderr
    calls = json.loads(completed.stdout)
    assert all(set(call["hints"][0]) == {"kind", "message"} for call in calls if call["hints"])
    _assert_marked(calls)
    assert not any(call["path"].endswith("not_torch_checkpoint.py") for call in calls)


def test_cli_calls_text_prints_each_hint_under_its_call() -> None:
    completed = run_cli("calls", "fixtures/cost_hints/last_block.py", "--no-cache")
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.decode().splitlines()
    at = lines.index(
        'fixtures/cost_hints/last_block.py:26:17: torch.utils.checkpoint.checkpoint region=block mode=non-reentrant source="use_reentrant=False"'
    )
    assert lines[at + 1] == f"    hint (last-block): {MESSAGES['last-block']}"
    assert sum(line.startswith("    hint (last-block): ") for line in lines) == 4


def test_the_lint_shows_no_finding_on_the_hint_fixtures() -> None:
    completed = run_cli("fixtures/cost_hints", "--no-cache")
    assert completed.returncode == 0, completed.stdout


def _warm(want_hints: bool, cache: Path):
    """Lint until a run analyses nothing (a second cold-ish run may redo the few files whose
    names the first run learnt late: the engine's own business, not the hints')."""
    for _ in range(3):
        result = _lint(want_hints, cache)
        if result.analysed == 0:
            return result
    raise AssertionError("the cache never answered a whole run")


def test_the_cache_keeps_hints_and_a_lint_entry_is_redone_once_for_calls(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    linted = _warm(False, cache)
    hinted = _lint(want_hints=True, cache_dir=cache)  # the lint's entries described their calls without hints
    assert hinted.analysed > 0
    _assert_marked(hinted.calls)
    again = _warm(True, cache)
    assert again.calls == hinted.calls
    lint_after = _lint(want_hints=False, cache_dir=cache)  # entries with hints answer a lint too
    assert lint_after.analysed == 0 and lint_after.findings == linted.findings
    assert [{k: v for k, v in call.items() if k not in ("hints", "coverage")} for call in lint_after.calls] == linted.calls


def test_a_cached_call_with_malformed_hints_is_rejected() -> None:
    call = {"path": "m.py", "line": 1, "column": 1, "api": "a", "region": "r", "mode": "m", "mode_defaulted": False, "mode_source": "s"}
    entry = {"kind": "analysed", "digest": "d", "hits": [], "findings": [], "names": [[], []], "deps": {}, "key": [], "rules": "all"}
    coverage = {"calls": 1, "resolved": 1, "unresolved": []}
    good = CacheEntry.from_dict({**entry, "calls": [{**call, "hints": [{"kind": "embedding", "message": "m"}], "coverage": coverage}]})
    assert good.has_hints
    assert not CacheEntry.from_dict({**entry, "calls": [call]}).has_hints
    assert not CacheEntry.from_dict({**entry, "calls": [{**call, "hints": []}]}).has_hints  # described before coverage was
    for bad in ({"calls": 1}, {"calls": 1, "resolved": 0, "unresolved": [{"path": "m.py", "line": "1"}]}):
        with pytest.raises(MalformedCache):
            CacheEntry.from_dict({**entry, "calls": [{**call, "hints": [], "coverage": bad}]})
    for hints in ({"kind": "x"}, [{"kind": "x"}], [{"kind": 1, "message": "m"}]):
        with pytest.raises(MalformedCache):
            CacheEntry.from_dict({**entry, "calls": [{**call, "hints": hints}]})


def test_hints_in_a_project_outside_the_fixtures(tmp_path: Path) -> None:
    """A block module imported from another file: the loop's container type comes from there."""
    shutil.copy(HINTS / "last_block.py", tmp_path / "blocks.py")
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\n")
    (tmp_path / "model.py").write_text(
        "import torch.nn as nn\nfrom torch.utils.checkpoint import checkpoint\nfrom blocks import Block\n\n\n"
        "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.blocks = nn.ModuleList([Block(8) for _ in range(4)])\n        self.head = nn.Linear(8, 1)\n\n"
        "    def forward(self, x):\n        for block in self.blocks:\n            x = checkpoint(block, x, use_reentrant=False)\n"
        "        return self.head(x)\n"
    )
    linter = Linter(Config(root=tmp_path), base=tmp_path, want_hints=True)
    result = linter.lint_paths([tmp_path / "model.py"], project_root=tmp_path)
    assert [(c["line"], [h["kind"] for h in c["hints"]]) for c in result.calls if c["path"] == "model.py"] == [(14, ["last-block"])]
