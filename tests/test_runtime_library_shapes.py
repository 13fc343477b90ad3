"""The companion on shapes that library code has (real torch, CPU): the lines that call a
helper's checkpoint are recorded and joined, a region returning a dict subclass is named as
the cause of its lost gradients (CKP306), and calls nested in another checkpoint's recompute
are replayed but judged by the enclosing call, leaving the run as it would have been."""

from __future__ import annotations

import warnings

import pytest
import torch

import ckptlint.runtime as runtime
from ckptlint.runtime import join as join_module
from ckptlint.runtime.gradflow import CONFIRMS_UNTRACKED_OUTPUT
from ckptlint.runtime.report import NESTED
from conftest import REPO
from fixtures.runtime.gradflow import library_shapes

SOURCE = REPO / "fixtures/runtime/gradflow/library_shapes.py"


def _line(marker: str) -> int:
    return next(n for n, text in enumerate(SOURCE.read_text().splitlines(), 1) if marker in text)


def test_a_helpers_site_records_the_lines_that_called_it() -> None:
    model = library_shapes.Features()
    with runtime.audit() as report:
        model(torch.randn(2, 4, requires_grad=True), False).sum().backward()
    [record] = report.records
    assert (record.site["path"], record.site["line"]) == (str(SOURCE), _line("HELPER_SITE"))
    assert (record.callers[0]["path"], record.callers[0]["line"]) == (str(SOURCE), _line("MODEL_LINE"))
    assert "callers" in record.to_dict()


def test_a_finding_at_the_line_that_called_the_helper_joins_its_record() -> None:
    model = library_shapes.Features()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with runtime.audit() as report:
            out = model(torch.randn(2, 4), True)  # reentrant, and the input needs no grad
            if out.requires_grad:
                out.sum().backward()
    [record] = report.records
    finding = {"path": str(SOURCE), "line": _line("MODEL_LINE"), "column": 16, "code": "CKP301", "message": ""}
    elsewhere = {**finding, "line": _line("MODEL_LINE") + 1}
    joined, _ = join_module.join([record], [finding, elsewhere], "/")
    assert [item["status"] for item in joined] == ["confirmed", "not exercised"]


def test_a_region_returning_a_dict_subclass_loses_its_gradients_and_says_why() -> None:
    block = library_shapes.DictBlock()
    x = torch.randn(2, 4, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with runtime.audit() as report:
            out = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=True)
    assert not out["sample"].requires_grad  # the real symptom: the output is detached
    [record] = report.records
    [reason] = [r for r in record.reasons if r["category"] == "parameter-grad-missing"]
    assert (reason["cause"], reason["rule"]) == ("untracked-output", "CKP306")
    assert "inside a Output" in reason["detail"] and "CKP306" in reason["detail"]
    assert join_module.CONFIRMS["CKP306"] == {CONFIRMS_UNTRACKED_OUTPUT}
    finding = {"path": record.site["path"], "line": record.site["line"], "column": 1, "code": "CKP306", "message": ""}
    [item], _ = join_module.join([record], [finding], "/")
    assert item["status"] == "confirmed"
    twin = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
    assert twin["sample"].requires_grad  # non-reentrant tracks tensors wherever they are


@pytest.mark.parametrize("mode", ["reentrant", "non-reentrant"])
def test_calls_nested_in_a_recompute_are_judged_by_the_enclosing_call(mode: str) -> None:
    plain = library_shapes.nested_step(mode)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with runtime.audit(sample="all") as report:
            audited = library_shapes.nested_step(mode)
    for a, b in zip(plain.parameters(), audited.parameters()):
        assert torch.equal(a.grad, b.grad)  # the run is what it would have been
    nested = [r for r in report.records if r.verdict == NESTED]
    outer = [r for r in report.records if r.region["name"] == "Stage.forward"]
    assert nested and all(r.reasons == [] and "enclosing checkpoint call" in r.summary for r in nested)
    assert [r.verdict for r in outer] == ["equivalent"]
    assert all(r.verdict in ("equivalent", NESTED) for r in report.records), [r.describe() for r in report.records]
    assert "nested in another's recompute" in report.render()
