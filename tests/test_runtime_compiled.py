"""Replay C (`confirm --compiled`): each probed call compiled with aot_eager, compared with the
eager replays; and the selective-checkpoint listing of ops saved and recomputed."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch
from torch._dynamo.eval_frame import _debug_get_cache_entry_list
from torch._dynamo.utils import counters
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts, noop_context_fn

from conftest import run_cli
from fixtures.runtime import harness, shapes
from ckptlint.runtime import audit
from ckptlint.runtime.compiled import checkpoint_keywords
from ckptlint.runtime.sac import SacListing
from ckptlint.runtime.report import Record

aten = torch.ops.aten
LOG: list[int] = []
WEIGHT = torch.randn(4, 4, generator=torch.Generator().manual_seed(0), requires_grad=True)


def appends(x: torch.Tensor) -> torch.Tensor:
    LOG.append(1)
    return torch.sin(x) * 2


def drops_out(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.dropout(torch.sin(x), 0.5, training=True)


def two_matmuls(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(torch.mm(torch.mm(x, WEIGHT), WEIGHT))


def saves_relu(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op is aten.relu.default else CheckpointPolicy.PREFER_RECOMPUTE


def the_record(step: Any, compiled: bool = True) -> Record:
    x = torch.randn(4, 4, requires_grad=True)
    with audit(compiled=compiled) as report:
        step(x).sum().backward()
    [record] = report.records
    return record


@pytest.fixture(autouse=True)
def empty_log() -> Iterator[None]:
    LOG.clear()
    yield
    LOG.clear()


def test_a_side_effect_is_rejected_by_fullgraph_and_replayed_after_a_graph_break() -> None:
    record = the_record(lambda x: checkpoint(appends, x, use_reentrant=False))
    assert record.compiled == {
        "backend": "aot_eager",
        "fullgraph": "rejected: HOP: Unsafe side effect",
        "graph_breaks": 1,
        "diverges_from_eager": [],  # the graph break runs the region eagerly checkpointed
        "diverges_from_plain": ["side-effects"],
    }
    assert record.aspects == ["side-effects"]  # nothing compiled-specific to report
    assert "compiled (aot_eager): rejected by fullgraph compile: HOP: Unsafe side effect; 1 graph break(s)" in record.describe()
    assert len(LOG) == 2  # the user's own forward and recompute; every replay's appends were undone


def test_compile_ignoring_preserve_rng_state_is_an_eager_vs_compiled_divergence() -> None:
    record = the_record(lambda x: checkpoint(drops_out, x, use_reentrant=False, preserve_rng_state=False))
    assert record.compiled is not None
    assert (record.compiled["fullgraph"], record.compiled["graph_breaks"]) == ("ok", 0)
    assert record.compiled["diverges_from_eager"] == ["gradients", "rng-stream"]
    assert record.compiled["diverges_from_plain"] == []  # compiled, the mask is the forward's
    compiled = [reason for reason in record.reasons if reason["category"] == "compiled"]
    assert {reason["name"] for reason in compiled} == {"input-grad input[0]", "rng torch CPU generator"}
    assert {reason["aspect"] for reason in compiled} == {"compiled"}
    assert record.verdict == "diverges" and record.aspects == ["gradients", "rng-stream", "compiled"]
    assert "the compiled replay" in record.summary


def test_an_equivalent_call_compiles_to_the_same_results() -> None:
    record = the_record(lambda x: checkpoint(two_matmuls, x, use_reentrant=True))
    assert record.verdict == "equivalent"
    assert record.compiled == {"backend": "aot_eager", "fullgraph": "ok", "graph_breaks": 0, "diverges_from_eager": [], "diverges_from_plain": []}


def test_the_compiled_replay_passes_the_users_flags_that_differ_from_checkpoints_defaults() -> None:
    context_fn = functools.partial(create_selective_checkpoint_contexts, [aten.mm.default])
    flags = {"preserve_rng_state": False, "use_reentrant": False, "use_reentrant_defaulted": None, "context_fn": context_fn, "determinism_check": "default", "debug": False, "early_stop": True}
    assert checkpoint_keywords(flags) == {"preserve_rng_state": False, "use_reentrant": False, "context_fn": context_fn}
    defaults = {"preserve_rng_state": True, "use_reentrant": True, "context_fn": noop_context_fn, "nested": True}
    assert checkpoint_keywords(defaults) == {"use_reentrant": True}  # noop_context_fn passed explicitly fails under compile


def test_without_the_option_no_compiled_replay_runs() -> None:
    record = the_record(lambda x: checkpoint(appends, x, use_reentrant=False), compiled=False)
    assert record.compiled is None and "compiled" not in record.to_dict()


def test_the_users_own_compiled_code_and_dynamo_counters_are_left_alone() -> None:
    def users_step(x: torch.Tensor) -> torch.Tensor:
        return torch.cos(x) + 1

    users_compiled = torch.compile(users_step, backend="aot_eager")
    x = torch.randn(4, 4, requires_grad=True)
    users_compiled(x)
    entries = len(_debug_get_cache_entry_list(users_step.__code__))
    before = {name: dict(counter) for name, counter in counters.items()}
    record = the_record(lambda v: checkpoint(appends, v, use_reentrant=False))
    assert record.compiled is not None and record.compiled["graph_breaks"] == 1  # dynamo did count, then
    assert {name: dict(counter) for name, counter in counters.items() if counter} == {name: c for name, c in before.items() if c}
    assert len(_debug_get_cache_entry_list(users_step.__code__)) == entries
    assert _debug_get_cache_entry_list(appends.__code__) == []  # no compiled code left on the region
    users_compiled(x)  # no recompilation: its cache entry still serves
    assert {name: dict(counter) for name, counter in counters.items() if counter} == {name: c for name, c in before.items() if c}


TRANSPARENCY = [
    ("list_argument", "reentrant"),
    ("list_argument", "non-reentrant"),
    ("python_random_scale", "reentrant"),
    ("python_random_scale", "non-reentrant"),
    ("nonlocal_counter", "non-reentrant"),
    ("sequential_keyword_dropout", "non-reentrant"),
    ("hidden_parameter", "reentrant"),
    ("numpy_RandomState_on_module", "non-reentrant"),
    ("torch_generator_on_module", "reentrant"),
    ("closure_over_user_graph", "non-reentrant"),
]


@pytest.mark.parametrize(("name", "mode"), TRANSPARENCY)
def test_the_users_step_is_bit_identical_with_the_compiled_replay(name: str, mode: str) -> None:
    step, _ = shapes.SHAPES[name]
    changed, report = harness.transparency(step, mode, compiled=True)
    assert report.records and all(record.compiled is not None for record in report.records), report.render()
    assert changed == [], f"the compiled replay changed the user's step: {changed}\n{report.render()}"


# --- the selective-checkpoint listing ------------------------------------------------------


def test_an_op_list_policy_lists_saved_and_recomputed_ops() -> None:
    context_fn = functools.partial(create_selective_checkpoint_contexts, [aten.mm.default])
    record = the_record(lambda x: checkpoint(two_matmuls, x, use_reentrant=False, context_fn=context_fn), compiled=False)
    assert record.sac == {"saved": {"aten.mm.default": 2}, "recomputed": {"aten.relu.default": 1}}
    assert record.verdict == "equivalent"
    assert "    - selective checkpoint: saved aten.mm.default x2; recomputed aten.relu.default x1" in record.describe()
    assert record.to_dict()["sac"] == record.sac


def test_a_policy_function_is_listed_as_it_decides() -> None:
    context_fn = functools.partial(create_selective_checkpoint_contexts, saves_relu)
    record = the_record(lambda x: checkpoint(two_matmuls, x, use_reentrant=False, context_fn=context_fn), compiled=False)
    assert record.sac == {"saved": {"aten.relu.default": 1}, "recomputed": {"aten.mm.default": 2}}


def test_the_listing_does_not_change_what_the_policy_decides() -> None:
    """The user's step under a policy is bit-identical with the companion, and its policy saw the
    same ops in the same order in the user's own call."""
    seen: list[list[str]] = []

    def step(mode: str, checkpointing: bool) -> harness.Results:
        calls: list[str] = []
        seen.append(calls)

        def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
            calls.append(f"{op} {ctx.is_recompute}")
            return CheckpointPolicy.MUST_SAVE if op is aten.mm.default else CheckpointPolicy.PREFER_RECOMPUTE

        lin = torch.nn.Linear(4, 4)
        x = torch.randn(3, 4, requires_grad=True)
        region = lambda v: torch.relu(torch.mm(torch.nn.functional.dropout(v, 0.3), lin.weight))  # noqa: E731
        context_fn = functools.partial(create_selective_checkpoint_contexts, policy)
        out = checkpoint(region, x, use_reentrant=False, context_fn=context_fn) if checkpointing else region(x)
        return harness.finish(out.sum(), lin, x)

    changed, report = harness.transparency(step, "non-reentrant")
    assert changed == [], report.render()
    [record] = report.records
    assert record.sac == {"saved": {"aten.mm.default": 1}, "recomputed": {"aten.bernoulli_.float": 1, "aten.div_.Scalar": 1, "aten.empty_like.default": 1, "aten.mul.Tensor": 1, "aten.relu.default": 1}}
    plain_run, observed_run = seen
    assert plain_run == observed_run[-len(plain_run) :]  # the user's call, after the replays


def test_the_listing_hands_each_mode_its_own_policy_back() -> None:
    forward, recompute = create_selective_checkpoint_contexts(saves_relu)
    listing = SacListing()
    observed_forward, _ = listing.context_fn(lambda: (forward, recompute))()
    assert observed_forward is forward and forward.policy_fn is not saves_relu  # observed while replay B runs
    listing.release()
    assert forward.policy_fn is saves_relu


def test_no_listing_without_a_selective_context_fn() -> None:
    record = the_record(lambda x: checkpoint(two_matmuls, x, use_reentrant=False), compiled=False)
    assert record.sac is None and "sac" not in record.to_dict()


# --- the CLI ------------------------------------------------------------------------------------

SCRIPT = """\
import functools
import torch
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

LOG = []
w = torch.randn(4, 4, requires_grad=True)


def appends(x):
    LOG.append(1)
    return torch.sin(x) * 2


def matmuls(x):
    return torch.relu(torch.mm(x, w))


x = torch.randn(4, 4, requires_grad=True)
checkpoint(appends, x, use_reentrant=False).sum().backward()
policy = functools.partial(create_selective_checkpoint_contexts, [torch.ops.aten.mm.default])
checkpoint(matmuls, x, use_reentrant=False, context_fn=policy).sum().backward()
print("appended", len(LOG))
"""


def test_confirm_compiled_reports_both_fields(tmp_path: Path) -> None:
    script = tmp_path / "step.py"
    script.write_text(SCRIPT)
    report_file = tmp_path / "report.json"
    completed = run_cli("confirm", "--compiled", "--report", str(report_file), str(script))
    assert completed.returncode == 1, completed.stderr.decode()  # the append diverges
    assert completed.stdout == b"appended 2\n", completed.stderr.decode()  # forward and recompute, as without the companion
    records = {r["region"]["name"]: r for r in json.loads(report_file.read_text())["records"]}
    assert records["appends"]["compiled"]["fullgraph"] == "rejected: HOP: Unsafe side effect"
    assert records["appends"]["compiled"]["graph_breaks"] == 1
    assert records["matmuls"]["compiled"] == {"backend": "aot_eager", "fullgraph": "ok", "graph_breaks": 0, "diverges_from_eager": [], "diverges_from_plain": []}
    assert records["matmuls"]["sac"] == {"saved": {"aten.mm.default": 1}, "recomputed": {"aten.relu.default": 1}}
    text = completed.stderr.decode()
    assert "- compiled (aot_eager): rejected by fullgraph compile: HOP: Unsafe side effect; 1 graph break(s) with fullgraph=False" in text
    assert "- selective checkpoint: saved aten.mm.default x1; recomputed aten.relu.default x1" in text

