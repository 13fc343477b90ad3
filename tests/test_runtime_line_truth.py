"""Line-level truth in the join (runtime/join.py): a CKP204 finding is confirmed only when the
module its line calls changed its running statistics, a CKP202/CKP203 only when the state it names
changed; a region that changed elsewhere is "region changed, line not shown". Real torch, through
`ckptlint confirm`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli

from ckptlint.runtime.join import CONFIRMED, REGION_ONLY, join
from ckptlint.runtime.report import Record

PROJECT = "fixtures/runtime/line_truth"


def test_only_the_lines_whose_state_changed_are_confirmed(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    report_file = tmp_path / "report.json"
    completed = run_cli("confirm", "--lint", PROJECT, "--report", str(report_file), f"{PROJECT}/train.py")
    assert completed.returncode == 1, completed.stderr.decode()[-2000:]
    statuses = {(f["code"], f["line"]): f["status"] for f in json.loads(report_file.read_text())["findings"]}
    assert statuses == {
        ("CKP203", 16): CONFIRMED,  # self.history grew twice
        ("CKP203", 17): REGION_ONLY,  # self.seen: the arm never runs in training
        ("CKP204", 18): CONFIRMED,  # self.norm's running statistics moved twice
        ("CKP204", 19): REGION_ONLY,  # self.frozen is in eval mode: its statistics never moved
    }


def _record(reasons: list[dict[str, object]], module_lines: dict[str, list[tuple[str, int, int]]]) -> Record:
    record = Record(
        site={"path": "/p/model.py", "line": 40, "column": 9},
        region={"name": "Block.forward", "path": "/p/model.py", "first_line": 10, "last_line": 20},
        api="non-reentrant",
        flags={},
        device="cpu",
        verdict="diverges",
        reasons=reasons,
    )
    record.module_lines = module_lines
    record.executed = {("/p/blocks.py", 30, 60)}  # the code replay A ran: the findings' lines are in the region
    return record


def test_a_buffer_written_in_its_module_forward_is_shown_at_that_line() -> None:
    """`self.usage.mul_(0.9)` in the router's own forward: the router's forward span holds the line."""
    record = _record(
        [{"category": "buffer", "name": "region.router.usage"}],
        {"region.router": [("/p/model.py", 12, 12), ("/p/blocks.py", 30, 36)]},
    )
    findings = [
        {"path": "/p/blocks.py", "line": 33, "column": 9, "code": "CKP204", "message": "in-place `.mul_()` on buffer/parameter `self.usage`"},
        {"path": "/p/blocks.py", "line": 50, "column": 9, "code": "CKP204", "message": "`self.norm2` (BatchNorm1d) updates running_mean"},
    ]
    joined, _ = join([record], findings, "/")
    assert [item["status"] for item in joined] == [CONFIRMED, REGION_ONLY]


def test_a_region_that_is_itself_a_norm_is_shown_at_the_checkpoint_call() -> None:
    record = _record([{"category": "buffer", "name": "region.running_mean"}], {})
    findings = [{"path": "/p/model.py", "line": 40, "column": 27, "code": "CKP204", "message": "the region is a BatchNorm1d"}]
    joined, _ = join([record], findings, "/")
    assert joined[0]["status"] == CONFIRMED


NORM_REGION = """
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.BatchNorm1d(8)

    def forward(self, x):
        return checkpoint(self.norm, x, use_reentrant=False)


model = Model().train()
model(torch.randn(4, 8, requires_grad=True)).sum().backward()
"""


def test_a_norm_that_is_the_region_is_confirmed_at_its_checkpoint_call(tmp_path: Path) -> None:
    """No project line calls the region module (the replays and checkpoint do): its statistics are the call's."""
    pytest.importorskip("torch")
    (tmp_path / "pyproject.toml").write_text("")
    script = tmp_path / "norm_region.py"
    script.write_text(NORM_REGION)
    report_file = tmp_path / "report.json"
    completed = run_cli("confirm", "--lint", str(script), "--report", str(report_file), str(script))
    assert completed.returncode == 1, completed.stderr.decode()[-2000:]
    [finding] = json.loads(report_file.read_text())["findings"]
    assert (finding["code"], finding["line"], finding["status"]) == ("CKP204", 13, CONFIRMED)


def test_a_norm_a_container_runs_is_shown_where_the_project_calls_the_container() -> None:
    """`self.conv1(x)` with `conv1 = nn.Sequential(conv, bn)`: torch's Sequential calls the BatchNorm,
    so its statistics are shown at the line that calls `conv1`, where the static finding is."""
    record = _record(
        [{"category": "buffer", "name": "region.conv1.1.running_mean"}],
        {"region.conv1": [("/p/blocks.py", 41, 41)], "region.conv2": [("/p/blocks.py", 42, 42)]},
    )
    findings = [
        {"path": "/p/blocks.py", "line": 41, "column": 13, "code": "CKP204", "message": "`self.conv1[...]` (BatchNorm2d)"},
        {"path": "/p/blocks.py", "line": 42, "column": 13, "code": "CKP204", "message": "`self.conv2[...]` (BatchNorm2d)"},
    ]
    joined, _ = join([record], findings, "/")
    assert [item["status"] for item in joined] == [CONFIRMED, REGION_ONLY]
