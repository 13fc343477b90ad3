"""`ckptlint calls --unresolved`: which calls in each region the analysis followed, and why not
the others (analysis/regions/coverage.py), through the real CLI."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from conftest import run_cli

from ckptlint.analysis.regions.coverage import (
    ATTRIBUTE_UNKNOWN,
    FUNCTION_APPLY,
    RECEIVER_UNKNOWN,
    RESOLVED,
    CallEdge,
    CallLog,
    method_reason,
)
from ckptlint.source import SourceFile
from ckptlint.symbols import ModuleSymbols

FIXTURE = "fixtures/coverage/region_calls.py"


def test_calls_unresolved_lists_each_stop_under_its_call_and_ends_with_the_coverage() -> None:
    completed = run_cli("calls", FIXTURE, "--unresolved", "--no-cache")
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.decode().splitlines() == [
        f'{FIXTURE}:42:11: torch.utils.checkpoint.checkpoint region=Block(\'proj\', \'gelu\') mode=non-reentrant source="use_reentrant=False"',
        f"    unresolved: {FIXTURE}:35:13: einops.rearrange (library not read)",
        f"    unresolved: {FIXTURE}:36:13: self.act (attribute value unknown)",
        f'{FIXTURE}:43:12: torch.utils.checkpoint.checkpoint region=block mode=non-reentrant source="use_reentrant=False"',
        f"    unresolved: {FIXTURE}:43:12: block (region value unknown)",
        "coverage: 9 of 12 calls in 2 regions resolved (0.750); unresolved: 1 library not read, 1 attribute value unknown, 1 region value unknown",
    ]


def test_calls_json_gives_each_region_its_counts_and_stops() -> None:
    completed = run_cli("calls", FIXTURE, "--format", "json", "--no-cache")
    assert completed.returncode == 0, completed.stderr
    first, second = json.loads(completed.stdout)
    # scale, self.proj, x.view, .softmax, self.scale, Double.apply (its forward, followed),
    # einops.rearrange, self.act, getattr, getattr(...)(x) (self.proj, by the name the
    # constructor was given), torch.relu, len
    assert (first["coverage"]["calls"], first["coverage"]["resolved"]) == (11, 9)
    assert [(c["line"], c["column"], c["callee"], c["reason"]) for c in first["coverage"]["unresolved"]] == [
        (35, 13, "einops.rearrange", "library not read"),
        (36, 13, "self.act", "attribute value unknown"),
    ]
    assert second["coverage"] == {
        "calls": 1,
        "resolved": 0,
        "unresolved": [{"path": FIXTURE, "line": 43, "column": 12, "callee": "block", "reason": "region value unknown"}],
    }


def test_without_unresolved_the_text_listing_is_as_before() -> None:
    completed = run_cli("calls", FIXTURE, "--no-cache")
    assert not any("unresolved" in line or line.startswith("coverage:") for line in completed.stdout.decode().splitlines())


def test_a_library_module_as_the_region_is_resolved(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "import torch.nn.functional as F\nfrom torch import nn\nfrom torch.utils.checkpoint import checkpoint\n\n"
        "emb = nn.Embedding(4, 4)\n\n\ndef f(x, ids):\n"
        "    return checkpoint(emb, ids, use_reentrant=False) + checkpoint(F.gelu, x, use_reentrant=False)\n"
    )
    completed = run_cli("calls", str(tmp_path / "m.py"), "--unresolved", "--no-cache")
    assert completed.stdout.decode().splitlines()[-1] == "coverage: 2 of 2 calls in 2 regions resolved (1.000)"


def test_a_call_resolved_in_any_calling_context_counts_as_resolved() -> None:
    tree = ast.parse("f(x)")
    module = ModuleSymbols("m", SourceFile("m.py", "m.py", "f(x)"), tree)
    call = tree.body[0].value  # type: ignore[attr-defined]
    log = CallLog()
    log.add(CallEdge(module, call, ATTRIBUTE_UNKNOWN))
    log.add(CallEdge(module, call, RESOLVED))
    log.add(CallEdge(module, call, RECEIVER_UNKNOWN))
    assert [edge.resolved for edge in log.edges.values()] == [True]


def test_method_names_known_only_where_the_receiver_may_be_what_defines_them() -> None:
    assert method_reason("view", typed=False) == RESOLVED  # a tensor's, on a value of unknown type
    assert method_reason("norm", typed=True) == ATTRIBUTE_UNKNOWN  # `self.norm(x)`: a module attribute, not Tensor.norm
    assert method_reason("parameters", typed=True) == RESOLVED
    assert method_reason("apply", typed=False) == FUNCTION_APPLY
    assert method_reason("warning_once", typed=False) == RECEIVER_UNKNOWN


def test_a_class_built_with_different_choosing_arguments_is_said_to_merge_instances() -> None:
    fixture = "fixtures/coverage/merged_instances.py"
    completed = run_cli("calls", fixture, "--unresolved", "--no-cache")
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.decode().splitlines()
    assert f"    unresolved: {fixture}:13:16: self.block (instances merged)" in lines
    assert [line for line in lines if "instances merged" in line and ":29:" in line] == []  # built twice alike
    assert lines[-1] == "coverage: 1 of 2 calls in 2 regions resolved (0.500); unresolved: 1 instances merged"


def test_regions_held_by_bare_modules_zipped_pairs_named_stages_and_container_subclasses_are_known() -> None:
    fixture = "fixtures/coverage/region_containers.py"
    completed = run_cli("calls", fixture, "--unresolved", "--no-cache")
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.decode().splitlines()
    assert lines[-1] == "coverage: 5 of 5 calls in 5 regions resolved (1.000)"
    lint = run_cli(fixture, "--no-cache", "--format", "json")
    (finding,) = json.loads(lint.stdout)["findings"]
    assert (finding["code"], finding["line"]) == ("CKP204", 18)
    assert sorted(site["line"] for site in finding["checkpoint_sites"]) == [50, 54, 58, 60]  # not the attention at 51
