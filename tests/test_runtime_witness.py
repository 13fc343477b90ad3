"""The real backward as witness: a hazard that appears between forward and backward is seen
in the recompute, with the forward's stack, while the user's step stays bit-identical."""

from __future__ import annotations

import copy
import inspect
from pathlib import Path
from typing import Callable

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import ckptlint.runtime as runtime

MODES = {"reentrant": True, "non-reentrant": False}


class SteppedGate(nn.Module):
    """Takes another path on odd steps: the step counter changes after the loss."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.step = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        if self.step % 2 == 0:
            return torch.relu(h)  # the op the witness names
        return torch.tanh(h)


class Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(torch.relu(self.lin(x)))


def _step(model: nn.Module, reentrant: bool, bump: bool) -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.randn(3, 4, requires_grad=True)
    y = checkpoint(model, x, use_reentrant=reentrant)
    loss = y.sum()
    if bump:
        model.step += 1  # type: ignore[operator]
    loss.backward()
    assert x.grad is not None
    return x.grad


RELU_LINE = next(n for n, line in enumerate(inspect.getsource(SteppedGate).splitlines()) if "torch.relu" in line)


@pytest.mark.parametrize("mode", MODES)
def test_a_counter_bumped_after_the_loss_is_seen_by_the_witness_not_the_replay(mode: str) -> None:
    torch.manual_seed(0)
    model = SteppedGate()
    with runtime.audit() as replay_only:
        _step(copy.deepcopy(model), MODES[mode], bump=True)
    assert [r.verdict for r in replay_only.records] == ["equivalent"]

    with runtime.audit(witness=True) as report:
        _step(model, MODES[mode], bump=True)
    [record] = report.records
    assert record.verdict == "diverges", record.describe()
    [reason] = [r for r in record.reasons if r["category"] == "recompute"]
    assert reason["name"] == "relu"
    assert "the recompute ran `tanh` where the forward ran `relu`" in reason["detail"]
    first_line = inspect.getsourcelines(SteppedGate)[1]
    assert reason["stack"][0].startswith(f"{__file__}:{first_line + RELU_LINE} in forward"), reason["stack"]
    assert record.witness is not None and record.witness["status"] == "diverges"
    assert "forward ran it at" in record.describe()


@pytest.mark.parametrize("mode", MODES)
def test_an_unchanged_region_is_equivalent_through_its_recompute(mode: str) -> None:
    with runtime.audit(witness=True) as report:
        _step(Plain(), MODES[mode], bump=False)
    [record] = report.records
    assert record.verdict == "equivalent", record.describe()
    assert record.witness is not None and record.witness["status"] == "equivalent"
    assert record.witness["recomputed_ops"] > 0


def test_preserve_rng_state_false_is_seen_in_the_recomputed_dropout() -> None:
    model = Plain()
    with runtime.audit(witness=True) as report:
        torch.manual_seed(0)
        x = torch.randn(3, 4, requires_grad=True)
        checkpoint(model, x, use_reentrant=False, preserve_rng_state=False).sum().backward()
    [record] = report.records
    recompute = [r for r in record.reasons if r["category"] == "recompute"]
    assert recompute and "differs between forward and recompute" in recompute[0]["detail"], record.describe()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model_class", [SteppedGate, Plain])
def test_the_witnessed_step_is_bit_identical_to_an_unobserved_one(mode: str, model_class: type[nn.Module]) -> None:
    torch.manual_seed(0)
    model = model_class()
    twin = copy.deepcopy(model)
    bump = model_class is SteppedGate
    with runtime.audit(witness=True):
        grad = _step(model, MODES[mode], bump)
        after = torch.randn(2)  # the RNG stream after the step
    expected_grad = _step(twin, MODES[mode], bump)
    expected_after = torch.randn(2)
    assert torch.equal(grad, expected_grad)
    assert torch.equal(after, expected_after)
    for (name, param), (_, twin_param) in zip(model.named_parameters(), twin.named_parameters()):
        assert param.grad is not None and twin_param.grad is not None
        assert torch.equal(param, twin_param) and torch.equal(param.grad, twin_param.grad), name


def test_a_call_without_backward_is_reported_as_not_recomputed() -> None:
    with runtime.audit(witness=True) as report:
        x = torch.randn(3, 4, requires_grad=True)
        checkpoint(Plain(), x, use_reentrant=False)
    [record] = report.records
    assert record.witness is not None and record.witness["status"] == "not recomputed"


STEPPED_SCRIPT = '''
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.step = 0

    def forward(self, x):
        h = self.lin(x)
        if self.step % 2 == 0:
            return torch.relu(h)
        return torch.tanh(h)


gate = Gate()
x = torch.randn(3, 4, requires_grad=True)
loss = checkpoint(gate, x, use_reentrant=False).sum()
gate.step += 1
loss.backward()
'''


def test_confirm_witness_on_the_command_line(tmp_path: Path) -> None:
    import json

    from conftest import run_cli

    script = tmp_path / "train.py"
    script.write_text(STEPPED_SCRIPT)
    report_file = tmp_path / "report.json"
    plain = run_cli("confirm", "--report", str(report_file), str(script), cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr.decode()
    assert [r["verdict"] for r in json.loads(report_file.read_text())["records"]] == ["equivalent"]
    witnessed = run_cli("confirm", "--witness", "--report", str(report_file), str(script), cwd=tmp_path)
    assert witnessed.returncode == 1, witnessed.stderr.decode()  # a call diverged
    assert run_cli("confirm", "--witness", "--exit-zero", str(script), cwd=tmp_path).returncode == 0
    [record] = json.loads(report_file.read_text())["records"]
    assert record["verdict"] == "diverges" and record["witness"]["status"] == "diverges"
    assert record["witness"]["first_divergence"]["stack"][0] == f"{script}:16 in forward"
    assert "the recompute ran `tanh` where the forward ran `relu`" in witnessed.stderr.decode()


def test_the_witness_confirms_the_static_finding_the_replay_could_not(tmp_path: Path) -> None:
    """CKP206 on a branch over a counter a method bumps after the loss: the replay at the call
    cannot trigger it; the real recompute does."""
    from conftest import run_cli

    script = tmp_path / "train.py"
    script.write_text(
        STEPPED_SCRIPT.replace("        self.step = 0\n", "        self.step = 0\n\n    def advance(self):\n        self.step += 1\n").replace(
            "gate.step += 1", "gate.advance()"
        )
    )
    replay = run_cli("confirm", "--lint", str(script), str(script), cwd=tmp_path)
    assert "train.py:18:12: CKP206 not triggered as driven" in replay.stderr.decode(), replay.stderr.decode()
    witnessed = run_cli("confirm", "--witness", "--lint", str(script), str(script), cwd=tmp_path)
    assert "train.py:18:12: CKP206 confirmed" in witnessed.stderr.decode(), witnessed.stderr.decode()


def _scaled(relu: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    import random

    lin = nn.Linear(4, 4)

    def region(x: torch.Tensor) -> torch.Tensor:
        h = lin(x) * random.random()  # a Python draw: redrawn by the recompute
        return torch.relu(h) if relu else h

    return region


@pytest.mark.parametrize("relu", [False, True])
def test_non_reentrant_compares_what_backward_saves_reentrant_every_output(relu: bool) -> None:
    """Non-reentrant keeps the forward's graph: a redrawn scale matters only where backward
    saves what it made (relu's output). Reentrant builds backward from the recompute: it
    always matters."""
    reports = {}
    for mode, reentrant in MODES.items():
        with runtime.audit(witness=True) as report:
            x = torch.randn(3, 4, requires_grad=True)
            checkpoint(_scaled(relu), x, use_reentrant=reentrant).sum().backward()
        [record] = report.records
        reports[mode] = record
    reentrant_reasons = {r["category"]: r for r in reports["reentrant"].reasons}
    assert reentrant_reasons["recompute"]["name"] == "mul" and "input-grad" in reentrant_reasons
    non_reentrant = reports["non-reentrant"]
    assert not any(r["category"] in ("input-grad", "parameter-grad") for r in non_reentrant.reasons)
    if relu:
        [recompute] = [r for r in non_reentrant.reasons if r["category"] == "recompute"]
        assert recompute["name"] == "relu" and "which backward saves" in recompute["detail"]
        assert "the recompute's saved tensors differ" in non_reentrant.summary and "gradients" in non_reentrant.summary.split(";")[1]
    else:
        assert non_reentrant.witness is not None and non_reentrant.witness["status"] == "equivalent", non_reentrant.describe()


def _sequential() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Dropout(0.3), nn.Linear(4, 4))


def _spelled(spelling: str, model: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    from torch.distributed._composable import checkpoint as composable
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
    from torch.utils.checkpoint import checkpoint_sequential

    if spelling.startswith("sequential"):
        return checkpoint_sequential(model, 2, x, use_reentrant=spelling.endswith("reentrant"))
    if spelling == "composable":
        composable(model[0])
        composable(model[3])
    else:
        impl = CheckpointImpl.REENTRANT if spelling == "wrapper-reentrant" else CheckpointImpl.NO_REENTRANT
        model[0] = checkpoint_wrapper(model[0], checkpoint_impl=impl)
    return model(x)


@pytest.mark.parametrize("spelling", ["sequential-reentrant", "sequential-non", "composable", "wrapper", "wrapper-reentrant"])
def test_every_spelling_is_witnessed_and_left_bit_identical(spelling: str) -> None:
    def run(model: nn.Sequential) -> list[torch.Tensor]:
        torch.manual_seed(1)
        x = torch.randn(3, 4, requires_grad=True)
        _spelled(spelling, model, x).sum().backward()
        assert x.grad is not None
        return [x.grad, *(p.grad for p in model.parameters() if p.grad is not None), torch.randn(2)]

    with runtime.audit(sample="all", witness=True) as report:
        observed = run(_sequential())
    expected = run(_sequential())
    assert len(observed) == len(expected) and all(torch.equal(a, b) for a, b in zip(observed, expected))
    assert report.records and all(r.witness is not None and r.witness["status"] == "equivalent" for r in report.records)
