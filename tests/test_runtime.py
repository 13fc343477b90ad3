"""The runtime companion on real torch: each hazard class confirmed, safe twins equivalent,
every spelling intercepted at the right line, and the user's run left exactly as it was."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
import torch

import ckptlint.runtime as runtime
from conftest import FIXTURES
from fixtures.runtime import cases, spellings

MODES = ("reentrant", "non-reentrant")


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
    import torch.utils.checkpoint as cp

    before = (cp.checkpoint, cp._checkpoint_without_reentrant_generator, "apply" in vars(cp.CheckpointFunction))
    with runtime.audit():
        assert cp.checkpoint is not before[0]
    assert (cp.checkpoint, cp._checkpoint_without_reentrant_generator, "apply" in vars(cp.CheckpointFunction)) == before


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
