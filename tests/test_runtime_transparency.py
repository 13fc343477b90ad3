"""The companion's two promises on the shapes that once broke them, in both modes: the
user's step is bit-identical with and without it (parameters, buffers, `.grad`, loss, the
torch/Python/NumPy streams, generators and side effects after the step), and its verdict
says what checkpointing really changes (checked against the step run without
checkpointing), naming the object."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest
import torch
from conftest import FIXTURES
from torch.utils.checkpoint import checkpoint

from ckptlint.runtime import audit
from ckptlint.runtime.join import CONFIRMED, join
from fixtures.runtime import harness, shapes

CASES = [(name, mode) for name, (_, expected) in sorted(shapes.SHAPES.items()) for mode in harness.MODES if mode in expected]


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_the_users_step_is_bit_identical_with_the_companion(name: str, mode: str) -> None:
    step, _ = shapes.SHAPES[name]
    changed, report = harness.transparency(step, mode)
    assert report.records, "no checkpoint call was probed"
    assert changed == [], f"the companion changed the user's step: {changed}\n{report.render()}"


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_the_verdict_says_what_checkpointing_changes(name: str, mode: str) -> None:
    step, expected = shapes.SHAPES[name]
    expect = expected[mode]
    _, report = harness.transparency(step, mode)
    assert harness.ground_truth(step, mode) == expect.aspects, "the fixture's expectation is wrong"
    verdicts = {record.verdict for record in report.records}
    assert verdicts == {expect.verdict}, report.render()
    assert harness.observed_aspects(report) == expect.aspects, report.render()
    named = {(reason["category"], reason["name"]) for record in report.records for reason in record.reasons}
    assert expect.reasons <= named, report.render()


def test_a_stream_that_moved_without_changing_values_reads_as_such() -> None:
    _, report = harness.transparency(shapes.python_random_scale, "non-reentrant")
    [record] = report.records
    assert record.verdict == "diverges" and record.aspects == ["rng-stream"]
    assert [reason["aspect"] for reason in record.reasons] == ["rng-stream"]
    assert record.summary == "RNG stream position (Python random) differs; outputs, gradients, state and side effects are equal"
    assert record.summary in record.describe()
    # the reentrant recompute rebuilds the graph with the redrawn scale: a gradient bug too
    _, reentrant = harness.transparency(shapes.python_random_scale, "reentrant")
    [record] = reentrant.records
    assert record.aspects == ["gradients", "rng-stream"]
    assert record.summary == "gradients and RNG stream position (Python random) differ; outputs, state and side effects are equal"


def test_the_report_keeps_its_json_shape_and_adds_what_differs() -> None:
    _, report = harness.transparency(shapes.list_argument, "non-reentrant")
    [data] = json.loads(report.to_json())["records"]
    assert {"site", "region", "api", "flags", "device", "verdict", "reasons"} <= set(data)
    assert data["aspects"] == ["side-effects"] and "side effects differ" in data["summary"]
    [reason] = data["reasons"]
    assert set(reason) == {"category", "name", "max_abs", "max_rel", "detail", "aspect"}
    assert (reason["category"], reason["name"], reason["aspect"]) == ("container", "args[1]", "side-effects")
    assert reason["detail"] == "1 elements without checkpointing, 2 with"


def test_equivalent_records_say_everything_agrees() -> None:
    _, report = harness.transparency(shapes.sequential(True, "keyword"), "non-reentrant")
    [record] = report.records
    assert record.verdict == "equivalent" and record.aspects == []
    assert record.summary == "outputs, gradients, RNG streams, state and side effects are equal"


def test_a_private_torch_generator_is_a_stream_checkpoint_does_not_preserve() -> None:
    """Joined as rng-python (CKP201's "generator" case), not as torch's preserved streams."""
    _, report = harness.transparency(shapes.generator_on_module("torch"), "non-reentrant")
    finding = {"path": "model.py", "line": 1, "code": "CKP201", "message": ""}
    [record] = report.records
    region = record.region
    finding.update(path=region["path"], line=region["first_line"])
    joined, _ = join(report.records, [finding], "/")
    assert joined[0]["status"] == CONFIRMED, record.describe()


def _line(marker: str) -> int:
    text = (FIXTURES / "runtime" / "shapes.py").read_text().splitlines()
    return next(number for number, line in enumerate(text, 1) if marker in line)


@pytest.mark.parametrize("mode", harness.MODES)
@pytest.mark.parametrize(
    ("name", "code", "marker"),
    [
        ("nonlocal_counter", "CKP202", "# the line CKP202 flags"),
        ("list_argument", "CKP203", "# the line CKP203 flags"),
    ],
)
def test_side_effects_confirm_the_static_finding(name: str, code: str, marker: str, mode: str) -> None:
    from ckptlint.runtime.confirm import static_findings

    step, _ = shapes.SHAPES[name]
    _, report = harness.transparency(step, mode)
    path = FIXTURES / "runtime" / "shapes.py"
    static = static_findings(None, [str(path)])
    assert static is not None
    findings, base = static
    line = _line(marker)
    wanted = [f for f in findings if f["code"] == code and Path(base, f["path"]).resolve() == path.resolve() and f["line"] == line]
    assert wanted, f"the linter no longer flags {code} at shapes.py:{line}: {findings}"
    joined, missed = join(report.records, wanted, base)
    assert [item["status"] for item in joined] == [CONFIRMED]
    assert missed == []


class _BuildsOnLookup(collections.OrderedDict):  # type: ignore[type-arg]
    """A mapping whose lookup builds a fresh object, as transformers' activation table does."""

    def __getitem__(self, key: str) -> torch.nn.Module:
        return super().__getitem__(key)()  # type: ignore[no-any-return]


FACTORIES = _BuildsOnLookup(relu=torch.nn.ReLU)


def test_a_mapping_that_builds_on_lookup_is_restored_as_it_was() -> None:
    layer = torch.nn.Linear(4, 4)

    def region(x: torch.Tensor) -> torch.Tensor:
        return FACTORIES["relu"](layer(x))

    with audit() as report:
        checkpoint(region, torch.randn(2, 4, requires_grad=True), use_reentrant=False).sum().backward()
    assert dict.__getitem__(FACTORIES, "relu") is torch.nn.ReLU, "the snapshot stored what a lookup built"
    assert [record.verdict for record in report.records] == ["equivalent"], report.render()


def _sparse_set() -> set[int]:
    """A set whose table grew and then emptied: clearing and refilling it with the same
    items iterates them in another order (timm's `_NORM_ACT_REQUIRES_ARG` is such a set)."""
    table = set(range(100))
    table.difference_update(range(95))
    refilled = set()
    refilled.update(list(table))
    assert list(refilled) != list(table), "the fixture no longer reorders on refill"
    return table


KINDS = _sparse_set()


@pytest.mark.parametrize("mode", ["non-reentrant", "reentrant"])
def test_a_module_level_set_the_region_only_reads_keeps_its_order(mode: str) -> None:
    layer = torch.nn.Linear(4, 4)
    order = list(KINDS)

    def region(x: torch.Tensor) -> torch.Tensor:
        return layer(x) * (1.0 if 97 in KINDS else 2.0)

    with audit() as report:
        checkpoint(region, torch.randn(2, 4, requires_grad=True), use_reentrant=mode == "reentrant").sum().backward()
    assert list(KINDS) == order, "the companion reordered a set the region never wrote"
    assert [record.verdict for record in report.records] == ["equivalent"], report.render()


@pytest.mark.parametrize("mode", ["non-reentrant", "reentrant"])
def test_a_leaf_the_region_makes_for_itself_is_not_a_lost_gradient(mode: str) -> None:
    """T5's layers without a relative bias build `position_bias` as a fresh zero leaf that
    requires grad; each replay makes its own, so its `.grad` is nobody's."""
    layer = torch.nn.Linear(4, 4)

    def region(x: torch.Tensor) -> torch.Tensor:
        bias = torch.zeros(2, 4)
        bias.requires_grad = True
        return layer(x) + bias

    with audit() as report:
        checkpoint(region, torch.randn(2, 4, requires_grad=True), use_reentrant=mode == "reentrant").sum().backward()
    assert [record.verdict for record in report.records] == ["equivalent"], report.render()


def test_gradients_a_failed_replay_never_returned_are_explained_by_what_explains_the_failure() -> None:
    """GIT's cache updated a second time makes the checkpointed replay raise; the parameters
    it never reached have no gradient. The finding that predicts the error explains both."""
    from ckptlint.runtime.report import Record

    record = Record(
        site={"path": "/m/layers.py", "line": 9, "column": 1},
        region={"name": "Layer.forward", "path": "/m/model.py", "first_line": 10, "last_line": 20},
        api="non-reentrant", flags={}, device="cpu", verdict="error",
        reasons=[
            {"category": "error", "name": "checkpointed replay", "detail": "RuntimeError: size mismatch"},
            {"category": "parameter-grad-missing", "name": "region.proj.weight", "cause": "unexplained"},
        ],
    )  # fmt: skip
    finding = {"path": "/m/model.py", "line": 15, "column": 5, "code": "CKP203", "message": "`.update()` on `cache`"}
    assert join([record], [finding], "/")[1] == []
    unexplained = {item["category"] for item in join([record], [], "/")[1]}
    assert unexplained == {"error", "parameter-grad-missing:unexplained"}


ROUTE = """\
import torch
from torch.utils.checkpoint import checkpoint


def route(x, scores):
    _, experts = torch.topk(scores, 2)
    return x[experts]


def step():
    x = torch.randn(6, 3, requires_grad=True)
    scores = torch.randn(6, requires_grad=True)
    checkpoint(route, x, scores, use_reentrant=False).sum().backward()
"""


def test_a_routing_selection_recomputed_on_cpu_is_not_confirmable_there(tmp_path: Path) -> None:
    """CKP504's recompute differs only through non-deterministic kernels upstream: a CPU replay
    from the same state picks the same indices, which says nothing either way."""
    import importlib.util

    from ckptlint.runtime.confirm import static_findings
    from ckptlint.runtime.join import NEEDS_GPU

    path = tmp_path / "route.py"
    path.write_text(ROUTE)
    static = static_findings(None, [str(path)])
    assert static is not None
    findings, base = static
    wanted = [f for f in findings if f["code"] == "CKP504"]
    assert [(f["line"], f["column"]) for f in wanted] == [(6, 18)]
    spec = importlib.util.spec_from_file_location("route", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with audit() as report:
        module.step()
    [record] = report.records
    assert record.verdict == "equivalent" and record.device == "cpu"
    joined, _ = join(report.records, wanted, base)
    assert [item["status"] for item in joined] == [NEEDS_GPU]


SEQUENTIAL_REGION = """\
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

STEM = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4))


def step():
    x = torch.randn(2, 3, 4, 4, requires_grad=True)
    checkpoint(STEM, x, use_reentrant=True).sum().backward()
"""


def test_a_container_region_s_running_stats_are_confirmed_at_the_call(tmp_path: Path) -> None:
    """A Sequential that is itself the region has no line of the project inside it: its
    BatchNorm is reported at the checkpoint call (mmpretrain's RepLKNet stem), where the join
    must look for it."""
    import importlib.util

    from ckptlint.runtime.confirm import static_findings

    path = tmp_path / "stem.py"
    path.write_text(SEQUENTIAL_REGION)
    static = static_findings(None, [str(path)])
    assert static is not None
    findings, base = static
    wanted = [f for f in findings if f["code"] == "CKP204"]
    assert [f["line"] for f in wanted] == [10]
    spec = importlib.util.spec_from_file_location("stem", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with audit() as report:
        module.step()
    joined, missed = join(report.records, wanted, base)
    assert [item["status"] for item in joined] == [CONFIRMED]
    assert not [m for m in missed if m["category"] == "buffer"]
