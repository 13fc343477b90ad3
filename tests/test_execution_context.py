"""Execution contexts (analysis/contexts/execution.py) and what they do to findings
(analysis/contexts/verdicts.py): each fixture under fixtures/contexts/ is linted as a project of
its own, and every finding's code, position, severity, consequence and context are asserted."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from ckptlint.config import find_config, load_config
from ckptlint.engine import Linter
from ckptlint.reporters import json_format
from ckptlint.analysis.contexts.verdicts import verdict
from ckptlint.analysis.contexts.execution import ExecutionContext
from ckptlint.sac_policy import EVERY_OP, policy_saved_ops
from conftest import FIXTURES, REPO, expectations, fixture_files

CONTEXTS = FIXTURES / "contexts"

COMPILED_FULLGRAPH = {"compiled": True, "fullgraph": True, "skips_side_effects": False, "sac_saved_ops": None, "offload": None}
COMPILED_BREAK = {**COMPILED_FULLGRAPH, "fullgraph": False}
EAGER = {"compiled": False, "fullgraph": None, "skips_side_effects": False, "sac_saved_ops": None, "offload": None}

# fixture -> {(code, line, column): (severity, consequence)}, and the context facts every site has
CASES: dict[str, tuple[dict[tuple[str, int, int], tuple[str, str]], dict[str, object], tuple[tuple[str, str, int], ...]]] = {
    "eager": (
        {("CKP203", 17, 9): ("warning", ""), ("CKP201", 18, 30): ("warning", ""), ("CKP101", 21, 16): ("warning", "")},
        EAGER,
        (),
    ),
    "compile_fullgraph": (
        {
            ("CKP203", 17, 9): ("error", "rejected by compile"),
            ("CKP201", 18, 30): ("warning", "traced once under compile (torch 2.14+), rejected or replayed after a graph break before"),
            ("CKP101", 21, 16): ("note", "no effect under compile"),
        },
        COMPILED_FULLGRAPH,
        (("compile", "train.py", 7),),
    ),
    "compile_fullgraph_torch213": (
        {
            ("CKP203", 17, 9): ("error", "rejected by compile"),
            ("CKP201", 18, 30): ("error", "rejected by compile"),
            ("CKP101", 21, 16): ("note", "no effect under compile"),
        },
        {**COMPILED_FULLGRAPH, "traces_random_draws": False},
        (("compile", "train.py", 7),),
    ),
    "compile_traces_draws": (
        {
            ("CKP203", 17, 9): ("error", "rejected by compile"),
            ("CKP201", 18, 30): ("warning", "traced once under compile"),
            ("CKP101", 21, 16): ("note", "no effect under compile"),
        },
        {**COMPILED_FULLGRAPH, "traces_random_draws": True},
        (("compile", "train.py", 7),),
    ),
    "compile_graph_break": (
        {
            ("CKP203", 17, 9): ("warning", "replayed after a graph break"),
            ("CKP201", 18, 30): ("warning", "traced once under compile (torch 2.14+), rejected or replayed after a graph break before"),
            ("CKP101", 21, 16): ("note", "no effect under compile"),
        },
        COMPILED_BREAK,
        (("compile", "train.py", 8),),
    ),
    "compile_per_block": (
        {
            ("CKP203", 17, 9): ("error", "rejected by compile"),
            ("CKP201", 18, 30): ("warning", "traced once under compile (torch 2.14+), rejected or replayed after a graph break before"),
            ("CKP101", 21, 16): ("note", "no effect under compile"),
        },
        COMPILED_FULLGRAPH,
        (("compile", "train.py", 9),),
    ),
    "side_effect_flag": (
        {
            ("CKP203", 17, 9): ("note", "not replayed"),
            ("CKP201", 18, 30): ("warning", "traced once under compile (torch 2.14+), rejected or replayed after a graph break before"),
            ("CKP101", 21, 16): ("note", "no effect under compile"),
        },
        {**COMPILED_FULLGRAPH, "skips_side_effects": True},
        (("compile", "train.py", 9), ("side-effect flag", "config.py", 5)),
    ),
    "flag_off": (
        {
            ("CKP203", 17, 9): ("error", "rejected by compile"),
            ("CKP201", 18, 30): ("warning", "traced once under compile (torch 2.14+), rejected or replayed after a graph break before"),
            ("CKP101", 21, 16): ("note", "no effect under compile"),
        },
        COMPILED_FULLGRAPH,
        (("compile", "train.py", 9),),
    ),
    "sac_op_list": (
        {("CKP203", 20, 9): ("warning", "still replayed under SAC"), ("CKP201", 21, 30): ("warning", "masked only where backward reads nothing downstream of it but saved outputs")},
        {**EAGER, "sac_saved_ops": ["aten.mm"]},
        (("selective checkpointing", "model.py", 24),),
    ),
    "sac_predicate_policy": (
        {("CKP203", 24, 9): ("warning", "still replayed under SAC"), ("CKP201", 25, 30): ("note", "neutralised by a saved op")},
        {**EAGER, "sac_saved_ops": [EVERY_OP]},
        (("selective checkpointing", "model.py", 28),),
    ),
    "sac_unrelated_op": (
        {("CKP203", 26, 9): ("warning", "still replayed under SAC"), ("CKP201", 27, 30): ("warning", "masked only where backward reads nothing downstream of it but saved outputs")},
        {**EAGER, "sac_saved_ops": ["aten.mm"]},
        (("selective checkpointing", "model.py", 30),),
    ),
    "save_on_cpu": (
        {("CKP203", 17, 9): ("warning", ""), ("CKP201", 18, 30): ("warning", ""), ("CKP101", 21, 16): ("warning", "")},
        {**EAGER, "offload": "save_on_cpu"},
        (("offload", "train.py", 8),),
    ),
    "unrelated_compile": (
        {("CKP203", 17, 9): ("warning", ""), ("CKP201", 18, 30): ("warning", ""), ("CKP101", 21, 16): ("warning", "")},
        EAGER,
        (),
    ),
}


def _lint(folder: Path):
    linter = Linter(load_config(find_config(folder), REPO), base=folder)
    return linter.lint_paths([folder], project_root=folder)


def test_every_context_fixture_is_asserted() -> None:
    assert sorted(p.name for p in CONTEXTS.iterdir() if p.is_dir()) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_findings_carry_their_context_and_severity(name: str) -> None:
    expected, facts, evidence = CASES[name]
    folder = CONTEXTS / name
    marked = {key for path in fixture_files(folder) for key in expectations(path)[0]}
    assert marked == set(expected)
    result = _lint(folder)
    data = json.loads(json_format.render(result))["findings"]
    actual = {}
    for finding in data:
        key = (finding["code"], finding["line"], finding["column"])
        sites = finding["checkpoint_sites"]
        consequences = {site["context"]["consequence"] for site in sites} if sites else {""}
        [consequence] = consequences
        actual[key] = (finding["severity"], consequence)
        for site in sites:
            context = site["context"]
            assert {k: context[k] for k in facts} == facts, (name, key)
            assert tuple((e["fact"], e["path"], e["line"]) for e in context["evidence"]) == evidence, (name, key)
            assert context["severity"] == finding["severity"]
    assert actual == expected
    for finding in result.findings:
        assert finding.path == "model.py"
        if expected[(finding.code, finding.line, finding.column)][1]:
            assert expected[(finding.code, finding.line, finding.column)][1] in finding.message


def test_eager_messages_are_unchanged() -> None:
    """A plain eager site adds nothing to the message: only the JSON says `eager`."""
    result = _lint(CONTEXTS / "eager")
    messages = {f.code: f.message for f in result.findings}
    assert messages["CKP203"].endswith("the replay does it again (in region checkpointed at model.py:21)")
    assert "(" not in messages["CKP101"].split("behaviour")[-1]


def test_compiled_message_names_the_compile_call() -> None:
    result = _lint(CONTEXTS / "side_effect_flag")
    [ckp203] = [f for f in result.findings if f.code == "CKP203"]
    assert ckp203.message.endswith(
        "(in region checkpointed at model.py:21 under torch.compile(fullgraph=True) at train.py:9 with the side-effect flag "
        "at config.py:5: not replayed, as the side-effect flag skips it at recompute)"
    )


def test_the_compile_file_is_a_dependency_of_the_model() -> None:
    """Editing the file that compiles the model redoes the model's result (the cache reads it)."""
    from ckptlint.engine.worker import Settings, WorkerState
    from ckptlint.prefilter import Names
    from ckptlint.catalogue import DEFAULT_CATALOGUE

    folder = CONTEXTS / "compile_fullgraph"
    config = load_config(find_config(folder), REPO)
    settings = Settings(config, str(folder), ("CKP203",), context_files=((str(folder / "train.py"), frozenset({"compile"})),))
    state = WorkerState(settings, Names.of(DEFAULT_CATALOGUE))
    state.add_roots([str(folder)])
    outcome = state.analyse(str(folder / "model.py"))
    assert str(folder / "train.py") in outcome.dependencies
    [finding] = outcome.findings
    assert finding.severity == "error"


def _policy(source: str) -> frozenset[str] | None:
    from ckptlint.symbols import ModuleSymbols
    from ckptlint.source import SourceFile

    tree = ast.parse(source)
    module = ModuleSymbols("m", SourceFile("m.py", "m.py", source), tree, None, lambda target: target, lambda m, n: False)
    [call] = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "checkpoint"]
    [keyword] = [k for k in call.keywords if k.arg == "context_fn"]
    return policy_saved_ops(keyword.value, module)


POLICY_HEADER = (
    "import torch\nfrom functools import partial\n"
    "from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts, CheckpointPolicy\n"
    "SAVE = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default}\n"
)


@pytest.mark.parametrize(
    ("policy", "saved"),
    [
        ("def p(ctx, func, *a, **k):\n    return CheckpointPolicy.MUST_SAVE if func in SAVE else CheckpointPolicy.PREFER_RECOMPUTE\n", {"aten.mm", "aten.addmm"}),
        ("def p(ctx, func, *a, **k):\n    if func == torch.ops.aten.mm.default:\n        return CheckpointPolicy.PREFER_SAVE\n    return CheckpointPolicy.PREFER_RECOMPUTE\n", {"aten.mm"}),
        ("def p(ctx, func, *a, **k):\n    to_save = func in SAVE or func == torch.ops.aten.bmm.default\n    return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE\n", {"aten.mm", "aten.addmm", "aten.bmm"}),
        # a condition it cannot read saves nothing here: nothing is neutralised by it
        ("def p(ctx, func, *a, **k):\n    return CheckpointPolicy.MUST_SAVE if func in SAVE and ctx.is_recompute else CheckpointPolicy.PREFER_RECOMPUTE\n", set()),
        ("def p(ctx, func, *a, **k):\n    if ctx.is_recompute:\n        return CheckpointPolicy.PREFER_RECOMPUTE\n    return CheckpointPolicy.MUST_SAVE\n", set()),
        ("def p(ctx, func, *a, **k):\n    return CheckpointPolicy.MUST_SAVE\n", {EVERY_OP}),
        # a factory returning the policy (torchtitan's _get_custom_policy)
        ("def make():\n    def p(ctx, func, *a, **k):\n        return CheckpointPolicy.MUST_SAVE if func in SAVE else CheckpointPolicy.PREFER_RECOMPUTE\n    return p\n", {"aten.mm", "aten.addmm"}),
    ],
)
def test_predicate_policies_resolve_to_their_saved_ops(policy: str, saved: set[str]) -> None:
    argument = "make()" if policy.startswith("def make") else "p"
    source = POLICY_HEADER + policy + f"y = checkpoint(f, x, use_reentrant=False, context_fn=partial(create_selective_checkpoint_contexts, {argument}))\n"
    assert _policy(source) == frozenset(saved)


def test_a_context_fn_that_is_not_sac_is_none() -> None:
    source = POLICY_HEADER + "y = checkpoint(f, x, use_reentrant=False, context_fn=my_contexts)\n"
    assert _policy(source) is None


@pytest.mark.parametrize(
    ("code", "context", "consequence", "severity"),
    [
        ("CKP202", ExecutionContext(compiled=True, fullgraph=None), "rejected by compile with fullgraph=True, replayed after a graph break without", "warning"),
        ("CKP202", ExecutionContext(compiled=True, fullgraph=False, skips_side_effects=True), "not replayed", "note"),
        ("CKP201", ExecutionContext(compiled=True, fullgraph=False, traces_random_draws=False), "replayed after a graph break", "warning"),
        ("CKP102", ExecutionContext(compiled=True, fullgraph=False), "no effect under compile", "note"),
        ("CKP301", ExecutionContext(compiled=True, fullgraph=True), "does not apply when compiled", "note"),
        ("CKP205", ExecutionContext(sac_saved_ops=frozenset({EVERY_OP})), "neutralised by a saved op", "note"),
        # what the brief gives no measurement for keeps the rule's level
        ("CKP204", ExecutionContext(compiled=True, fullgraph=True), "", ""),
        ("CKP203", ExecutionContext(offload="save_on_cpu"), "", ""),
        ("CKP201", ExecutionContext(), "", ""),
    ],
)
def test_verdicts(code: str, context: ExecutionContext, consequence: str, severity: str) -> None:
    found = verdict(code, context)
    assert (found.consequence, found.severity) == (consequence, severity)


def test_a_finding_reached_from_an_eager_and_a_compiled_site_keeps_the_more_severe() -> None:
    from ckptlint.finding import most_severe

    assert most_severe(["note", "warning"]) == "warning"
    assert most_severe(["note", "error", "warning"]) == "error"


def test_reporters_use_the_finding_severity() -> None:
    """SARIF `level`, GitHub's command and LSP's `severity` follow the sites' verdicts."""
    from ckptlint.reporters import github, lsp_format, sarif

    result = _lint(CONTEXTS / "side_effect_flag")  # CKP203 note, CKP201 warning, CKP101 note
    levels = {r["ruleId"]: r["level"] for r in json.loads(sarif.render(result))["runs"][0]["results"]}
    assert levels == {"CKP203": "note", "CKP201": "warning", "CKP101": "note"}
    commands = {line.split("::", 2)[1].split(" ", 1)[0] + ":" + line.split("(", 1)[1][:6] for line in github.render(result).splitlines()}
    assert commands == {"notice:CKP203", "warning:CKP201", "notice:CKP101"}
    diagnostics = [d for ds in json.loads(lsp_format.render(result)).values() for d in ds]
    assert {d["code"]: d["severity"] for d in diagnostics} == {"CKP203": 3, "CKP201": 2, "CKP101": 3}
    rejected = _lint(CONTEXTS / "compile_fullgraph")
    assert {r["ruleId"]: r["level"] for r in json.loads(sarif.render(rejected))["runs"][0]["results"]}["CKP203"] == "error"


def test_lambdas_and_comprehensions_in_a_context_file_are_read(tmp_path: Path) -> None:
    """A module that mentions every context word and holds lambdas and comprehensions (scopes
    without statements) is read without an internal error."""
    (tmp_path / "model.py").write_text((CONTEXTS / "compile_fullgraph" / "model.py").read_text())
    (tmp_path / "train.py").write_text(
        "import torch\nfrom model import Net\n"
        "torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True\n"
        "pick = lambda m: torch.compile(m)\nblocks = [torch.compile(b) for b in Net().blocks]\n"
        "model = torch.compile(Net(), fullgraph=True)\n"
        "with torch.autograd.graph.save_on_cpu():\n    loss = (lambda x: model(x))(torch.randn(2, 4))\n"
    )
    result = _lint(tmp_path)
    assert result.problems == []
    [ckp203] = [f for f in result.findings if f.code == "CKP203"]
    assert ckp203.severity == "note" and ckp203.sites[0].context is not None
    # the hook wraps a call of what torch.compile returns, whose type is not inferred: not seen as offloaded
    assert ckp203.sites[0].context.facts["offload"] is None


def _ckp303_site_contexts(paths: list[Path], folder: Path) -> list[dict[str, object] | None]:
    linter = Linter(load_config(find_config(folder), REPO), base=folder)
    result = linter.lint_paths(paths, project_root=folder)
    data = json.loads(json_format.render(result))["findings"]
    return [site.get("context") for finding in data if finding["code"] == "CKP303" for site in finding["checkpoint_sites"]]


def test_a_site_in_another_file_takes_that_calls_context_whatever_was_analysed_first() -> None:
    """CKP303 is reported at the DDP call in train.py; its site is the checkpoint call in
    model.py, compiled by `model.compile()`: the reentrant hazard does not apply there. The
    context is the same whether model.py was analysed in the same state (the folder) or only
    read for train.py's sake (train.py alone), so `--jobs` cannot change the report."""
    folder = FIXTURES / "site_contexts" / "compiled_ddp"
    together = _ckp303_site_contexts([folder], folder)
    alone = _ckp303_site_contexts([folder / "train.py"], folder)
    assert together == alone
    [context] = together
    assert context is not None
    assert (context["compiled"], context["consequence"], context["severity"]) == (True, "does not apply when compiled", "note")
    assert [(e["fact"], e["path"], e["line"]) for e in context["evidence"]] == [("compile", "train.py", 13)]  # type: ignore[index,union-attr]


def test_a_site_in_another_eager_file_is_described_as_eager() -> None:
    folder = FIXTURES / "composition" / "hazards" / "ddp_project"
    [context] = _ckp303_site_contexts([folder / "launch.py"], folder)
    assert context is not None
    assert (context["description"], context["consequence"], context["severity"]) == ("eager", "", "warning")
