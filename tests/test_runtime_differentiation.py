"""Checkpointed outputs differentiated other than by `.backward()` on real torch (CPU): the
error torch raises inside checkpoint reaches the user unchanged, the companion records it at the
checkpoint call's record naming the differentiating line, and CKP304 there joins as confirmed.
And CKP305's runtime evidence: a frozen base under a reentrant checkpointed adapter layer."""

from __future__ import annotations

import warnings
from typing import Any, Callable

import pytest
import torch

import ckptlint.runtime as runtime
from ckptlint.runtime import join as join_module
from ckptlint.runtime.differentiation import DIFFERENTIATION_CATEGORY
from ckptlint.runtime.gradflow import NO_GRAD_INPUT, PARAMETER_GRAD_MISSING
from ckptlint.runtime.report import Record
from conftest import REPO
from fixtures.runtime.gradflow import differentiate as steps

FIXTURE = str(REPO / "fixtures/runtime/gradflow/differentiate.py")
REENTRANT_GRAD = (
    "When use_reentrant=True, torch.utils.checkpoint is incompatible with .grad() or passing an `inputs` parameter to "
    ".backward(). To resolve this error, you can either set use_reentrant=False, or call .backward() without passing "
    "the `inputs` argument."
)
SETUP_CONTEXT = "In order to use an autograd.Function with functorch transforms"
SAVED_TENSOR_HOOKS = "torch.func.{grad, vjp, jacrev, hessian} don't yet support saved tensor hooks."

# step -> (mode -> torch's error, or None where it works; the API the reason names)
CASES: dict[str, tuple[Callable[[str], torch.Tensor], dict[str, str | None], str]] = {
    "autograd.grad": (steps.input_gradient, {"reentrant": REENTRANT_GRAD, "non-reentrant": None}, "torch.autograd.grad"),
    "backward(inputs=)": (steps.backward_to_inputs, {"reentrant": REENTRANT_GRAD, "non-reentrant": None}, "Tensor.backward(inputs=...)"),
    "func.grad": (steps.transformed, {"reentrant": SETUP_CONTEXT, "non-reentrant": SAVED_TENSOR_HOOKS}, "a torch.func transform"),
    "func.jacfwd": (steps.forward_mode, {"reentrant": SETUP_CONTEXT, "non-reentrant": None}, "a torch.func transform"),
}


def _raised(step: Callable[[str], torch.Tensor], mode: str) -> BaseException | None:
    try:
        step(mode)
    except RuntimeError as error:
        return error
    return None


def _audited(step: Callable[[str], Any], mode: str) -> tuple[Record, BaseException | None]:
    with runtime.audit() as report:
        error = _raised(step, mode)
    [record] = report.records
    return record, error


def _reasons(record: Record) -> list[dict[str, Any]]:
    return [r for r in record.reasons if r["category"] == DIFFERENTIATION_CATEGORY]


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("mode", ["reentrant", "non-reentrant"])
def test_the_real_failure_passes_through_unchanged_and_is_recorded_at_the_differentiating_line(name: str, mode: str) -> None:
    step, errors, what = CASES[name]
    expected = errors[mode]
    without = _raised(step, mode)
    record, under = _audited(step, mode)
    if expected is None:  # the twin: works, and as without the companion
        assert without is None and under is None
        assert torch.allclose(step(mode), step("plain"))
        assert _reasons(record) == [] and record.verdict in ("equivalent", "not replayed"), record.describe()
        return
    assert without is not None and under is not None
    assert str(without).startswith(expected)
    assert (type(under), str(under)) == (type(without), str(without))  # transparency: torch's own error
    [reason] = _reasons(record)
    assert record.verdict == "error" and record.aspects == ["error"]
    assert reason["name"] == what and reason["aspect"] == "error"
    assert reason["differentiated_at"] == {"path": FIXTURE, "line": steps.line_of(step), "column": reason["differentiated_at"]["column"]}
    assert "CKP304" in reason["detail"] and f"{what} at {FIXTURE}:{steps.line_of(step)}" in reason["detail"]
    assert record.summary.startswith(f"{what} raised: ")


def test_the_checkpoint_call_is_the_records_site_not_the_differentiating_line() -> None:
    record, _ = _audited(steps.input_gradient, "reentrant")
    assert record.site["path"] == FIXTURE and record.site["line"] != steps.line_of(steps.input_gradient)
    assert record.region["name"] == "Sequential.forward"


def _finding(line: int) -> dict[str, Any]:
    return {"path": FIXTURE, "line": line, "column": 5, "code": "CKP304", "message": ""}


@pytest.mark.parametrize("name", ["autograd.grad", "backward(inputs=)", "func.grad"])
def test_ckp304_at_the_differentiating_line_is_confirmed(name: str) -> None:
    assert join_module.CONFIRMS["CKP304"] == {DIFFERENTIATION_CATEGORY}  # the rule declares it
    assert join_module.EXPLAINED_BY[DIFFERENTIATION_CATEGORY] == {"CKP304"}
    step, _, _ = CASES[name]
    line = steps.line_of(step)
    record, _ = _audited(step, "reentrant")
    joined, missed = join_module.join([record], [_finding(line), _finding(line - 1)], "/")
    assert [(item["line"], item["status"]) for item in joined] == [(line, "confirmed"), (line - 1, "not exercised")]
    assert joined[0]["sites"] == [f"{FIXTURE}:{record.site['line']}"]
    assert missed == []
    twin, _ = _audited(step, "non-reentrant")
    [item], _ = join_module.join([twin], [_finding(line)], "/")
    expected = "confirmed" if name == "func.grad" else "not exercised"  # torch.func refuses either mode
    assert item["status"] == expected


def test_unjoined_the_refusal_is_listed_as_missed_by_static_analysis() -> None:
    record, _ = _audited(steps.input_gradient, "reentrant")
    _, missed = join_module.join([record], [], "/")
    assert [m["category"] for m in missed] == [DIFFERENTIATION_CATEGORY]


def _frozen_base(mode: str, hook: bool) -> Record:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "None of the inputs have requires_grad=True"
        with runtime.audit() as report:
            steps.frozen_base(mode, hook)
    [record] = report.records
    return record


def test_frozen_base_reentrant_layer_loses_its_adapter_gradients_ckp305_evidence() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain, reentrant = steps.frozen_base("plain"), steps.frozen_base("reentrant")
    assert plain.down.weight.grad is not None and plain.up.weight.grad is not None
    assert reentrant.down.weight.grad is None and reentrant.up.weight.grad is None  # the real symptom
    record = _frozen_base("reentrant", hook=False)
    assert record.verdict == "diverges", record.describe()
    [reason] = [r for r in record.reasons if r["category"] == PARAMETER_GRAD_MISSING]
    assert (reason["cause"], reason["rule"]) == (NO_GRAD_INPUT, "CKP301")
    assert reason["parameters"] == ["region.down.weight", "region.up.weight"]  # the frozen base is not listed
    assert reason["tensors"] == ["args[0] (positional, requires_grad=False)"]


@pytest.mark.parametrize("mode", ["reentrant", "non-reentrant"])
def test_an_input_require_grads_hook_on_the_embedding_makes_it_equivalent(mode: str) -> None:
    record = _frozen_base(mode, hook=True)
    assert record.verdict == "equivalent", record.describe()
    assert not [r for r in record.reasons if r["category"] == PARAMETER_GRAD_MISSING]
    assert [(t["name"], t["requires_grad"]) for t in record.inputs] == [("args[0]", True)]
    fixed = steps.frozen_base(mode, True)
    plain = steps.frozen_base("plain")
    for a, b in ((fixed.down, plain.down), (fixed.up, plain.up)):
        assert b.weight.grad is not None and a.weight.grad is not None and torch.allclose(a.weight.grad, b.weight.grad)


def test_without_the_hook_non_reentrant_already_gives_the_adapter_its_gradients() -> None:
    record = _frozen_base("non-reentrant", hook=False)
    assert record.verdict == "equivalent", record.describe()
