"""The instance-sensitive hazard fixtures, replayed by `ckptlint confirm`: each line they mark changes
something when the region is recomputed (real torch, one training step per model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO, expectations, run_cli

DRIVERS = {
    "fixtures/regions/hazards/instance_guard_numeric.py": """
import random, sys, types
import torch
sys.path.insert(0, "fixtures/regions/hazards")
from instance_guard_numeric import ArgsModel, Config, Model
torch.manual_seed(0)
for model in (Model(8, Config(layer_drop=0.5)), ArgsModel(types.SimpleNamespace(drop=0.5), 8)):
    random.seed(0)  # the first draw (0.84) runs the layer, so the replay runs and draws again
    try:  # the replay may take the other arm, which torch itself rejects
        model.train()(torch.randn(4, 8, requires_grad=True)).sum().backward()
    except torch.utils.checkpoint.CheckpointError:
        pass
""",
    "fixtures/regions/hazards/built_elsewhere/netzoo/splitnet.py": """
import sys
import torch
sys.path.insert(0, "fixtures/regions/hazards/built_elsewhere")
from netzoo.splitnet import splitnet
model = splitnet().train()
model(torch.randn(4, 8, requires_grad=True)).sum().backward()
""",
    "fixtures/regions/hazards/instances_of_one_class.py": """
import sys
import torch
sys.path.insert(0, "fixtures/regions/hazards")
from instances_of_one_class import Model
model = Model(8).train()
model(torch.randn(4, 8, requires_grad=True)).sum().backward()
""",
    "fixtures/regions/hazards/config_object_build.py": """
import sys
import torch
sys.path.insert(0, "fixtures/regions/hazards")
from config_object_build import build_model
model = build_model().train()
model(torch.randn(2, 16, 8, 8, requires_grad=True)).sum().backward()
""",
    "fixtures/regions/hazards/module_spec_build.py": """
import sys
import torch
sys.path.insert(0, "fixtures/regions/hazards")
from module_spec_build import build_stack
model = build_stack().train()
model(torch.randn(4, 16, requires_grad=True)).sum().backward()
""",
    "fixtures/regions/hazards/norm_eval_backbone.py": """
import sys
import torch
sys.path.insert(0, "fixtures/regions/hazards")
from norm_eval_backbone import ResNet
model = ResNet().train()
model(torch.randn(2, 8, 4, 4, requires_grad=True)).sum().backward()
""",
    "fixtures/regions/hazards/checkpoint_wrapper_class_block.py": """
import sys
import torch
sys.path.insert(0, "fixtures/regions/hazards")
from checkpoint_wrapper_class_block import Model
model = Model(2).train()
model(torch.randn(4, 32, requires_grad=True)).sum().backward()
""",
}


@pytest.mark.parametrize("fixture", sorted(DRIVERS))
def test_every_marked_line_is_confirmed_by_a_replay(fixture: str, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    driver = tmp_path / "drive.py"
    driver.write_text(DRIVERS[fixture])
    report = tmp_path / "report.json"
    lint = str(Path(fixture).parent) if "built_elsewhere" in fixture else fixture  # the package: the region is in another file
    completed = run_cli("confirm", "--lint", lint, "--report", str(report), str(driver))
    assert completed.returncode == 1, completed.stderr.decode()[-2000:]  # the script ran; a call diverged
    statuses: dict[int, set[str]] = {}
    for finding in json.loads(report.read_text())["findings"]:
        if finding["path"] == fixture:
            statuses.setdefault(finding["line"], set()).add(finding["status"])
    marked = {line for _, line, _ in expectations(REPO / fixture)[0]}
    assert marked and set(statuses) == marked
    assert all("confirmed" in found for found in statuses.values()), statuses


def test_a_backbone_that_keeps_its_norms_in_eval_mode_replays_equivalently(tmp_path: Path) -> None:
    """The safe twin of norm_eval_backbone: its `train()` override freezes every BatchNorm, and the
    replay agrees that checkpointing changes nothing there (the static analysis reports nothing)."""
    pytest.importorskip("torch")
    driver = tmp_path / "drive.py"
    driver.write_text(DRIVERS["fixtures/regions/hazards/norm_eval_backbone.py"].replace("regions/hazards", "regions/safe"))
    report = tmp_path / "report.json"
    completed = run_cli("confirm", "--lint", "fixtures/regions/safe/norm_eval_backbone.py", "--report", str(report), str(driver))
    assert completed.returncode == 0, completed.stderr.decode()[-2000:]
    data = json.loads(report.read_text())
    assert data["findings"] == [] and data["records"] and {r["verdict"] for r in data["records"]} == {"equivalent"}
