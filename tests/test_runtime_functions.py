"""A project `torch.autograd.Function` is part of the region it runs in: the state its
`forward`, `setup_context` and `backward` touch is saved, compared and restored like the
rest, whether the region calls `MyFn.apply`, an alias (`f = MyFn.apply`) or a project
module's attribute (`ops.MyFn.apply`). The user's
step stays bit-identical under the companion (the logs included), and the verdict names
what checkpointing changes: a forward that logs runs again at recompute; a backward that
logs runs once either way."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from conftest import run_cli
from torch import nn
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint

from fixtures.runtime import harness
from fixtures.runtime.harness import Results

FORWARD_LOG: list[tuple[int, ...]] = []
BACKWARD_LOG: list[tuple[int, ...]] = []


class ForwardLogged(torch.autograd.Function):
    """Logs each forward: checkpointing runs it a second time at recompute."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        FORWARD_LOG.append(tuple(x.shape))
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * 2


class SetupLogged(torch.autograd.Function):
    """The newer spelling: `forward` without ctx, and `setup_context` logs."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x.tanh()

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        FORWARD_LOG.append(tuple(output.shape))
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return grad * (1 - y * y)


class BackwardLogged(torch.autograd.Function):
    """Logs only in backward: the companion's replays each run a backward pass."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 3

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        BACKWARD_LOG.append(tuple(grad.shape))
        return grad * 3


class OnceLogged(torch.autograd.Function):
    """A backward behind torch's `once_differentiable` wrapper, which closes over it."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 5

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        BACKWARD_LOG.append(tuple(grad.shape))
        return grad * 5


class Counted(torch.autograd.Function):
    """Counts its forwards in a class attribute, rebound at each call."""

    calls = 0

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        Counted.calls += 1
        return x + 1

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


setup_logged = SetupLogged.apply  # the alias spelling
ops = types.ModuleType("ops")  # a project module holding a Function: `ops.Logged.apply`
ops.__file__ = __file__
ops.Logged = ForwardLogged  # a name this module's globals do not have: reached only through `ops`
backward_logged = BackwardLogged.apply


class Block(nn.Module):
    """The region: a layer, then a helper that calls the Function as `Class.apply` or through
    a module-level alias (the walk reaches either as a global the helper's code names)."""

    def __init__(self, apply: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.apply_function = apply

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.apply_function(self.lin(x)).sin()


def _forward_logged(x: torch.Tensor) -> torch.Tensor:
    return ForwardLogged.apply(x)


def _module_attribute(x: torch.Tensor) -> torch.Tensor:
    return ops.Logged.apply(x)


def _counted(x: torch.Tensor) -> torch.Tensor:
    return Counted.apply(x)


def _setup_logged(x: torch.Tensor) -> torch.Tensor:
    return setup_logged(x)


def _backward_logged(x: torch.Tensor) -> torch.Tensor:
    return backward_logged(x)


def _once_logged(x: torch.Tensor) -> torch.Tensor:
    return OnceLogged.apply(x)


def _logs() -> Results:
    return {
        ("side-effects", "FORWARD_LOG"): list(FORWARD_LOG),
        ("side-effects", "BACKWARD_LOG"): list(BACKWARD_LOG),
        ("side-effects", "Counted.calls"): Counted.calls,
    }


def step_with(apply: Callable[[torch.Tensor], torch.Tensor]) -> harness.Step:
    def step(mode: str, checkpointing: bool) -> Results:
        FORWARD_LOG.clear()
        BACKWARD_LOG.clear()
        Counted.calls = 0
        model = nn.Sequential(nn.Linear(6, 6), Block(apply), nn.Linear(6, 6))
        x = torch.randn(4, 6, requires_grad=True)
        hidden = model[0](x)
        if checkpointing:
            hidden = checkpoint(model[1], hidden, use_reentrant=mode == "reentrant")
        else:
            hidden = model[1](hidden)
        return harness.finish(model[2](hidden).pow(2).sum(), model, x, _logs)

    return step


# which Function, and the reasons the verdict must name (none: checkpointing changes nothing)
CASES = {
    "forward": (_forward_logged, {("container", "FORWARD_LOG")}),
    "forward through a project module's attribute": (_module_attribute, {("container", "FORWARD_LOG")}),
    "setup_context through an alias": (_setup_logged, {("container", "FORWARD_LOG")}),
    "class attribute": (_counted, {("attribute", "Counted.calls")}),
    "backward through an alias": (_backward_logged, set()),
    "backward behind once_differentiable": (_once_logged, set()),
}


@pytest.mark.parametrize("mode", harness.MODES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_functions_state_is_left_as_the_plain_run_left_it(case: str, mode: str) -> None:
    step = step_with(CASES[case][0])
    changed, report = harness.transparency(step, mode)
    assert report.records, "no checkpoint call was probed"
    assert changed == [], f"the companion changed the user's step: {changed}\n{report.render()}"


@pytest.mark.parametrize("mode", harness.MODES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_verdict_names_the_functions_side_effect(case: str, mode: str) -> None:
    apply, reasons = CASES[case]
    step = step_with(apply)
    _, report = harness.transparency(step, mode)
    truth = harness.ground_truth(step, mode)
    assert truth == ({"side-effects"} if reasons else set()), "the case's expectation is wrong"
    [record] = report.records
    assert record.verdict == ("diverges" if reasons else "equivalent"), report.render()
    assert set(record.aspects) == truth, report.render()
    assert {(reason["category"], reason["name"]) for reason in record.reasons} == reasons, report.render()


SCRIPT = '''
import hashlib, random, sys
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

FORWARD_LOG, BACKWARD_LOG = [], []


class Logged(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        FORWARD_LOG.append(tuple(x.shape))
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        BACKWARD_LOG.append(tuple(grad.shape))
        return grad * 2


logged = Logged.apply


def region(x):
    return logged(layer(x)).tanh()


torch.manual_seed(0)
random.seed(0)
layer = nn.Linear(6, 6)
x = torch.randn(4, 6, requires_grad=True)
checkpoint(region, x, use_reentrant=sys.argv[1] == "reentrant").pow(2).sum().backward()
digest = hashlib.sha256()
for tensor in (x.grad, layer.weight, layer.bias, layer.weight.grad, layer.bias.grad, torch.get_rng_state()):
    digest.update(tensor.detach().numpy().tobytes())
digest.update(repr(random.getstate()).encode())
print(FORWARD_LOG, BACKWARD_LOG, digest.hexdigest())
'''


@pytest.mark.parametrize("mode", harness.MODES)
def test_confirm_leaves_a_scripts_function_logs_as_python_does(tmp_path: Path, mode: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    report_file = tmp_path / "report.json"
    plain = subprocess.run([sys.executable, str(script), mode], cwd=tmp_path, capture_output=True, timeout=300)
    confirmed = run_cli("confirm", "--exit-zero", "--report", str(report_file), str(script), mode, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr.decode()
    assert plain.stdout.startswith(b"[(4, 6), (4, 6)] [(4, 6)] "), plain.stdout
    assert confirmed.stdout == plain.stdout, confirmed.stderr.decode()  # the logs, and a digest of x.grad, parameters, .grad, RNG
    [record] = json.loads(report_file.read_text())["records"]
    assert record["verdict"] == "diverges"
    assert [(reason["category"], reason["name"]) for reason in record["reasons"]] == [("container", "FORWARD_LOG")]
