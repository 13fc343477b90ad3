"""Outputs for CI and editors: SARIF (validated against the official schema), GitHub
workflow annotations, and LSP diagnostics as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from conftest import run_cli

SCHEMA = Path(__file__).parent / "data" / "sarif-2.1.0-rtm.5.json"

MODEL = (
    "import random\n"
    "from torch.utils.checkpoint import checkpoint\n"
    "\n"
    "\n"
    "def block(x):\n"
    "    return x * random.random()\n"
    "\n"
    "\n"
    "def forward(x):\n"
    '    label = "é,🙂:%"; y = checkpoint(block, x)\n'
    "    return y\n"
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.ckptlint]\n")
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "model.py").write_text(MODEL, encoding="utf-8")
    (package / "broken.py").write_text("def f(:\n")
    return tmp_path


def _sarif(project: Path, *args: str) -> dict:
    completed = run_cli("--format", "sarif", *args, "pkg", cwd=project)
    assert completed.returncode == 1, completed.stderr
    return json.loads(completed.stdout)


def test_sarif_validates_against_the_official_schema(project: Path) -> None:
    log = _sarif(project)
    jsonschema.validate(log, json.loads(SCHEMA.read_text()))
    [run] = log["runs"]
    results = {(r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]) for r in run["results"]}
    assert results == {("CKP000", "pkg/broken.py"), ("CKP101", "pkg/model.py"), ("CKP201", "pkg/model.py")}


def test_sarif_says_which_paths_could_not_be_read(project: Path) -> None:
    """A path that could not be read is no finding: the invocation carries it, as JSON's
    `problems` do, and the log still validates."""
    completed = run_cli("--format", "sarif", "pkg", "missing.py", cwd=project)
    assert completed.returncode == 2, completed.stderr
    log = json.loads(completed.stdout)
    jsonschema.validate(log, json.loads(SCHEMA.read_text()))
    [invocation] = log["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    [notification] = invocation["toolExecutionNotifications"]
    assert notification["level"] == "error"
    assert notification["message"]["text"] == "missing.py: no such file or directory"
    assert notification["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "missing.py"
    [clean] = _sarif(project)["runs"][0]["invocations"]
    assert clean == {"executionSuccessful": True}


def test_sarif_rules_results_regions_fixes_fingerprints(project: Path) -> None:
    [run] = _sarif(project)["runs"]
    rules = {rule["id"]: rule for rule in run["tool"]["driver"]["rules"]}
    ckp201 = rules["CKP201"]
    assert ckp201["name"] and ckp201["shortDescription"]["text"] and ckp201["fullDescription"]["text"]
    assert ckp201["help"]["markdown"].startswith("# CKP201")
    assert ckp201["helpUri"].endswith("/docs/rules/CKP201.md")
    assert rules["CKP000"]["defaultConfiguration"]["level"] == "error"
    assert rules["CKP201"]["defaultConfiguration"]["level"] == "warning"
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == project.resolve().as_uri() + "/"

    by_rule = {result["ruleId"]: result for result in run["results"]}
    ckp101 = by_rule["CKP101"]
    location = ckp101["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "pkg/model.py", "uriBaseId": "%SRCROOT%"}
    # SARIF columns count characters (code points): 'label = "é,🙂:%"; y = ' is 25 of them
    assert location["region"] == {"startLine": 10, "startColumn": 26, "endLine": 10, "endColumn": 46}
    [safe, unsafe] = ckp101["fixes"]
    assert safe["description"]["text"].startswith("Pass use_reentrant=True")
    [change] = safe["artifactChanges"]
    [replacement] = change["replacements"]
    assert replacement["insertedContent"]["text"] == "checkpoint(block, x, use_reentrant=True)"
    assert replacement["deletedRegion"] == location["region"]
    assert safe["properties"]["applicability"] == "safe" and unsafe["properties"]["applicability"] == "unsafe"

    ckp201 = by_rule["CKP201"]
    assert ckp201["relatedLocations"][0]["physicalLocation"]["region"]["startLine"] == 10
    fingerprints = [result["partialFingerprints"]["ckptlint/v1"] for result in run["results"]]
    assert len(set(fingerprints)) == len(fingerprints)


def test_sarif_fingerprints_survive_lines_moving(project: Path) -> None:
    before = {r["ruleId"]: r["partialFingerprints"] for r in _sarif(project)["runs"][0]["results"]}
    model = project / "pkg" / "model.py"
    model.write_text("# a new first line\n\n" + MODEL, encoding="utf-8")
    after = {r["ruleId"]: r["partialFingerprints"] for r in _sarif(project)["runs"][0]["results"]}
    assert after["CKP101"] == before["CKP101"] and after["CKP201"] == before["CKP201"]


def test_github_annotations_are_escaped(project: Path) -> None:
    (project / "pkg" / "odd,name:1.py").write_text(
        "from torch.utils.checkpoint import checkpoint\n\n\ndef f(b, x):\n    return checkpoint(b, x)\n"
    )
    completed = run_cli("--format", "github", "pkg", cwd=project)
    assert completed.returncode == 1
    lines = completed.stdout.decode().splitlines()
    odd = next(line for line in lines if "odd" in line)
    assert odd.startswith(
        "::warning file=pkg/odd%2Cname%3A1.py,line=5,col=12,endLine=5,endColumn=28,title=ckptlint (CKP101)::checkpoint() called"
    )
    broken = next(line for line in lines if "broken" in line)
    assert broken.startswith("::error file=pkg/broken.py,line=1,col=7,")
    # a message with a newline or % must not end the command early
    assert all("\n" not in line and "\r" not in line for line in lines)
    assert len(lines) == 4


def test_github_message_escaping_of_percent_and_newlines() -> None:
    from ckptlint.reporters.github import _escape_data, _escape_property

    assert _escape_data("100%\r\nnext") == "100%25%0D%0Anext"
    assert _escape_property("a:b,c%") == "a%3Ab%2Cc%25"


def test_lsp_format_is_the_servers_diagnostics(project: Path) -> None:
    completed = run_cli("--format", "lsp", "pkg", cwd=project)
    assert completed.returncode == 1
    document = json.loads(completed.stdout)
    model_uri = (project / "pkg" / "model.py").resolve().as_uri()
    assert set(document) == {model_uri, (project / "pkg" / "broken.py").resolve().as_uri()}
    by_code = {d["code"]: d for d in document[model_uri]}
    # UTF-16 units: 🙂 counts two, so the call starts at 25 (0-based) + 1
    assert by_code["CKP101"]["range"] == {"start": {"line": 9, "character": 26}, "end": {"line": 9, "character": 46}}
    assert by_code["CKP101"]["source"] == "ckptlint" and by_code["CKP101"]["severity"] == 2
    assert [fix["applicability"] for fix in by_code["CKP101"]["data"]["fixes"]] == ["safe", "unsafe"]
    [related] = by_code["CKP201"]["relatedInformation"]
    assert related["location"]["uri"] == model_uri and related["location"]["range"]["start"]["line"] == 9
    from lsprotocol import types
    from lsprotocol.converters import get_converter

    converter = get_converter()
    for diagnostics in document.values():
        for item in diagnostics:
            converter.structure(item, types.Diagnostic)  # each one is a valid LSP Diagnostic


def test_json_carries_fix_edits_and_applicability(project: Path) -> None:
    completed = run_cli("--format", "json", "pkg/model.py", cwd=project)
    [ckp101] = [f for f in json.loads(completed.stdout)["findings"] if f["code"] == "CKP101"]
    [safe, unsafe] = ckp101["fixes"]
    assert safe["applicability"] == "safe" and unsafe["applicability"] == "unsafe"
    [edit] = unsafe["edits"]
    assert edit["content"] == "checkpoint(block, x, use_reentrant=False)"
    assert (edit["line"], edit["column"], edit["end_line"], edit["end_column"]) == (10, 26, 10, 46)


def test_a_hazard_reached_from_many_calls_names_three_and_counts_the_rest() -> None:
    from ckptlint.finding import Finding, Site

    sites = tuple(Site("model.py", line, 9) for line in range(10, 16))
    finding = Finding("blocks.py", 3, 5, "CKP203", "`.append()` on `self.log`", 3, 20, sites=sites)
    assert finding.message.endswith(
        "(in region checkpointed at model.py:10; also checkpointed at model.py:11; also checkpointed at model.py:12; "
        "and 3 more call sites (all of them in --format json))"
    )
    assert len(finding.to_dict()["checkpoint_sites"]) == 6
