"""The runtime companion on real torch: each hazard class confirmed, safe twins equivalent,
every spelling intercepted at the right line, and the user's run left exactly as it was."""

from __future__ import annotations

import random
import re
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.utils.checkpoint as cp

import ckptlint.runtime as runtime
from ckptlint.runtime.intercept import resolve_layout
from conftest import FIXTURES
from fixtures.runtime import cases, spellings

MODES = ("reentrant", "non-reentrant")
# torch 2.14 moved Function.apply into C and the non-reentrant body into `..._generator_impl`
SPLIT_LAYOUT = torch.__version__ >= "2.14"


def _audit_case(body, state, mode, preserve):
    net = cases.build(body, state)
    with runtime.audit() as report:
        cases.step(net, mode, preserve)
    [record] = report.records
    return record


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(cases.HAZARDS))
def test_hazard_is_confirmed_where_it_diverges(name: str, mode: str) -> None:
    body, state, preserve, diverging_modes, expected = cases.HAZARDS[name]
    record = _audit_case(body, state, mode, preserve)
    assert record.api == mode
    categories = {reason["category"] for reason in record.reasons}
    if mode in diverging_modes:
        assert record.verdict == "diverges", record.describe()
        assert expected <= categories, record.describe()
    else:
        assert record.verdict == "equivalent", record.describe()


def test_moe_aux_loss_gradient_is_lost_under_reentrant() -> None:
    body, state, *_ = cases.HAZARDS["moe_aux_loss"]
    reentrant = _audit_case(body, state, "reentrant", True)
    # the reentrant forward runs under no_grad: the appended loss has no graph, its gradient is lost
    assert ("input-grad", "input[0]") in {(r["category"], r["name"]) for r in reentrant.reasons}
    non_reentrant = _audit_case(body, state, "non-reentrant", True)
    assert {r["category"] for r in non_reentrant.reasons} == {"container"}  # appended twice, gradient kept


def test_reasons_carry_sizes_and_names() -> None:
    body, state, *_ = cases.HAZARDS["batch_norm"]
    record = _audit_case(body, state, "non-reentrant", True)
    by_name = {r["name"]: r for r in record.reasons}
    running = by_name["region.bn.running_mean"]
    assert running["category"] == "buffer" and running["max_abs"] > 0 and running["max_rel"] > 0
    assert by_name["region.bn.num_batches_tracked"]["max_abs"] == 1.0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(cases.SAFE))
def test_safe_twin_is_equivalent(name: str, mode: str) -> None:
    body, state, preserve = cases.SAFE[name]
    record = _audit_case(body, state, mode, preserve)
    assert record.verdict == "equivalent", record.describe()
    assert record.reasons == []


def _markers(kind: str) -> dict[str, int]:
    found = {}
    for number, line in enumerate((FIXTURES / "runtime" / "spellings.py").read_text().splitlines(), 1):
        match = re.search(rf"# {kind} (\w+)", line)
        if match:
            found[match.group(1)] = number
    return found


def test_every_spelling_is_intercepted_at_its_call_site() -> None:
    sites, built = _markers("SITE"), _markers("BUILT")
    with runtime.audit(sample="all") as report:
        spellings.run_all()
    observed = [(r.api, r.site["line"], (r.constructed_at or {}).get("line")) for r in report.records]
    assert all(r.site["path"].endswith("fixtures/runtime/spellings.py") for r in report.records)
    assert observed == [
        ("non-reentrant", sites["public"], None),
        ("reentrant", sites["alias"], None),
        ("reentrant", sites["partial"], None),
        ("non-reentrant", sites["sequential"], None),
        ("non-reentrant", sites["wrapper"], built["wrapper"]),
        ("reentrant", sites["reentrant_wrapper"], built["reentrant_wrapper"]),
        ("non-reentrant", sites["inner"], built["apply"]),
        ("composable", sites["inner"], None),
    ]
    assert all(r.verdict == "equivalent" for r in report.records), report.render()
    # up to 2.13 the partial bound the public function before the audit: whether it passed
    # use_reentrant is unknown; from 2.14 every spelling reaches the wrapped `_checkpoint_impl`
    partial = report.records[2]
    assert partial.flags["use_reentrant_defaulted"] is (False if SPLIT_LAYOUT else None)


def test_layout_of_this_torch() -> None:
    layout = resolve_layout()
    flags = ("preserve_rng_state", "context_fn", "determinism_check", "debug", "early_stop")
    if SPLIT_LAYOUT:
        assert layout.generator_name == "_checkpoint_without_reentrant_generator_impl"
        assert layout.flags == (*flags, "respect_saved_tensors_hooks")
        assert isinstance(layout.apply_raw, types.ClassMethodDescriptorType)
        assert layout.use_reentrant_at == {"checkpoint": None, "checkpoint_sequential": 3, "_checkpoint_impl": None}
    else:
        assert layout.generator_name == "_checkpoint_without_reentrant_generator"
        assert layout.flags == flags
        assert isinstance(layout.apply_raw, classmethod)
        assert layout.use_reentrant_at == {"checkpoint": None, "checkpoint_sequential": 3}
    assert layout.apply_binds_class


def test_flags_are_the_generators_own_and_reach_the_replay() -> None:
    block = spellings.Block()
    with runtime.audit(sample="all") as report:
        if SPLIT_LAYOUT:
            cp.checkpoint(block, spellings.x(), use_reentrant=False, respect_saved_tensors_hooks=False).sum().backward()
            # the decorator form (new in 2.14) calls `_checkpoint_impl` directly
            cp.checkpoint(use_reentrant=False, preserve_rng_state=False)(block)(spellings.x()).sum().backward()  # SITE decorated
        else:
            cp.checkpoint(block, spellings.x(), use_reentrant=False).sum().backward()
            with pytest.raises(TypeError):
                cp.checkpoint(use_reentrant=False)  # no decorator form before 2.14
    base = {"preserve_rng_state", "context_fn", "determinism_check", "debug", "early_stop", "use_reentrant", "use_reentrant_defaulted"}
    if SPLIT_LAYOUT:
        first, decorated = report.records
        assert set(first.flags) == base | {"respect_saved_tensors_hooks"} and first.flags["respect_saved_tensors_hooks"] is False
        line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if text.endswith("# SITE decorated"))
        assert decorated.site["line"] == line and decorated.site["path"] == __file__
        assert decorated.flags["preserve_rng_state"] is False and decorated.flags["use_reentrant_defaulted"] is False
        assert decorated.verdict == "equivalent", decorated.describe()
    else:
        [first] = report.records
        assert set(first.flags) == base
    assert first.verdict == "equivalent", first.describe()


def _apply_shapes() -> dict[str, object]:
    """Every shape of `CheckpointFunction.apply` the companion knows, built around this torch's own."""
    own = resolve_layout().apply  # called as own(cls, *args)

    def function(*args, **kwargs):
        return own(cp.CheckpointFunction, *args, **kwargs)

    return {
        "classmethod": classmethod(own),
        # torch 2.14's shape (C `_FunctionBase.apply`); exists on 2.13 too, under the Python Function.apply
        "c-descriptor": torch._C._FunctionBase.__dict__["apply"],
        "staticmethod": staticmethod(function),
        "function": function,
    }


@pytest.mark.parametrize("shape", ["classmethod", "c-descriptor", "staticmethod", "function"])
def test_every_known_shape_of_apply_is_intercepted_and_restored(shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    value = _apply_shapes()[shape]
    monkeypatch.setattr(cp.CheckpointFunction, "apply", value)
    block = spellings.Block()
    with runtime.audit() as report:
        cp.checkpoint(block, spellings.x(), use_reentrant=True).sum().backward()
    [record] = report.records
    assert (record.api, record.verdict) == ("reentrant", "equivalent"), record.describe()
    assert record.flags["preserve_rng_state"] is True
    assert vars(cp.CheckpointFunction)["apply"] is value


def _reentrant_apply_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cp.CheckpointFunction, "apply", object())


def _generators_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(cp, "_checkpoint_without_reentrant_generator_impl", raising=False)
    monkeypatch.delattr(cp, "_checkpoint_without_reentrant_generator")


def _generator_not_a_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    name = resolve_layout().generator_name
    monkeypatch.setattr(cp, name, lambda fn, *args, **kwargs: iter(()))


def _generator_lost_a_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    def generator(fn, args, kwargs, preserve_rng_state=True, context_fn=None, determinism_check="default", debug=False):
        yield

    monkeypatch.setattr(cp, resolve_layout().generator_name, generator)


def _generator_grew_a_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    original = resolve_layout().generator

    def generator(fn, args, kwargs, *, preserve_rng_state=True, context_fn=None, determinism_check="default", debug=False, early_stop=True, offload=False):
        yield from original(fn, *args, **kwargs)

    monkeypatch.setattr(cp, resolve_layout().generator_name, generator)


UNKNOWN_LAYOUTS = {
    "apply-replaced": (_reentrant_apply_gone, "torch.utils.checkpoint.CheckpointFunction.apply is an object of type 'object'"),
    "generators-deleted": (_generators_gone, "torch.utils.checkpoint has neither _checkpoint_without_reentrant_generator_impl nor"),
    "generator-plain-function": (_generator_not_a_generator, "is an object of type 'function', not a generator function"),
    "generator-lost-a-flag": (_generator_lost_a_flag, "has no parameter early_stop"),
    "generator-grew-a-flag": (_generator_grew_a_flag, "takes offload, which torch.utils.checkpoint.checkpoint does not"),
    "function-missing": (lambda mp: mp.delattr(cp, "CheckpointFunction"), "torch.utils.checkpoint.CheckpointFunction is missing"),
}


@pytest.mark.parametrize("shape", sorted(UNKNOWN_LAYOUTS))
def test_an_unknown_layout_is_refused_in_one_line_and_torch_left_alone(shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    change, missing = UNKNOWN_LAYOUTS[shape]
    change(monkeypatch)
    before = (dict(vars(cp)), dict(vars(cp.CheckpointFunction)) if hasattr(cp, "CheckpointFunction") else None)
    ran = []
    with pytest.raises(runtime.UnsupportedTorch) as refused:
        with runtime.audit():
            ran.append(True)
    message = str(refused.value)
    assert "\n" not in message and ran == []
    assert message.startswith(f"ckptlint's runtime companion does not support torch {torch.__version__}: ")
    assert missing in message and message.endswith("; please report it")
    after = (dict(vars(cp)), dict(vars(cp.CheckpointFunction)) if hasattr(cp, "CheckpointFunction") else None)
    assert after == before  # nothing was patched before the refusal


@pytest.mark.filterwarnings("ignore:torch.utils.checkpoint. the use_reentrant parameter")
def test_use_reentrant_defaulted_is_recorded() -> None:
    block = spellings.Block()
    with runtime.audit(sample="all") as report:
        torch.utils.checkpoint.checkpoint(block, spellings.x()).sum().backward()
        torch.utils.checkpoint.checkpoint(block, spellings.x(), use_reentrant=True).sum().backward()
    assert [r.flags["use_reentrant_defaulted"] for r in report.records] == [True, False]


def test_sampling_first_all_and_n() -> None:
    block = spellings.Block()

    def run(sample):
        with runtime.audit(sample=sample) as report:
            for _ in range(3):
                torch.utils.checkpoint.checkpoint(block, spellings.x(), use_reentrant=False).sum().backward()
        return len(report.records)

    assert (run("first"), run("all"), run(2), run("2")) == (1, 3, 2, 2)
    with pytest.raises(ValueError, match="sample must be"):
        runtime.parse_sample("sometimes")


def test_no_probe_without_grad() -> None:
    block = spellings.Block()
    with runtime.audit() as report, torch.no_grad():
        torch.utils.checkpoint.checkpoint(block, spellings.x(), use_reentrant=False)
    assert report.records == []


def test_interceptors_are_removed_after_audit() -> None:
    from torch.distributed._composable import checkpoint_activation

    def state():
        return dict(vars(cp)), dict(vars(cp.CheckpointFunction)), dict(vars(checkpoint_activation))

    before = state()
    layout = resolve_layout()
    with runtime.audit():
        patched = state()
        assert patched[0]["checkpoint"] is not before[0]["checkpoint"]
        assert patched[0][layout.generator_name] is not layout.generator
        assert "apply" in patched[1]
        assert layout.generator not in patched[2].values()
        with runtime.audit():  # a nested audit finds torch's own objects behind the patches
            assert resolve_layout().generator is layout.generator
            assert resolve_layout().apply_raw is layout.apply_raw
    assert state() == before


def test_assert_equivalent_and_verdicts() -> None:
    body, state, *_ = cases.HAZARDS["python_random"]
    net = cases.build(body, state)
    with runtime.audit() as report:
        cases.step(net, "non-reentrant")
    [(site, verdict)] = report.verdicts.items()
    line = next(n for n, text in enumerate((FIXTURES / "runtime" / "cases.py").read_text().splitlines(), 1) if "# SITE step" in text)
    assert site.endswith(f"fixtures/runtime/cases.py:{line}") and verdict == "diverges"
    with pytest.raises(AssertionError, match="checkpointing changes the result"):
        report.assert_equivalent()


class _TrainModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            [torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.3), torch.nn.BatchNorm1d(8)) for _ in range(3)]
        )
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x):
        for index, block in enumerate(self.blocks):
            x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=index % 2 == 0)
            x = x + random.random() * 0 + float(np.random.rand()) * 0
        return self.head(x)


def _train(audited: bool):
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    model = _TrainModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    with runtime.audit(sample="all") if audited else _nothing() as report:
        for _ in range(20):
            loss = model(torch.randn(16, 8, requires_grad=True)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model, optimizer, torch.get_rng_state(), random.getstate(), np.random.get_state(), report


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_transparency_twenty_training_steps_are_bit_identical() -> None:
    plain = _train(False)
    audited = _train(True)
    assert len(audited[5].records) == 60
    for (name, a), b in zip(plain[0].state_dict().items(), audited[0].state_dict().values()):
        assert torch.equal(a, b), name
    for state_a, state_b in zip(plain[1].state_dict()["state"].values(), audited[1].state_dict()["state"].values()):
        for key in state_a:
            assert torch.equal(torch.as_tensor(state_a[key]), torch.as_tensor(state_b[key])), key
    assert torch.equal(plain[2], audited[2])
    assert plain[3] == audited[3]
    assert plain[4][0] == audited[4][0] and (plain[4][1] == audited[4][1]).all() and plain[4][2:] == audited[4][2:]


def test_probe_leaves_grads_and_version_counters_alone() -> None:
    block = spellings.Block()
    x = spellings.x()
    torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False).sum().backward()
    grads = [p.grad.clone() for p in block.parameters()]
    versions = [p._version for p in block.parameters()]
    with runtime.audit():
        y = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
    assert [p._version for p in block.parameters()] == versions
    assert all(torch.equal(p.grad, g) for p, g in zip(block.parameters(), grads))
    y.sum().backward()  # the user's own backward still works after the probe


CALLS = 0


def _shape_changing_region(x):
    """A replay that saves a different number of tensors makes checkpoint raise."""
    global CALLS
    CALLS += 1
    h = torch.sin(x)
    if CALLS % 2 == 1:  # the forward computes (and saves) more than the replay
        h = torch.cos(h)
    return h


def test_a_replay_that_raises_is_an_error_record() -> None:
    x = torch.randn(3, requires_grad=True)
    with runtime.audit() as report:
        torch.utils.checkpoint.checkpoint(_shape_changing_region, x, use_reentrant=False)
    [record] = report.records
    assert record.verdict == "error"
    [error] = [r for r in record.reasons if r["category"] == "error"]
    assert error["name"] == "checkpointed replay" and "CheckpointError" in error["detail"]
