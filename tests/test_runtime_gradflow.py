"""Gradient flow under reentrant checkpoint on real torch (CPU): parameters that get no
gradient, what reached the region and how, the cause the companion names and the rule it
joins to; DDP's "mark a variable ready only once", observed in the user's own backward."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import ckptlint.runtime as runtime
from ckptlint.runtime import join as join_module
from ckptlint.runtime.gradflow import CONFIRMS_NO_GRAD_INPUT, CONFIRMS_NON_POSITIONAL
from ckptlint.runtime.ddp import DDP_CATEGORY
from ckptlint.runtime.report import Record
from conftest import REPO
from fixtures.runtime.gradflow import steps

DDP_STEP = REPO / "fixtures/runtime/gradflow/ddp_step.py"
# `model = DistributedDataParallel(...)` in ddp_step.py: where CKP303 reports (1-based line and column)
DDP_LINE, DDP_COLUMN = next(
    (number, line.index("DistributedDataParallel(") + 1)
    for number, line in enumerate(DDP_STEP.read_text().splitlines(), 1)
    if "model = DistributedDataParallel(" in line
)


def _audited(step: steps.Step, mode: str) -> Record:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "None of the inputs have requires_grad=True"
        with runtime.audit() as report:
            step(mode)
    [record] = report.records
    return record


def _missing(record: Record) -> dict[str, Any]:
    [reason] = [r for r in record.reasons if r["category"] == "parameter-grad-missing"]
    return reason


@pytest.mark.parametrize("name", sorted(steps.EXPECTED))
def test_the_real_symptom_plain_gives_grads_reentrant_gives_none(name: str) -> None:
    step, *_ = steps.EXPECTED[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain, reentrant, non_reentrant = step("plain"), step("reentrant"), step("non-reentrant")
    assert all(p.grad is not None and bool(p.grad.ne(0).any()) for m in plain.values() for p in m.parameters())
    assert all(p.grad is None for p in reentrant["block"].parameters())
    for key, module in plain.items():
        for a, b in zip(module.parameters(), non_reentrant[key].parameters()):
            assert b.grad is not None and torch.allclose(a.grad, b.grad)


@pytest.mark.parametrize("name", sorted(steps.EXPECTED))
def test_the_companion_names_the_parameters_and_the_cause(name: str) -> None:
    step, parameters, cause, tensors = steps.EXPECTED[name]
    record = _audited(step, "reentrant")
    assert record.verdict == "diverges", record.describe()
    reason = _missing(record)
    assert reason["parameters"] == parameters
    assert reason["name"] == ", ".join(parameters)
    assert (reason["cause"], reason["rule"]) == (cause, {"no-grad-input": "CKP301", "non-positional": "CKP302"}[cause])
    assert reason["tensors"] == tensors
    assert reason["aspect"] == "gradients"
    assert ("CKP301" if cause == "no-grad-input" else "CKP302") in reason["detail"]


@pytest.mark.parametrize("name", sorted(steps.EXPECTED))
def test_the_non_reentrant_twin_is_equivalent(name: str) -> None:
    step, *_ = steps.EXPECTED[name]
    record = _audited(step, "non-reentrant")
    assert record.verdict == "equivalent", record.describe()
    assert not [r for r in record.reasons if r["category"] == "parameter-grad-missing"]


def test_what_reaches_the_region_is_recorded_with_how_and_requires_grad() -> None:
    by_name = {t["name"]: t for t in _audited(steps.global_tensor, "reentrant").inputs}
    assert by_name["args[0]"] == {"name": "args[0]", "how": "positional", "requires_grad": False, "is_leaf": True, "shape": [3, 5], "dtype": "torch.float32"}
    assert (by_name["SHARED_STATES"]["how"], by_name["SHARED_STATES"]["requires_grad"], by_name["SHARED_STATES"]["is_leaf"]) == ("global", True, False)
    assert not any(name.endswith((".weight", ".bias")) for name in by_name)  # module parameters are not inputs
    closure = {t["name"]: t["how"] for t in _audited(steps.closure_tensor, "reentrant").inputs}
    assert closure == {"args[0]": "positional", "hidden": "closure"}
    partial = {t["name"]: t["how"] for t in _audited(steps.partial_argument, "reentrant").inputs}
    assert partial == {"args[0]": "positional", "region.states": "partial"}


def test_a_keyword_tensor_is_recorded_and_reentrant_keywords_still_raise() -> None:
    record = _audited(steps.keyword_tensor, "non-reentrant")
    assert record.verdict == "equivalent", record.describe()
    assert {t["name"]: (t["how"], t["requires_grad"]) for t in record.inputs} == {
        "args[0]": ("positional", False),
        "kwargs['states']": ("keyword", True),
    }
    with runtime.audit() as report, pytest.raises(ValueError, match="Unexpected keyword arguments: block,states"):
        steps.keyword_tensor("reentrant")  # torch refuses before any region runs: nothing to probe
    assert report.records == []


def test_the_json_report_round_trip_keeps_the_new_fields() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with runtime.audit() as report:
            steps.closure_tensor("reentrant")
    [data] = json.loads(report.to_json())["records"]
    assert [t["name"] for t in data["inputs"]] == ["args[0]", "hidden"]
    assert set(data["inputs"][1]) == {"name", "how", "requires_grad", "is_leaf", "shape", "dtype"}
    [reason] = [r for r in data["reasons"] if r["category"] == "parameter-grad-missing"]
    assert (reason["cause"], reason["rule"], reason["tensors"]) == ("non-positional", "CKP302", ["hidden (closure, requires_grad=True)"])
    assert reason["parameters"][:2] == ["block.weight", "block.bias"]


def _finding(code: str, record: Record, line: int | None = None) -> dict[str, Any]:
    return {"path": record.site["path"], "line": line or record.site["line"], "column": 1, "code": code, "message": ""}


def test_the_reasons_confirm_ckp301_and_ckp302_at_the_call() -> None:
    # the rules declare the reasons as `confirmed_by`, with the runtime's names
    assert join_module.CONFIRMS["CKP301"] == {CONFIRMS_NO_GRAD_INPUT}
    assert join_module.CONFIRMS["CKP302"] == {CONFIRMS_NON_POSITIONAL}
    for step, confirmed, other in ((steps.frozen_embedding, "CKP301", "CKP302"), (steps.closure_tensor, "CKP302", "CKP301")):
        record = _audited(step, "reentrant")  # each step's own record (they share one call site)
        joined, missed = join_module.join([record], [_finding(confirmed, record), _finding(other, record)], "/")
        assert [(item["code"], item["status"]) for item in joined] == [(confirmed, "confirmed"), (other, "not triggered as driven")]
        assert not [m for m in missed if m["category"].startswith("parameter-grad-missing")]
    twin = _audited(steps.frozen_embedding, "non-reentrant")
    [item], _ = join_module.join([twin], [_finding("CKP301", twin)], "/")
    assert item["status"] == "not triggered as driven"


def _confirm_ddp(tmp_path: Path, mode: str, find_unused: str, shape: str = "plain") -> tuple[str, dict[str, Any]]:
    report_file = tmp_path / "report.json"
    completed = subprocess.run(
        [sys.executable, "-m", "ckptlint", "confirm", "--exit-zero", "--report", str(report_file), str(DDP_STEP), mode, find_unused, shape],
        capture_output=True, text=True, timeout=180, cwd=REPO,  # bounded: a hung rendezvous fails the test
    )
    assert report_file.exists(), completed.stderr
    return completed.stdout, json.loads(report_file.read_text())


def _plain_ddp(mode: str, find_unused: str, shape: str = "plain") -> str:
    return subprocess.run([sys.executable, str(DDP_STEP), mode, find_unused, shape], capture_output=True, text=True, timeout=120, check=True).stdout


def test_ddp_find_unused_parameters_with_reentrant_checkpoint(tmp_path: Path) -> None:
    stdout, report = _confirm_ddp(tmp_path, "reentrant", "1")
    assert stdout == _plain_ddp("reentrant", "1") == "raised: Expected to mark a variable ready only once\n"
    [data] = report["records"]
    assert data["verdict"] == "error" and data["aspects"] == ["error"]
    [reason] = [r for r in data["reasons"] if r["category"] == DDP_CATEGORY]
    assert "DistributedDataParallel(find_unused_parameters=True)" in reason["detail"] and "CKP303" in reason["detail"]
    assert "Expected to mark a variable ready only once" in reason["detail"]
    assert data["ddp"] == {
        "constructed_at": {"path": str(DDP_STEP), "line": DDP_LINE, "column": DDP_COLUMN},
        "find_unused_parameters": True,
        "static_graph": False,
    }
    assert data["summary"].startswith("backward under DistributedDataParallel raised: reentrant checkpoint under DistributedDataParallel")
    record = Record(**{key: data[key] for key in ("site", "region", "api", "flags", "device", "verdict", "reasons", "ddp")})
    assert join_module.CONFIRMS["CKP303"] == {DDP_CATEGORY}  # the rule declares it
    finding = {"path": str(DDP_STEP), "line": DDP_LINE, "column": DDP_COLUMN, "code": "CKP303", "message": ""}
    [item], _ = join_module.join([record], [finding], "/")
    assert item["status"] == "confirmed"


def test_ddp_parameter_reached_inside_and_outside_a_reentrant_region(tmp_path: Path) -> None:
    """No find_unused_parameters: the norm is a reentrant region and is applied again outside it.
    The user's run fails the same with and without the companion, which names the cause and
    joins it to CKP303 where the DDP was built; non-reentrant, the same model trains."""
    stdout, report = _confirm_ddp(tmp_path, "reentrant", "0", "shared")
    assert stdout == _plain_ddp("reentrant", "0", "shared") == "raised: Expected to mark a variable ready only once\n"
    [data] = report["records"]
    assert data["verdict"] == "error"
    [reason] = [r for r in data["reasons"] if r["category"] == DDP_CATEGORY]
    assert "inside the region and outside it; CKP303" in reason["detail"]
    assert data["ddp"] == {"constructed_at": {"path": str(DDP_STEP), "line": DDP_LINE, "column": DDP_COLUMN}, "find_unused_parameters": False, "static_graph": False}
    record = Record(**{key: data[key] for key in ("site", "region", "api", "flags", "device", "verdict", "reasons", "ddp")})
    finding = {"path": str(DDP_STEP), "line": DDP_LINE, "column": DDP_COLUMN, "code": "CKP303", "message": ""}
    [item], _ = join_module.join([record], [finding], "/")
    assert item["status"] == "confirmed"
    twin, twin_report = _confirm_ddp(tmp_path, "non-reentrant", "0", "shared")
    assert twin.startswith("ok") and twin == _plain_ddp("non-reentrant", "0", "shared")
    assert not [r for r in twin_report["records"][0]["reasons"] if r["category"] == DDP_CATEGORY]


@pytest.mark.parametrize(("mode", "find_unused", "verdict"), [("non-reentrant", "1", "not replayed"), ("reentrant", "0", "equivalent")])
def test_ddp_twins_run_as_without_the_companion(tmp_path: Path, mode: str, find_unused: str, verdict: str) -> None:
    stdout, report = _confirm_ddp(tmp_path, mode, find_unused)
    assert stdout.startswith("ok") and stdout == _plain_ddp(mode, find_unused)
    [data] = report["records"]
    assert data["verdict"] == verdict
    assert not [r for r in data["reasons"] if r["category"] == DDP_CATEGORY]
