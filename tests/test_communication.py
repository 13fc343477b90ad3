"""CKP401/CKP402: communication inside checkpointed regions, how the tie-break and the
selective-checkpoint neutralisation decide, and that installed Megatron code is recognised
by the catalogue before it is followed as library code."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from ckptlint.config import load_config
from ckptlint.engine import Linter, lint_source
from conftest import FIXTURES, REPO

COMM = ("CKP401", "CKP402")


def _found(source: str) -> list[tuple[str, int, int]]:
    findings = lint_source(textwrap.dedent(source).lstrip())
    return [(f.code, f.line, f.column) for f in findings if f.code in COMM]


def _lint_fixture(relative: str):
    path = FIXTURES / "regions" / relative
    return Linter(load_config(FIXTURES / "pyproject.toml", REPO), base=REPO).lint_paths([path], project_root=FIXTURES)


# -- severity words and sites ----------------------------------------------------------------


def test_messages_say_repeated_cost_or_hang_risk_and_name_the_call_and_chain() -> None:
    [finding] = _lint_fixture("hazards/collective_in_helper.py").findings
    assert (finding.code, finding.line, finding.column) == ("CKP401", 8, 5)
    assert "repeated cost" in finding.message and "every rank must recompute in the same order" in finding.message
    assert finding.message.endswith("(in region checkpointed at fixtures/regions/hazards/collective_in_helper.py:28 via Block.forward -> normalise -> sync_stats)")
    receive = [f for f in _lint_fixture("hazards/point_to_point.py").findings if f.line == 11]
    assert [(f.code, f.column) for f in receive] == [("CKP402", 9)]
    assert "hang risk" in receive[0].message and "`dist.recv()`" in receive[0].message


def test_a_policy_saving_some_ops_leaves_the_others_and_plain_c10d_replayed() -> None:
    """Two checkpoint calls reach the same MLP: the one whose policy saves the functional
    all-reduce is not a site of it; neither call's policy saves c10d's all_reduce."""
    findings = {f.line: f for f in _lint_fixture("hazards/functional_collectives.py").findings}
    assert sorted(findings) == [16, 18, 19, 20]
    assert [s.line for s in findings[18].sites] == [29]  # funcol.all_reduce: saved under the call at 31
    assert [s.line for s in findings[19].sites] == [29, 31]  # dist.all_reduce: no policy saves it
    assert [s.line for s in findings[16].sites] == [29, 31]  # all_gather_tensor: not in the list


def test_split_size_tie_break_quotes_the_computed_argument() -> None:
    findings = [f for f in _lint_fixture("hazards/all_to_all_splits.py").findings]
    assert [(f.code, f.line) for f in findings] == [
        ("CKP402", 17), ("CKP402", 18), ("CKP402", 19), ("CKP401", 20), ("CKP401", 21), ("CKP401", 23), ("CKP401", 24)
    ]  # fmt: skip
    assert "split sizes (`output_splits`) the region computes" in findings[0].message


# -- selective-checkpoint policies -------------------------------------------------------------

_REGION = """
    import functools
    from functools import partial

    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    OPS = [torch.ops._c10d_functional.all_reduce.default]
    OPS_TUPLE = (torch.ops._c10d_functional.all_reduce.default,)
    PACKETS = [torch.ops._c10d_functional.all_reduce]
    OTHER = [torch.ops._c10d_functional.all_gather_into_tensor.default]


    def policy_fn(ctx, op, *args, **kwargs):
        return None


    def block(x, group):
        return funcol.all_reduce(x, "sum", group)


    def plain(x):
        dist.all_reduce(x)
        return x


    def run(x, group):
        def save_ops():
            return create_selective_checkpoint_contexts(OPS)

        local = [torch.ops._c10d_functional.all_reduce.default]
        return checkpoint({region}, x, group, use_reentrant=False, context_fn={policy})
"""
_CALL_LINE = 33
_OP = ("CKP401", 20, 12)


@pytest.mark.parametrize(
    "policy",
    [
        "functools.partial(create_selective_checkpoint_contexts, [torch.ops._c10d_functional.all_reduce.default])",
        "partial(create_selective_checkpoint_contexts, OPS)",
        "partial(create_selective_checkpoint_contexts, OPS_TUPLE)",
        "partial(create_selective_checkpoint_contexts, local)",
        "partial(create_selective_checkpoint_contexts, OTHER + OPS)",
        "save_ops",
        "lambda: create_selective_checkpoint_contexts(OPS)",
    ],
)
def test_policies_that_save_the_functional_op_neutralise_it(policy: str) -> None:
    source = _REGION.format(region="block", policy=policy)
    assert textwrap.dedent(source).lstrip().splitlines()[_CALL_LINE - 1].strip().startswith("return checkpoint(")
    assert _found(source) == []


@pytest.mark.parametrize(
    "policy",
    [
        "None",
        "partial(create_selective_checkpoint_contexts, OTHER)",  # another op
        "partial(create_selective_checkpoint_contexts, PACKETS)",  # an op packet: torch rejects it
        "partial(create_selective_checkpoint_contexts, policy_fn)",  # a policy function: not read
        "partial(print, OPS)",  # not the contexts factory
    ],
)
def test_policies_that_do_not_save_it_leave_the_finding(policy: str) -> None:
    assert _found(_REGION.format(region="block", policy=policy)) == [_OP]


def test_a_functional_op_entry_does_not_save_a_plain_c10d_call() -> None:
    source = _REGION.format(region="lambda x, group: plain(x)", policy="partial(create_selective_checkpoint_contexts, OPS)")
    assert _found(source) == [("CKP401", 24, 5)]


def test_redistribute_needs_every_op_it_can_emit_saved() -> None:
    source = """
        from functools import partial

        import torch
        from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

        c10d = torch.ops._c10d_functional
        SOME = [c10d.all_gather_into_tensor.default, c10d.reduce_scatter_tensor.default, c10d.all_reduce.default]
        ALL = SOME + [c10d.all_to_all_single.default]


        def block(x, mesh, placements):
            return x.redistribute(mesh, placements).full_tensor()


        def run(x, mesh, placements):
            y = checkpoint(block, x, mesh, placements, use_reentrant=False, context_fn=partial(create_selective_checkpoint_contexts, SOME))
            return checkpoint(block, y, mesh, placements, use_reentrant=False, context_fn=partial(create_selective_checkpoint_contexts, ALL))
    """
    assert _found(source) == [("CKP401", 12, 12)]  # redistribute under SOME; full_tensor saved by both


# -- recognition by qualified name -------------------------------------------------------------


def test_a_bare_word_is_not_a_collective_but_an_aliased_import_is() -> None:
    source = """
        from torch.distributed import all_reduce as reduce_all
        from torch.utils.checkpoint import checkpoint


        class Stats:
            def all_reduce(self, x):
                return x


        def all_gather(x):
            return x


        def block(x, stats):
            stats.all_reduce(x)
            all_gather(x)
            reduce_all(x)
            return x


        def run(x):
            return checkpoint(block, x, Stats(), use_reentrant=False)
    """
    assert _found(source) == [("CKP401", 17, 5)]


# -- installed libraries -----------------------------------------------------------------------

_FAKE_MAPPINGS = '''
import torch.distributed

EVENTS = []


def reduce_from_tensor_model_parallel_region(input_, group=None):
    EVENTS.append("reduce")
    torch.distributed.all_reduce(input_, group=group)
    return input_


def copy_to_tensor_model_parallel_region(input_, group=None):
    return input_
'''


def test_installed_megatron_mappings_are_recognised_before_they_are_followed(tmp_path: Path) -> None:
    """With megatron installed (read-only context), the catalogue names the mapping at the project
    line; following it would report what its body does instead (the append, the c10d call)."""
    site = tmp_path / "site-packages"
    package = site / "megatron" / "core" / "tensor_parallel"
    package.mkdir(parents=True)
    (site / "megatron" / "__init__.py").write_text("")
    (site / "megatron" / "core" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("from .mappings import copy_to_tensor_model_parallel_region, reduce_from_tensor_model_parallel_region\n")
    (package / "mappings.py").write_text(_FAKE_MAPPINGS)
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text(f"#!/bin/sh\nprintf '%s\\n' '{json.dumps([os.fspath(site)])}'\n")
    python.chmod(0o755)
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(f'[tool.ckptlint]\npython = "{python}"\n')
    (project / "model.py").write_text(
        "from megatron.core.tensor_parallel import copy_to_tensor_model_parallel_region, reduce_from_tensor_model_parallel_region\n"
        "from torch.utils.checkpoint import checkpoint\n\n\n"
        "def block(x):\n"
        "    return reduce_from_tensor_model_parallel_region(copy_to_tensor_model_parallel_region(x))\n\n\n"
        "def run(x):\n"
        "    return checkpoint(block, x, use_reentrant=False)\n"
    )
    config = load_config(project / "pyproject.toml", project)
    result = Linter(config, base=project).lint_files([project / "model.py"], project_root=project)
    assert [(f.path, f.code, f.line, f.column) for f in result.findings] == [("model.py", "CKP401", 6, 12)]
    [finding] = result.findings
    assert "`reduce_from_tensor_model_parallel_region()` communicates in its forward (all-reduce)" in finding.message
    assert "mappings.py" not in finding.message
