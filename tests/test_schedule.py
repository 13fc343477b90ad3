"""The order a run analyses files in (engine/schedule.py): predicted layer classes, files held
until their definers are analysed, and a run over a layer zoo that analyses each file once."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

from ckptlint.config import Config
from ckptlint.engine import Linter, run, worker
from ckptlint.engine.parallel import Workers
from ckptlint.engine.schedule import Schedule, class_headers, predicted_classes


def test_class_headers_are_each_class_with_the_words_of_its_bases() -> None:
    data = b"class A(nn.Module):\n    pass\n\n  class B(\n    A, Mixin[int],\n):\n    ...\nclass C:\n    x = 'class D(A)'\n"
    assert class_headers(data) == [("A", frozenset({b"nn", b"Module"})), ("B", frozenset({b"A", b"Mixin", b"int"}))]
    assert class_headers(b"def f(x):\n    return x\n") == []


def test_predicted_classes_close_over_bases_and_name_every_definer() -> None:
    headers = {
        "layers.py": [("Layer", frozenset({b"GradientCheckpointingLayer"})), ("Norm", frozenset({b"nn", b"Module"}))],
        "modular.py": [("Layer", frozenset({b"GradientCheckpointingLayer"}))],  # generated and modular file define it alike
        "users.py": [("Deep", frozenset({b"Wide"})), ("Wide", frozenset({b"layers", b"Layer"}))],  # a subclass defined before its base
        "other.py": [("Unrelated", frozenset({b"Norm"}))],
    }
    assert predicted_classes(headers, {"GradientCheckpointingLayer"}) == {
        "Layer": {"layers.py", "modular.py"},
        "Wide": {"users.py"},
        "Deep": {"users.py"},
    }
    assert predicted_classes(headers, {"Layer", "GradientCheckpointingLayer"}).keys() == {"Wide", "Deep"}  # known names are not predicted


def test_a_file_is_released_after_the_files_it_waits_for_first_in_line() -> None:
    schedule = Schedule(["a", "b", "c", "d"], {"b": {"d"}, "c": {"a", "d", "elsewhere"}})  # a file outside the schedule is not waited for
    everything = lambda path: True  # noqa: E731
    assert schedule.take(1, everything) == ["a"] and len(schedule) == 3
    schedule.done(["a"])
    assert schedule.take(5, everything) == ["d"]
    schedule.done(["d"])
    assert schedule.take(5, everything) == ["b", "c"] and len(schedule) == 0
    assert not schedule.unblock() and "a" in schedule and "elsewhere" not in schedule


def test_a_file_not_wanted_is_done_at_once_and_a_cycle_is_released_whole() -> None:
    schedule = Schedule(["a", "b", "c"], {"b": {"a"}, "c": {"b"}})
    assert schedule.take(5, lambda path: path != "a") == ["b"]  # `a` is not analysed: `b` goes at once
    cycle = Schedule(["x", "y", "z"], {"x": {"y"}, "y": {"x"}})
    assert cycle.take(5, lambda path: True) == ["z"]
    cycle.done(["z"])
    assert cycle.take(5, lambda path: True) == [] and cycle.unblock()
    assert cycle.take(5, lambda path: True) == ["x", "y"] and not cycle.unblock()
    cycle.retry(["y"])
    assert cycle.take(5, lambda path: True) == ["y"]


LAYERS = "from transformers.modeling_layers import GradientCheckpointingLayer\n\n\nclass Layer{index}(GradientCheckpointingLayer):\n    def forward(self, x):\n        return x * 2\n"
USERS = (
    "import random\n\nfrom layers_{index} import Layer{index}\n\n\n"
    "class NoisyLayer{index}(Layer{index}):\n    def forward(self, x):\n        return x * random.random()\n"
)
MODEL = (
    "from torch import nn\n\nfrom users_{index} import NoisyLayer{index}\n\n\nclass Model(nn.Module):\n"
    "    def __init__(self):\n        super().__init__()\n        self.gradient_checkpointing = True\n        self.layers = nn.ModuleList([NoisyLayer{index}()])\n\n"
    "    def forward(self, x):\n        return self.layers[0](x)\n"
)


def _layer_zoo(root: Path, count: int) -> None:
    """`count` chains: layers_i.py defines a GradientCheckpointingLayer; users_i.py, which names
    no checkpoint API, subclasses it with a Python draw; model_i.py, a candidate from the start
    (it sets `gradient_checkpointing`), builds the subclass. Only layers_i.py's analysis adds
    `Layer{i}`, and only users_i.py's adds `NoisyLayer{i}`."""
    (root / "pyproject.toml").write_text("[tool.ckptlint]\n")
    for index in range(count):
        (root / f"layers_{index}.py").write_text(LAYERS.format(index=index))
        (root / f"users_{index}.py").write_text(USERS.format(index=index))
        (root / f"model_{index}.py").write_text(MODEL.format(index=index))


def _lint_counting(root: Path, monkeypatch: pytest.MonkeyPatch, jobs: int) -> tuple[list[tuple[str, str, int]], list[int], list[str]]:
    """Findings, the files each pass scheduled, and every file analysed (in the order analysed)."""
    passes: list[int] = []
    analysed: list[str] = []
    real_execute, real_record = Workers.execute, run.RunFeed.record

    def counting(self: Workers, settings: Any, roots: Any, feed: Any, *rest: Any) -> Any:
        passes.append(len(feed))
        return real_execute(self, settings, roots, feed, *rest)

    def recording(self: run.RunFeed, outcomes: Any, *rest: Any) -> Any:
        analysed.extend(Path(o.path).name for o in outcomes if o.analysed)
        return real_record(self, outcomes, *rest)

    monkeypatch.setattr(Workers, "execute", counting)
    monkeypatch.setattr(run.RunFeed, "record", recording)
    result = Linter(Config(root=root), base=root, jobs=jobs).lint_files(sorted(root.glob("*.py")), project_root=root)
    return [(f.path, f.code, f.line) for f in result.findings], passes, analysed


@pytest.mark.parametrize("jobs, chains", [(1, 3), (2, 6)])  # 18 files: two worker processes
def test_a_zoo_of_subclassed_layers_is_analysed_once_in_one_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int, chains: int) -> None:
    _layer_zoo(tmp_path, chains)
    monkeypatch.setattr(run, "PREDICT_FROM", 0)
    found, passes, analysed = _lint_counting(tmp_path, monkeypatch, jobs)
    assert found == [(f"users_{index}.py", "CKP201", 8) for index in range(chains)]
    assert passes == [3 * chains]
    assert sorted(analysed) == sorted(f"{kind}_{index}.py" for kind in ("layers", "users", "model") for index in range(chains))
    for index in range(chains):  # each after what it subclasses or builds
        assert analysed.index(f"layers_{index}.py") < analysed.index(f"users_{index}.py") < analysed.index(f"model_{index}.py")


def test_without_prediction_the_same_findings_take_more_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _layer_zoo(tmp_path, 3)
    monkeypatch.setattr(run, "PREDICT_FROM", 10_000)  # a pass this small reads no headers
    found, passes, analysed = _lint_counting(tmp_path, monkeypatch, 1)
    assert found == [(f"users_{index}.py", "CKP201", 8) for index in range(3)]
    assert passes == [6, 3, 3]  # layers and models; users once `Layer{i}` came; models again once `NoisyLayer{i}` did
    assert len(analysed) == 12


def _dying_worker(settings: Any, names: Any, roots: Any, analyse: list[str], syntax_only: list[str]) -> Any:
    """worker.run_job, but a worker process given users_3.py dies (module level: the pool pickles it)."""
    if multiprocessing.current_process().name != "MainProcess" and any(path.endswith("users_3.py") for path in analyse):
        os._exit(1)
    return REAL_RUN_JOB(settings, names, roots, analyse, syntax_only)


REAL_RUN_JOB = worker.run_job


def test_a_worker_that_dies_leaves_its_files_to_this_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker killed mid-run (for memory, say): the pool breaks, the files of every job that
    was running are analysed again here, and the findings are those of a run where none died."""
    _layer_zoo(tmp_path, 6)
    monkeypatch.setattr(run, "PREDICT_FROM", 0)
    monkeypatch.setattr(worker, "run_job", _dying_worker)
    fallbacks: list[bool] = []
    real_fallback = Workers._run_in_process
    monkeypatch.setattr(Workers, "_run_in_process", lambda self, *rest: (fallbacks.append(True), real_fallback(self, *rest))[1])
    found, _, analysed = _lint_counting(tmp_path, monkeypatch, 2)
    assert fallbacks  # the pool broke; the rest ran here
    assert found == [(f"users_{index}.py", "CKP201", 8) for index in range(6)]
    assert set(analysed) == {f"{kind}_{index}.py" for kind in ("layers", "users", "model") for index in range(6)}
