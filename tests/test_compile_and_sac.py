"""CKP501-CKP505: compile and selective checkpointing. The rules' variants and gates (which
saved op, which torch release, which context makes a call compiled), and the torch 2.13
behaviour each rule's wording states, measured for real (skipped where torch is absent)."""

from __future__ import annotations

import functools
import textwrap
from pathlib import Path

import pytest

from ckptlint.config import load_config
from ckptlint.engine import Linter, lint_source
from conftest import FIXTURES

SAC = ("CKP501", "CKP502", "CKP503", "CKP504", "CKP505")
HEADER = """
import functools
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts
"""


def _findings(source: str):
    return [f for f in lint_source(HEADER.lstrip() + textwrap.dedent(source)) if f.code in SAC]


def _found(source: str) -> list[tuple[str, int, int]]:
    return [(f.code, f.line, f.column) for f in _findings(source)]


def _project(tmp_path: Path, source: str, extra: str = "") -> list:
    (tmp_path / "pyproject.toml").write_text(f'[tool.ckptlint]\npython = "{FIXTURES / "bin" / "python"}"\n{extra}', encoding="utf-8")
    path = tmp_path / "model.py"
    path.write_text(HEADER.lstrip() + textwrap.dedent(source), encoding="utf-8")
    result = Linter(load_config(tmp_path / "pyproject.toml", tmp_path), base=tmp_path).lint_paths([path], project_root=tmp_path)
    return [f for f in result.findings if f.code in SAC]


# -- CKP501 ------------------------------------------------------------------------------------


def test_an_in_place_op_is_reported_only_under_a_policy_saving_its_producer() -> None:
    source = """
    def region(x, w):
        h = torch.mm(x, w)
        h.relu_()
        return h

    def forward(x, w):
        a = checkpoint(region, x, w, use_reentrant=False, context_fn=functools.partial(create_selective_checkpoint_contexts, [torch.ops.aten.addmm.default]))
        return checkpoint(region, a, w, use_reentrant=False, context_fn=functools.partial(create_selective_checkpoint_contexts, [torch.ops.aten.mm.default]))
    """
    [finding] = _findings(source)
    assert (finding.code, finding.line, finding.column) == ("CKP501", 8, 5)
    assert finding.message.startswith("`.relu_()` changes `h`, the output of `torch.mm(x, w)` (aten.mm)")
    assert "raises 'Tensor cached during selective activation checkpoint has been mutated'" in finding.message
    assert [site.line for site in finding.sites] == [13]  # only the call whose policy saves aten.mm


def test_matmul_outputs_say_the_gradient_is_silently_wrong_for_n_d_inputs() -> None:
    [finding] = _findings("""
    def region(x, w):
        h = x @ w
        h.add_(1.0)
        return h

    def forward(x, w):
        return checkpoint(region, x, w, use_reentrant=False, context_fn=functools.partial(create_selective_checkpoint_contexts, [torch.ops.aten.mm.default]))
    """)
    assert (finding.line, finding.column) == (8, 5)
    assert "with an N-D input the output is a reshape of the saved tensor, nothing raises and the gradient is silently wrong" in finding.message


def test_a_policy_saving_every_op_counts_as_saving_the_producer() -> None:
    source = """
    def save_all(ctx, func, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE

    def region(x, w):
        h = F.linear(x, w)
        F.relu(h, inplace=True)
        return h

    def forward(x, w):
        return checkpoint(region, x, w, use_reentrant=False, context_fn=functools.partial(create_selective_checkpoint_contexts, save_all))
    """
    assert _found(source) == [("CKP501", 11, 5)]


def test_a_rebinding_between_producer_and_in_place_op_breaks_the_link() -> None:
    assert _found("""
    def region(x, w):
        h = torch.mm(x, w)
        h = h * 2
        h.relu_()
        return h

    def forward(x, w):
        return checkpoint(region, x, w, use_reentrant=False, context_fn=functools.partial(create_selective_checkpoint_contexts, [torch.ops.aten.mm.default]))
    """) == []


# -- CKP502 ------------------------------------------------------------------------------------


def test_packets_are_reported_in_lists_and_policy_collections_with_their_torch_behaviour() -> None:
    findings = _findings("""
    OPS = [torch.ops.aten.mm]
    SAVED = {torch.ops.aten.bmm}

    def policy(ctx, func, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if func in SAVED else CheckpointPolicy.PREFER_RECOMPUTE

    LISTED = functools.partial(create_selective_checkpoint_contexts, OPS)
    PREDICATE = functools.partial(create_selective_checkpoint_contexts, policy)
    """)
    assert [(f.code, f.line, f.column) for f in findings] == [("CKP502", 6, 8), ("CKP502", 7, 10)]
    listed, predicate = findings
    assert "torch raises `ValueError: Expected op in `op_list` to be an OpOverload`" in listed.message
    assert "write `torch.ops.aten.mm.default`" in listed.message
    assert "the test is never true and the op is silently recomputed instead of saved" in predicate.message


# -- CKP503 ------------------------------------------------------------------------------------


def test_a_call_compiled_through_torch_compile_of_its_module_is_reported() -> None:
    """The execution context (analysis/contexts/execution.py) sees `torch.compile(model)`; a
    nested lambda there fails to compile."""
    findings = _findings("""
    class Block(torch.nn.Module):
        def forward(self, x):
            policy = lambda: create_selective_checkpoint_contexts([torch.ops.aten.mm.default])
            return checkpoint(self.inner, x, use_reentrant=False, context_fn=policy)

    def build():
        return torch.compile(Block(), fullgraph=True)
    """)
    assert [(f.code, f.line, f.column) for f in findings] == [("CKP503", 9, 74)]
    assert "runs under torch.compile" in findings[0].message and "NestedUserFunctionVariable" in findings[0].message


def test_the_same_forms_in_eager_code_are_not_reported() -> None:
    assert _found("""
    class Block(torch.nn.Module):
        def contexts(self):
            return create_selective_checkpoint_contexts([torch.ops.aten.mm.default])

        def forward(self, x):
            policy = lambda: create_selective_checkpoint_contexts([torch.ops.aten.mm.default])
            y = checkpoint(self.inner, x, use_reentrant=False, context_fn=policy)
            return checkpoint(self.inner, y, use_reentrant=False, context_fn=self.contexts)
    """) == []


# -- CKP504 ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "saved, expected",
    [
        ("[]", [("CKP504", 7, 24)]),
        ("[torch.ops.aten.topk.default]", []),
        ("[torch.ops.aten.sort.default]", [("CKP504", 7, 24)]),  # another op saved
    ],
)
def test_a_routing_topk_is_reported_unless_the_policy_saves_it(saved: str, expected: list) -> None:
    assert _found(f"""
    def route(x, scores):
        weights, experts = torch.topk(scores, 2)
        return x[experts] * weights

    def forward(x, scores):
        return checkpoint(route, x, scores, use_reentrant=False, context_fn=functools.partial(create_selective_checkpoint_contexts, {saved}))
    """) == expected


def test_indices_route_through_names_computed_from_them() -> None:
    findings = _findings("""
    def route(x, scores):
        _, experts = scores.topk(2)
        flat = experts.view(-1)
        chosen = flat == 3
        return x[chosen]

    def forward(x, scores):
        return checkpoint(route, x, scores, use_reentrant=False)
    """)
    assert [(f.code, f.line, f.column) for f in findings] == [("CKP504", 7, 18)]
    assert "its indices route (`x[chosen]`, line 10)" in findings[0].message


def test_the_save_the_op_fix_names_the_op_the_policy_sees() -> None:
    [finding] = _findings("""
    def route(x, scores):
        order = torch.argsort(scores)
        return x[order]

    def forward(x, scores):
        return checkpoint(route, x, scores, use_reentrant=False)
    """)
    assert "[torch.ops.aten.sort.default, ...]" in finding.message  # argsort dispatches aten.sort


@pytest.mark.parametrize(
    "decision, column, feeds",
    [
        ("_, chosen = torch.topk(load, 2)\n        return x[chosen]", 12, "a selection whose indices route (`torch.topk(load, 2)`, line 8)"),
        ("keep = load[first] < cap\n        return x[keep]", 12, "a comparison (`load[first] < cap`, line 8)"),
        ("return x.gather(0, load.long())", 12, "a position argument (`x.gather(0, load.long())`, line 8)"),
        ("return x if load.any() else -x", 12, "a branch condition (`load.any()`, line 8)"),
        ("return x[load.nonzero()]", 12, "a position argument (`load.nonzero()`, line 8)"),
        ("return x[torch.where(load.gt(cap))]", 12, "a comparison (`load.gt(cap)`, line 8)"),
        ("return F.one_hot(input=load.long(), num_classes=8)", 12, "a position argument (`F.one_hot(input=load.long(), num_classes=8)`, line 8)"),
    ],
)
def test_an_accumulation_is_reported_where_its_sums_decide(decision: str, column: int, feeds: str) -> None:
    finding, *selection = _findings(f"""
    def route(x, first, probs, cap):
        load = torch.zeros(8).scatter_add_(0, first, probs)
        {decision}

    def forward(x, first, probs, cap):
        return checkpoint(route, x, first, probs, cap, use_reentrant=False)
    """)
    assert (finding.code, finding.line, finding.column) == ("CKP504", 7, column)
    assert [(f.code, f.line, f.column) for f in selection] == ([("CKP504", 8, 17)] if "topk" in decision else [])  # the topk's own
    assert f"is recomputed inside the region and its result feeds {feeds}: it accumulates in arbitrary order on CUDA" in finding.message


def test_an_in_place_accumulation_decides_through_its_receiver() -> None:
    findings = _findings("""
    def route(x, first, probs, cap):
        load = torch.zeros(8)
        load.index_add_(0, first, probs)
        spare = load.size(0) > 4  # the shape: decides nothing
        over = load > cap
        return x[~over[first]], spare

    def forward(x, first, probs, cap):
        return checkpoint(route, x, first, probs, cap, use_reentrant=False)
    """)
    assert [(f.code, f.line, f.column) for f in findings] == [("CKP504", 8, 5)]
    assert "`load.index_add_()` (index-add) is recomputed inside the region and its result feeds a comparison (`load > cap`, line 10)" in findings[0].message


def test_sums_only_returned_added_or_used_as_values_are_not_reported() -> None:
    assert _found("""
    def combine(x, idx, expert_out, weights, ids):
        out = torch.zeros_like(x)
        out.index_add_(0, idx, expert_out.to(out.dtype))
        load = torch.bincount(ids, weights=weights)
        picked = torch.gather(load, 0, ids)  # the sums are the values gathered
        other = torch.zeros_like(x).index_add_(0, idx, out)  # passed as the values added
        return out + x, picked, other, load.shape[0] > 2

    def forward(x, idx, expert_out, weights, ids):
        return checkpoint(combine, x, idx, expert_out, weights, ids, use_reentrant=False)
    """) == []


@pytest.mark.parametrize(
    "counts",
    [
        "torch.zeros(8, dtype=torch.long).scatter_add_(0, first, torch.ones_like(first))",
        "torch.zeros(8, dtype=torch.int32).index_add_(0, first, torch.ones(first.shape[0], dtype=torch.int32))",
        "torch.zeros_like(first).scatter_add(0, first, torch.ones_like(first))",  # `first` is an index: integer
        "torch.zeros(8).long().index_put_((first,), torch.ones_like(first), accumulate=True)",
        "torch.zeros(8).int().scatter_reduce(0, first, torch.ones_like(first).int(), reduce='sum')",
        "torch.zeros(8, dtype=first.dtype).scatter_add(0, first, torch.ones_like(first))",  # integer values: torch requires the same dtype
        "torch.bincount(first, weights=first.long(), minlength=8)",  # float64 sums of integers: exact
        "torch.bincount(first, minlength=8)",
    ],
)
def test_an_accumulation_into_integers_is_exact_in_any_order(counts: str) -> None:
    assert _found(f"""
    def route(x, first, cap):
        load = {counts}
        return x[load[first] < cap]

    def forward(x, first, cap):
        return checkpoint(route, x, first, cap, use_reentrant=False)
    """) == []


@pytest.mark.parametrize(
    "counts, column",
    [
        ("torch.zeros(8).scatter_add_(0, first, probs)", 12),  # float
        ("torch.zeros(8, dtype=dtype).scatter_add_(0, first, probs)", 12),  # not known: reported
        ("counts.index_add(0, first, probs)", 12),  # a parameter: not known
        ("torch.zeros_like(first).float().scatter_add_(0, first, probs)", 12),
        ("torch.bincount(first, weights=probs)", 12),
    ],
)
def test_an_accumulation_of_unknown_or_float_dtype_stays_reported(counts: str, column: int) -> None:
    assert _found(f"""
    def route(x, first, probs, counts, dtype, cap):
        load = {counts}
        return x[load[first] < cap]

    def forward(x, first, probs, counts, dtype, cap):
        return checkpoint(route, x, first, probs, counts, dtype, cap, use_reentrant=False)
    """) == [("CKP504", 7, column)]


@pytest.mark.parametrize(
    "sort",
    [
        "order = torch.argsort(experts.view(-1))",
        "_, order = experts.flatten().sort(0)",
        "order = experts.reshape(-1).long().argsort(dim=0)",
        "order = torch.sort(experts.view(-1), stable=False)[1]",
    ],
)
def test_a_sort_of_a_selections_indices_is_reported_once_at_the_selection(sort: str) -> None:
    findings = _findings(f"""
    def route(x, scores):
        _, experts = torch.topk(scores, 2)
        {sort}
        return x[order]

    def forward(x, scores):
        return checkpoint(route, x, scores, use_reentrant=False)
    """)
    assert [(f.code, f.line, f.column) for f in findings] == [("CKP504", 7, 18)]
    assert "`torch.topk()` (top-k selection) is recomputed inside the region and its indices route (`x[order]`, line 9)" in findings[0].message


def test_a_sort_of_a_saved_selections_indices_follows_it() -> None:
    assert _found("""
    def route(x, scores):
        _, experts = torch.topk(scores, 2)
        order = torch.argsort(experts.view(-1))
        return x[order]

    def forward(x, scores):
        return checkpoint(route, x, scores, use_reentrant=False, context_fn=functools.partial(create_selective_checkpoint_contexts, [torch.ops.aten.topk.default]))
    """) == []


def test_an_inverse_permutation_is_reported_at_the_sort_of_the_scores() -> None:
    findings = _findings("""
    def route(mask, probs):
        importance = -probs.amax(dim=1)
        return mask[importance.argsort(dim=0).argsort(dim=0)], (probs * 10).long().argsort()

    def forward(mask, probs):
        return checkpoint(route, mask, probs, use_reentrant=False)
    """)
    assert [(f.code, f.line, f.column) for f in findings] == [("CKP504", 8, 17)]  # not the outer argsort, nor a sort never routing
    assert findings[0].message.startswith("`importance.argsort()` (argsort) is recomputed inside the region and its indices route (`mask[")


def test_integer_keys_of_another_origin_are_still_sorted_with_their_own_finding() -> None:
    assert _found("""
    def route(x, probs):
        buckets = (probs * 10).long()
        order = buckets.argsort()
        return x[order]

    def forward(x, probs):
        return checkpoint(route, x, probs, use_reentrant=False)
    """) == [("CKP504", 8, 13)]


@pytest.mark.parametrize(
    "use, column",
    [
        ("torch.gather(x, dim=0, index=order)", 12),
        ("x.gather(0, index=order)", 12),
        ("torch.zeros_like(x).scatter_(0, index=order, src=x)", 12),
        ("torch.index_select(x, dim=0, index=order)", 12),
        ("torch.zeros_like(x).index_add(0, index=order, source=x)", 12),
        ("torch.take_along_dim(x, indices=order, dim=0)", 12),
        ("x * F.one_hot(input=order, num_classes=8)", 16),  # quoted without `x * `
        ("F.embedding(input=order, weight=x)", 12),
        ("torch.zeros_like(x).index_put_(indices=(order,), values=x)", 12),
    ],
)
def test_indices_passed_by_keyword_route(use: str, column: int) -> None:
    findings = _findings(f"""
    def route(x, scores):
        _, order = torch.topk(scores, 2, dim=0)
        return {use}

    def forward(x, scores):
        return checkpoint(route, x, scores, use_reentrant=False)
    """)
    assert [(f.code, f.line, f.column) for f in findings] == [("CKP504", 7, 16)]
    assert f"its indices route (`{use.removeprefix('x * ')}`, line 8)" in findings[0].message


def test_indices_passed_by_keyword_as_values_do_not_route() -> None:
    assert _found("""
    def route(x, slots, scores):
        _, order = torch.topk(scores, 2, dim=0)
        spread = torch.zeros_like(x).scatter(0, index=slots, src=order.to(x.dtype))
        return spread, torch.gather(input=order, dim=0, index=slots)

    def forward(x, slots, scores):
        return checkpoint(route, x, slots, scores, use_reentrant=False)
    """) == []


BLOCK = """
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.moe = MoE()

    def forward(self, x, scores):
        return checkpoint(self.moe, x, scores, use_reentrant=False)
"""


def _moe(forward: str, helper: str = "") -> list[tuple[str, int, int]]:
    """Findings for `class MoE` whose forward body is `forward` (lines of 8-space indented code)."""
    return _found("\nclass MoE(torch.nn.Module):\n    def forward(self, x, scores):\n" + textwrap.indent(textwrap.dedent(forward), " " * 8) + helper + BLOCK)


INFER = """
    def infer(self, x, scores):
        _, order = torch.topk(scores, 2)
        return x[order]
"""


@pytest.mark.parametrize(
    "forward",
    [
        "if not self.training:\n    return x[torch.topk(scores, 2)[1]]\nreturn x\n",
        "if self.training:\n    return x\nelse:\n    return x[torch.topk(scores, 2)[1]]\n",
        "if self.training:\n    return x\nreturn x[torch.topk(scores, 2)[1]]\n",  # after the training path returned
        "if self.training is False and x.dim() > 1:\n    return x[torch.topk(scores, 2)[1]]\nreturn x\n",
        "if self.training:\n    return x\nreturn self.infer(x, scores)\n",  # a helper called in eval mode only
        "y = x if self.training else x[torch.topk(scores, 2)[1]]\nreturn y\n",
        "return x if self.training else self.infer(x, scores)\n",
    ],
)
def test_a_selection_in_eval_mode_only_is_not_reported(forward: str) -> None:
    assert _moe(forward, INFER) == []


@pytest.mark.parametrize(
    "forward, line, column",
    [
        ("if self.training and not self.force_inference:\n    return x\nreturn x[torch.topk(scores, 2)[1]]\n", 10, 18),  # the rest runs in training too
        ("if self.training or x.dim() > 1:\n    return x[torch.topk(scores, 2)[1]]\nreturn x\n", 9, 22),
        ("return x[torch.topk(scores, 2)[1]] if self.training else x\n", 8, 18),
        ("if self.training:\n    y = x * 2\nreturn y[torch.topk(scores, 2)[1]]\n", 10, 18),  # the branch does not return
    ],
)
def test_a_selection_the_training_path_can_run_is_reported(forward: str, line: int, column: int) -> None:
    assert _moe(forward) == [("CKP504", line, column)]


def test_grad_off_indices_are_reported_only_when_they_leave_the_grad_off_code() -> None:
    assert _found("""
    class Indexer(torch.nn.Module):
        @torch.no_grad()
        def forward(self, scores, visible):
            selected = scores.topk(4, dim=-1).indices
            valid = visible.gather(-1, selected)
            return selected.masked_fill(~valid, -1)  # the positions leave: the attention reads them

    class Stats(torch.nn.Module):
        @torch.no_grad()
        def forward(self, scores):
            _, top = scores.topk(2, dim=-1)
            flat = top.view(-1)
            print(torch.bincount(flat, minlength=8).tolist())  # stays here: a log line

    def route(x, scores, visible):
        with torch.no_grad():
            _, experts = torch.topk(scores, 2)
            kept = x[experts]
        with torch.no_grad():
            _, logged = torch.topk(scores, 2)
            print(x[logged].sum())
        Stats()(scores)
        return x[Indexer()(scores, visible)] + kept

    def forward(x, scores, visible):
        return checkpoint(route, x, scores, visible, use_reentrant=False)
    """) == [("CKP504", 9, 20), ("CKP504", 22, 22)]


# -- CKP505 ------------------------------------------------------------------------------------

HOOKED = """
SAVE_MM = functools.partial(create_selective_checkpoint_contexts, [torch.ops.aten.mm.default])

def forward(block, x):
    with torch.autograd.graph.save_on_cpu():
        return checkpoint(block, x, use_reentrant=False, context_fn=SAVE_MM)
"""


def test_on_torch_2_13_the_message_says_there_is_nothing_to_pass(tmp_path: Path) -> None:
    [finding] = _project(tmp_path, HOOKED, 'target-versions = { torch = "2.13.0" }\n')
    assert (finding.code, finding.line, finding.column) == ("CKP505", 10, 16)
    assert "torch 2.13.0 from target-versions has no `respect_saved_tensors_hooks` (added in 2.14), so nothing can be passed" in finding.message
    assert finding.fixes == ()


def test_on_torch_2_14_it_offers_respect_saved_tensors_hooks(tmp_path: Path) -> None:
    [finding] = _project(tmp_path, HOOKED, 'target-versions = { torch = "2.14" }\n')
    assert "pass `respect_saved_tensors_hooks=True`" in finding.message


def test_without_a_known_torch_it_explains_both(tmp_path: Path) -> None:
    [finding] = _project(tmp_path, HOOKED)
    assert "torch 2.14 and later take `respect_saved_tensors_hooks=True` to pack them too, earlier releases cannot" in finding.message


# -- torch 2.13, measured ---------------------------------------------------------------------------


@pytest.fixture
def sac():
    torch = pytest.importorskip("torch")
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    if not hasattr(torch.ops.aten.mm, "default"):
        pytest.skip("this torch has no op overloads")
    return torch, checkpoint, create_selective_checkpoint_contexts


def test_torch_raises_at_backward_for_an_in_place_change_of_a_saved_output(sac) -> None:
    torch, checkpoint, create = sac
    x, w = torch.randn(4, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True)

    def region(x):
        h = torch.mm(x, w)
        h.relu_()
        return h.sum()

    out = checkpoint(region, x, use_reentrant=False, context_fn=functools.partial(create, [torch.ops.aten.mm.default]))
    with pytest.raises(RuntimeError, match="Tensor cached during selective activation checkpoint has been mutated"):
        out.backward()


def test_through_matmuls_reshape_the_gradient_is_silently_wrong(sac) -> None:
    torch, checkpoint, create = sac
    torch.manual_seed(0)
    w = torch.randn(4, 4, requires_grad=True)
    x = torch.randn(2, 3, 4, requires_grad=True)
    reference = x.detach().clone().requires_grad_()

    def region(x):
        h = x @ w
        h.add_(1.0)
        return (h * h).sum()

    region(reference).backward()
    checkpoint(region, x, use_reentrant=False, context_fn=functools.partial(create, [torch.ops.aten.mm.default])).backward()
    assert not torch.allclose(x.grad, reference.grad)


def test_torch_raises_for_a_packet_in_the_op_list_and_never_matches_one_in_a_policy(sac) -> None:
    torch, checkpoint, create = sac
    x = torch.randn(3, 3, requires_grad=True)
    with pytest.raises(ValueError, match="Expected op in `op_list` to be an OpOverload"):
        checkpoint(torch.sin, x, use_reentrant=False, context_fn=functools.partial(create, [torch.ops.aten.mm]))
    assert torch.ops.aten.mm.default != torch.ops.aten.mm


def test_compile_rejects_a_nested_lambda_context_fn_and_accepts_a_module_level_partial(sac) -> None:
    torch, checkpoint, create = sac
    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, 4)
    policy = functools.partial(create, [torch.ops.aten.mm.default])

    def region(x):
        return torch.relu(torch.mm(x, w)).sum()

    def nested(x):
        return checkpoint(region, x, use_reentrant=False, context_fn=lambda: create([torch.ops.aten.mm.default]))

    def partial(x):
        return checkpoint(region, x, use_reentrant=False, context_fn=policy)

    torch._dynamo.reset()
    torch.compile(partial, backend="aot_eager")(x).backward()
    for fullgraph in (True, False):
        torch._dynamo.reset()
        with pytest.raises(Exception, match="NestedUserFunctionVariable"):
            torch.compile(nested, backend="aot_eager", fullgraph=fullgraph)(x)


def test_saved_outputs_bypass_an_outer_pack_hook(sac) -> None:
    torch, checkpoint, create = sac
    import inspect

    x, w = torch.randn(3, 5, requires_grad=True), torch.randn(5, 7, requires_grad=True)
    packed: list[tuple[int, ...]] = []

    def pack(t):
        packed.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = checkpoint(lambda x: torch.relu(torch.mm(x, w)), x, use_reentrant=False, context_fn=functools.partial(create, [torch.ops.aten.mm.default]))
    out.sum().backward()
    assert (3, 7) not in packed  # the saved mm output never reached the hook
    if torch.__version__.startswith("2.13"):
        assert "respect_saved_tensors_hooks" not in inspect.signature(checkpoint).parameters


def test_saving_a_selection_makes_the_recompute_reuse_the_forwards_indices(sac) -> None:
    """A region whose routing scores differ at recompute (here: a counter, standing in for any
    upstream non-determinism) routes differently unless the policy saves `aten.topk`."""
    torch, checkpoint, create = sac
    calls = [0]
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], requires_grad=True)

    def route(x):
        calls[0] += 1
        scores = x * torch.tensor([1.0, 1.0, 1.0, 1.0]) if calls[0] == 1 else x * torch.tensor([1.0, 1.0, 10.0, 0.1])
        _, experts = torch.topk(scores.detach(), 1, dim=-1)
        return (x.gather(1, experts) ** 2).sum()

    def gradient(context_fn):
        calls[0] = 0
        x.grad = None
        kwargs = {"context_fn": context_fn} if context_fn is not None else {}
        checkpoint(route, x, use_reentrant=False, determinism_check="none", **kwargs).backward()
        return x.grad.clone()

    plain = gradient(None)
    saved = gradient(functools.partial(create, [torch.ops.aten.topk.default]))
    assert saved.argmax().item() == 3  # the forward's expert: the gradient goes where the forward routed
    assert plain.argmax().item() == 2  # recomputed: the backward routed to another expert
