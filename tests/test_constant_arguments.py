"""A name bound only to one constant passes that constant to a checkpoint call; a name bound to
two values, or to something else, passes nothing known."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import json_findings, run_cli

SOURCE = '''
import random
import torch
from torch.utils.checkpoint import checkpoint, CheckpointFunction


def local_false(block, x):
    flag = False
    return checkpoint(block, x, use_reentrant=False, preserve_rng_state=flag)


def two_values(block, x, fast):
    flag = True
    if fast:
        flag = False
    return checkpoint(block, x, use_reentrant=False, preserve_rng_state=flag)


def parameter(block, x, flag=False):
    return checkpoint(block, x, use_reentrant=False, preserve_rng_state=flag)


def function_apply(block, x):
    return CheckpointFunction.apply(block, False, x)


def reentrant_by_name(block, x):
    reentrant = True
    return checkpoint(block, x, use_reentrant=reentrant)
'''


def test_only_a_name_always_bound_to_false_is_false(tmp_path: Path) -> None:
    path = tmp_path / "flags.py"
    path.write_text(SOURCE, encoding="utf-8")
    completed = run_cli("--no-cache", "--format", "json", str(path))
    found = sorted((f["code"], f["line"]) for f in json_findings(completed))
    assert found == [("CKP102", 9), ("CKP102", 24)]


def test_a_name_bound_to_true_gives_the_reentrant_mode(tmp_path: Path) -> None:
    path = tmp_path / "flags.py"
    path.write_text(SOURCE, encoding="utf-8")
    completed = run_cli("calls", "--format", "json", str(path))
    modes = {c["line"]: c["mode"] for c in json.loads(completed.stdout)}
    assert modes[29] == "reentrant" and modes[24] == "reentrant" and modes[9] == "non-reentrant"


def test_a_dropout_module_as_the_region_is_a_stochastic_op(tmp_path: Path) -> None:
    """`checkpoint(self.drop, x, preserve_rng_state=False)`: the region is the dropout itself,
    with no call line of its own; its draw is what changes in the replay."""
    path = tmp_path / "drop.py"
    path.write_text(
        "import torch\n"
        "from torch.utils.checkpoint import checkpoint\n\n\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.drop = torch.nn.Dropout(0.1)\n"
        "        self.norm = torch.nn.LayerNorm(4)\n\n"
        "    def forward(self, x):\n"
        "        x = checkpoint(self.drop, x, use_reentrant=False, preserve_rng_state=False)\n"
        "        return checkpoint(self.norm, x, use_reentrant=False, preserve_rng_state=False)\n",
        encoding="utf-8",
    )
    messages = {f["line"]: f["message"] for f in json_findings(run_cli("--no-cache", "--format", "json", str(path)))}
    assert "the region has stochastic torch ops (`self.drop` (Dropout)" in messages[12]
    assert "no stochastic torch op was found in the region" in messages[13]
