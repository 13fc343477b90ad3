"""Configuration chosen at run time (`../shared/DESIGN.md`): a checkpointed path that only a
non-default command-line mode takes (argparse's default chooses the default one) is reported only
with `--all-configurations` / `all-configurations = true`; real CLI runs, with the cache on."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import REPO, run_cli

SAFE = REPO / "fixtures" / "regions" / "safe" / "command_line_modes"


def _project(tmp_path: Path, configured: bool = False) -> Path:
    project = tmp_path / "project"
    shutil.copytree(SAFE, project)
    (project / "pyproject.toml").write_text("[tool.ckptlint]\nall-configurations = true\n" if configured else "")
    return project


def _codes(output: bytes) -> list[str]:
    return [line.split(" ")[0] + " " + line.split(" ")[1] for line in output.decode().splitlines() if " CKP" in line]


def test_a_non_default_mode_is_reported_only_when_every_configuration_is_asked_for(tmp_path: Path) -> None:
    project = _project(tmp_path)
    default = run_cli(str(project), cwd=project)
    assert default.returncode == 0, default.stdout.decode()
    every = run_cli(str(project), "--all-configurations", cwd=project)  # the same cache: the flag is part of its key
    assert every.returncode == 1
    assert _codes(every.stdout) == ["trainer/model.py:25:9: CKP203"]
    again = run_cli(str(project), cwd=project)
    assert again.returncode == 0, again.stdout.decode()


def test_the_configuration_key_asks_for_every_configuration(tmp_path: Path) -> None:
    project = _project(tmp_path, configured=True)
    completed = run_cli(str(project), cwd=project)
    assert completed.returncode == 1 and "trainer/model.py:25:9: CKP203" in completed.stdout.decode()


def test_a_bad_value_for_the_key_is_a_clear_error(tmp_path: Path) -> None:
    project = _project(tmp_path)
    (project / "pyproject.toml").write_text('[tool.ckptlint]\nall-configurations = "yes"\n')
    completed = run_cli(str(project), cwd=project)
    assert completed.returncode == 2
    assert "all-configurations" in completed.stderr.decode() and "expected true or false" in completed.stderr.decode()


def test_a_non_default_mode_s_finding_names_its_condition(tmp_path: Path) -> None:
    """In the message and as JSON `condition`, as the contract asks of what depends on run-time configuration."""
    import json

    project = _project(tmp_path)
    completed = run_cli(str(project), "--all-configurations", "--format", "json", cwd=project)
    [finding] = json.loads(completed.stdout)["findings"]
    assert finding["condition"] == "`self.attention_impl == 'fused'`, a non-default command-line mode"
    assert "(only when `self.attention_impl == 'fused'`, a non-default command-line mode)" in finding["message"]


INSIDE = '''
import argparse

from torch import nn
from torch.utils.checkpoint import checkpoint


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--count-calls", action="store_true")
    return parser.parse_args()


class Layer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.count_calls = args.count_calls
        self.fc = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        if self.count_calls:
            self.calls += 1
        return self.fc(x)


class Net(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.layer = Layer(args)

    def forward(self, x):
        return checkpoint(self.layer, x, use_reentrant=False)
'''


def test_a_test_inside_the_region_on_a_command_line_flag_is_decided_by_its_default(tmp_path: Path) -> None:
    """`store_true` defaults to false: the counting arm is a non-default mode, reported only on request, with its condition."""
    import json

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "train.py").write_text(INSIDE)
    default = run_cli("train.py", "--format", "json", cwd=tmp_path)
    assert json.loads(default.stdout)["findings"] == []
    every = run_cli("train.py", "--all-configurations", "--format", "json", cwd=tmp_path)
    [finding] = json.loads(every.stdout)["findings"]
    assert (finding["code"], finding["line"]) == ("CKP203", 23)
    assert finding["condition"] == "`self.count_calls`, a non-default command-line mode"
