"""The instance-sensitive hazard fixtures, replayed by `ckptlint confirm`: each line they mark changes
something when the region is recomputed (real torch, one training step per model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO, expectations, run_cli


def _one_training_step(folder: str, module: str, build: str, shape: str) -> str:
    """A script that imports `module` from `fixtures/<folder>`, builds `build` and runs one
    training step on an input of `shape` (the driver `ckptlint confirm` runs)."""
    name = build.partition("(")[0]
    return f"""
import sys
import torch
sys.path.insert(0, "fixtures/{folder}")
from {module} import {name}
model = {build}.train()
model(torch.randn({shape}, requires_grad=True)).sum().backward()
"""


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
    **{
        fixture: _one_training_step(folder, module, build, shape)
        for fixture, folder, module, build, shape in (
            ("fixtures/regions/hazards/built_elsewhere/netzoo/splitnet.py", "regions/hazards/built_elsewhere", "netzoo.splitnet", "splitnet()", "4, 8"),
            ("fixtures/regions/hazards/instances_of_one_class.py", "regions/hazards", "instances_of_one_class", "Model(8)", "4, 8"),
            ("fixtures/regions/hazards/config_object_build.py", "regions/hazards", "config_object_build", "build_model()", "2, 16, 8, 8"),
            ("fixtures/regions/hazards/module_spec_build.py", "regions/hazards", "module_spec_build", "build_stack()", "4, 16"),
            ("fixtures/regions/hazards/norm_eval_backbone.py", "regions/hazards", "norm_eval_backbone", "ResNet()", "2, 8, 4, 4"),
            ("fixtures/regions/hazards/checkpoint_wrapper_class_block.py", "regions/hazards", "checkpoint_wrapper_class_block", "Model(2)", "4, 32"),
            ("fixtures/regions/hazards/architecture_strings.py", "regions/hazards", "architecture_strings", "build()", "2, 3, 8, 8"),
        )
    },
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


@pytest.mark.parametrize(
    ("module", "build", "shape"),
    [
        ("norm_eval_backbone", "ResNet()", "2, 8, 4, 4"),  # its `train()` override freezes every BatchNorm
        ("architecture_strings", "build()", "2, 3, 8, 8"),  # no architecture string builds a BatchNorm block
    ],
)
def test_safe_twins_replay_equivalently(module: str, build: str, shape: str, tmp_path: Path) -> None:
    """Safe twins a class-level analysis would flag: the replay agrees that checkpointing changes
    nothing there, and the static analysis reports nothing."""
    pytest.importorskip("torch")
    driver = tmp_path / "drive.py"
    driver.write_text(_one_training_step("regions/safe", module, build, shape))
    report = tmp_path / "report.json"
    completed = run_cli("confirm", "--lint", f"fixtures/regions/safe/{module}.py", "--report", str(report), str(driver))
    assert completed.returncode == 0, completed.stderr.decode()[-2000:]
    data = json.loads(report.read_text())
    assert data["findings"] == [] and data["records"] and {r["verdict"] for r in data["records"]} == {"equivalent"}
