"""Which aten ops torch calls dispatch, as data, for what a selective-checkpoint policy saves
(CKP501, CKP504).

A policy (`create_selective_checkpoint_contexts([torch.ops.aten.mm.default, ...])`) sees ops
after decomposition, so a rule that asks "does the policy save this call's output" needs the
op each call reaches. Measured on torch 2.13 CPU with a dispatch mode: `torch.mm`, `x @ w`
and `torch.matmul` reach `aten.mm` (an N-D input through `_unsafe_view`), `F.linear` with a
bias `aten.addmm`, without one `aten.mm`; `torch.argsort` reaches `aten.sort` (`stable=True`:
`aten.sort.stable`); `index_put_` keeps its in-place name.

PRODUCERS: calls whose output is an op a policy may save (CKP501 reads an in-place change of
it). NONDETERMINISTIC: ops whose recompute may differ from the forward (CKP504): selections
whose indices flip between near-equal scores (`topk`, unstable `sort`/`argsort`,
`argmax`/`argmin`), reported only where the indices choose what is computed (routing), and
accumulations in arbitrary order on CUDA (`histc`, weighted `bincount`, `scatter_add`,
`index_add`, `index_put_(accumulate=True)`, `scatter_reduce`), reported only where their
result reaches a routing decision (DECISION_POSITIONS, COMPARISON_CALLS, a routing selection,
a branch): sums that differ in the last bits change nothing else the backward reads. An
accumulation's operands (ACCUMULATED: the tensor added into and the values added, which torch
requires to share a dtype) say whether it sums integers, exactly in any order; a sort's input
(`sorted_input`) whether it sorts a selection's indices.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ckptlint.syntax import keyword_value

_F = "torch.nn.functional."

# qualified function -> the op whose output it returns
PRODUCERS: dict[str, str] = {
    "torch.mm": "aten.mm",
    "torch.matmul": "aten.mm",
    "torch.bmm": "aten.bmm",
    "torch.addmm": "aten.addmm",
    "torch.baddbmm": "aten.baddbmm",
    _F + "linear": "aten.addmm",  # with a bias; without one: aten.mm (LINEAR_WITHOUT_BIAS)
    "torch.relu": "aten.relu",
    _F + "relu": "aten.relu",
    _F + "gelu": "aten.gelu",
    _F + "silu": "aten.silu",
    "torch.sigmoid": "aten.sigmoid",
    "torch.tanh": "aten.tanh",
    "torch.softmax": "aten._softmax",
    _F + "softmax": "aten._softmax",
}
LINEAR = _F + "linear"
LINEAR_WITHOUT_BIAS = "aten.mm"
METHOD_PRODUCERS: dict[str, str] = {"mm": "aten.mm", "matmul": "aten.mm", "bmm": "aten.bmm", "relu": "aten.relu", "sigmoid": "aten.sigmoid", "tanh": "aten.tanh", "softmax": "aten._softmax"}
MATMUL_OPERATOR = "aten.mm"  # `x @ w`
# producers whose N-D form returns an `_unsafe_view` of the op's output: an in-place change of
# it bypasses SAC's mutation check in eager and the gradient is silently wrong (measured, 2.13;
# `F.linear` only without a bias). `@` and `torch.matmul` count as `aten.mm` (a 2-D weight);
# two batched operands reach `aten.bmm` instead.
RESHAPED_WHEN_BATCHED = frozenset({"torch.matmul", "matmul", "@", LINEAR})

# in-place functions: the first argument is changed
INPLACE_FUNCTIONS = frozenset({"torch.relu_", _F + "relu_", "torch.sigmoid_", "torch.tanh_", _F + "elu_", _F + "leaky_relu_", _F + "hardtanh_"})
# functions that change their first argument with `inplace=True`
INPLACE_KEYWORD_FUNCTIONS = frozenset(
    _F + name for name in ("relu", "relu6", "silu", "elu", "selu", "celu", "leaky_relu", "hardtanh", "hardswish", "hardsigmoid", "mish", "rrelu", "threshold", "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout")
)

SELECTION = "selection"  # indices chosen among near-equal scores
ACCUMULATION = "accumulation"  # floating-point sums in arbitrary order (CUDA atomics)


@dataclass(frozen=True)
class NondeterministicOp:
    family: str  # what the message calls it: "top-k selection", "histogram"
    op: str  # the aten op a policy saves: "aten.topk"
    kind: str = ACCUMULATION
    only_with: str = ""  # a keyword (or `accumulate=True`) without which it is deterministic
    not_with: str = ""  # a keyword that makes it deterministic when true (`stable=True`)


_SELECTIONS: dict[str, NondeterministicOp] = {
    "topk": NondeterministicOp("top-k selection", "aten.topk", SELECTION),
    "sort": NondeterministicOp("sort", "aten.sort", SELECTION, not_with="stable"),
    "argsort": NondeterministicOp("argsort", "aten.sort", SELECTION, not_with="stable"),
    "argmax": NondeterministicOp("argmax", "aten.argmax", SELECTION),
    "argmin": NondeterministicOp("argmin", "aten.argmin", SELECTION),
}
_ACCUMULATIONS: dict[str, NondeterministicOp] = {
    "histc": NondeterministicOp("histogram", "aten.histc"),
    "bincount": NondeterministicOp("weighted bincount", "aten.bincount", only_with="weights"),
    "scatter_add": NondeterministicOp("scatter-add", "aten.scatter_add"),
    "index_add": NondeterministicOp("index-add", "aten.index_add"),
    "index_put": NondeterministicOp("accumulating index-put", "aten.index_put", only_with="accumulate"),
    "scatter_reduce": NondeterministicOp("scatter-reduce", "aten.scatter_reduce"),
}
_IN_PLACE_ACCUMULATIONS: dict[str, NondeterministicOp] = {
    "scatter_add_": NondeterministicOp("scatter-add", "aten.scatter_add_"),
    "index_add_": NondeterministicOp("index-add", "aten.index_add_"),
    "index_put_": NondeterministicOp("accumulating index-put", "aten.index_put_", only_with="accumulate"),
    "scatter_reduce_": NondeterministicOp("scatter-reduce", "aten.scatter_reduce_"),
}

NONDETERMINISTIC_FUNCTIONS: dict[str, NondeterministicOp] = {f"torch.{name}": op for name, op in {**_SELECTIONS, **_ACCUMULATIONS}.items()}
"""Non-deterministic torch functions by qualified name."""
NONDETERMINISTIC_METHODS: dict[str, NondeterministicOp] = {**_SELECTIONS, **_ACCUMULATIONS, **_IN_PLACE_ACCUMULATIONS}
"""The same as tensor methods (`scores.topk(k)`, `counts.index_add_(0, idx, ones)`)."""

SORTS = frozenset({"sort", "argsort"})


def sorted_input(call: ast.Call, method: bool) -> ast.expr | None:
    """What a `sort`/`argsort` call sorts: the receiver of `x.argsort()`, the input of
    `torch.argsort(x)`."""
    if method:
        return call.func.value if isinstance(call.func, ast.Attribute) else None
    return call.args[0] if call.args else keyword_value(call, "input")


# where an accumulation takes the tensor it adds into and the values it adds, which torch
# requires to have the same dtype: (function-form positions, method-form positions, keywords);
# -1 is the receiver, 0 the function form's `input`
ACCUMULATED: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[str, ...]]] = {
    **dict.fromkeys(("scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_"), ((0, 3), (-1, 2), ("input", "src"))),
    **dict.fromkeys(("index_add", "index_add_"), ((0, 3), (-1, 2), ("input", "source"))),
    **dict.fromkeys(("index_put", "index_put_"), ((0, 2), (-1, 1), ("input", "values"))),
    "bincount": ((1,), (0,), ("weights",)),  # the sums are the weights' (float64 for integer weights: exact)
}  # fmt: skip


def accumulated_operands(call: ast.Call, short: str, method: bool) -> list[ast.expr]:
    """The tensors whose dtype an accumulation sums in (`out.scatter_add_(0, idx, src)`: `out`
    and `src`); empty for `histc`, which sums floating point only."""
    positions = ACCUMULATED.get(short)
    if positions is None:
        return []
    function_positions, method_positions, keywords = positions
    found: list[ast.expr] = []
    for index in method_positions if method else function_positions:
        if index == -1:
            if isinstance(call.func, ast.Attribute):
                found.append(call.func.value)
        elif index < len(call.args):
            found.append(call.args[index])
    found += [k.value for k in call.keywords if k.arg in keywords]
    return found


# calls whose argument (or receiver) choosing positions makes a selection's indices route:
# they pick which rows, experts or slots the rest of the region computes with
ROUTING_CALLS = frozenset(
    {
        "gather", "index_select", "take_along_dim", "take", "scatter", "scatter_", "scatter_add", "scatter_add_",
        "scatter_reduce", "scatter_reduce_", "index_add", "index_add_", "index_copy", "index_copy_", "index_put",
        "index_put_", "index_fill", "index_fill_", "one_hot", "bincount", "histc", "masked_select", "embedding",
    }
)  # fmt: skip

# where a call takes the positions it picks, for an accumulation's result reaching a routing
# decision (CKP504): (argument index of the function form `torch.gather(x, 1, index)`, of the
# method form `x.gather(1, index)` with -1 for the receiver, keyword). A result passed as the
# values (`out.index_add_(0, idx, result)`, a gather's input) picks nothing.
_INDEX_THIRD = (2, 1, "index")
DECISION_POSITIONS: dict[str, tuple[int, int, str]] = {
    **dict.fromkeys(
        ("gather", "index_select", "scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_",
         "index_add", "index_add_", "index_copy", "index_copy_", "index_fill", "index_fill_"),
        _INDEX_THIRD,
    ),
    "take_along_dim": (1, 0, "indices"), "take": (1, 0, "index"), "index_put": (1, 0, "indices"), "index_put_": (1, 0, "indices"),
    **dict.fromkeys(("masked_select", "masked_fill", "masked_fill_", "masked_scatter", "masked_scatter_"), (1, 0, "mask")),
    "one_hot": (0, -1, "input"), "embedding": (0, -1, "input"), "bincount": (0, -1, "input"), "histc": (0, -1, "input"),
    "nonzero": (0, -1, "input"), "argwhere": (0, -1, "input"), "where": (0, 0, "condition"),
}  # fmt: skip
# calls that compare (a capacity mask `counts.gt(capacity)`), as `counts > capacity` does
COMPARISON_CALLS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less", "less_equal", "not_equal"})
SELECTION_NAMES = frozenset(_SELECTIONS)
