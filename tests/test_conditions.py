"""A hazard that happens only when the call passes an optional argument carries that condition in
JSON (`condition`) and SARIF (`properties.condition`); one reached unconditionally from any site has none."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from ckptlint.finding import Finding, Site, merge_findings
from conftest import run_cli

SCHEMA = Path(__file__).parent / "data" / "sarif-2.1.0-rtm.5.json"

MODEL = '''\
from torch import nn
from torch.utils.checkpoint import checkpoint


class Layer(nn.Module):
    def forward(self, x, cache=None):
        if cache is not None:
            cache.append(x)
        return x * 2


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = Layer()

    def forward(self, x, cache):
        return checkpoint(self.layer, x, cache, use_reentrant=False)
'''


def _project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\n")
    (tmp_path / "model.py").write_text(MODEL)
    return tmp_path


def test_json_and_sarif_name_the_condition(tmp_path: Path) -> None:
    root = _project(tmp_path)
    report = json.loads(run_cli("--format", "json", "--no-cache", "model.py", cwd=root).stdout)
    [finding] = report["findings"]
    assert (finding["code"], finding["line"], finding["condition"]) == ("CKP203", 8, "`cache` is not None")
    assert finding["message"].startswith("`.append()` on `cache`") and "(only when `cache` is not None)" in finding["message"]
    log = json.loads(run_cli("--format", "sarif", "--no-cache", "model.py", cwd=root).stdout)
    jsonschema.validate(log, json.loads(SCHEMA.read_text()))
    [result] = log["runs"][0]["results"]
    assert result["properties"] == {"condition": "`cache` is not None"}


def test_the_condition_survives_the_json_round_trip_and_any_unconditional_site_clears_it() -> None:
    conditional = Finding("m.py", 8, 13, "CKP203", "s", 8, 20, (Site("m.py", 18, 16),), condition="`cache` is not None")
    assert Finding.from_dict(conditional.to_dict()) == conditional
    assert Finding.from_dict(conditional.to_dict()).condition == "`cache` is not None"
    unconditional = Finding("m.py", 8, 13, "CKP203", "s", 8, 20, (Site("m.py", 30, 16),))
    [merged] = merge_findings([conditional, unconditional])
    assert merged.condition == "" and len(merged.sites) == 2
    [both] = merge_findings([conditional, conditional])
    assert both.condition == "`cache` is not None"
