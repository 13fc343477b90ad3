"""Whether an accumulation's result reaches a routing decision in its function (CKP504).

`counts = torch.histc(...)`, `out.index_add_(0, idx, src)` (the receiver holds the sums):
on CUDA the recompute adds in another order and its sums may differ in the last bits. That
changes what the backward reads only where a decision reads them: a selection whose indices
route (`torch.topk(counts, 2)`, routing.py), a comparison (`counts > capacity`,
`counts.gt(c)`), a branch (`if counts.any():`), an index or a position argument (`x[keep]`,
`torch.gather(x, 1, counts)`, `F.one_hot`, `.nonzero()`, `torch.where(keep, ...)`:
aten_ops.DECISION_POSITIONS). A result only returned, added or passed as the values (the MoE
combine step `out.index_add_(0, idx, expert_out)`) is not: the replay changes nothing that
matters. Names are followed as for a selection's indices: assignments from the call's line
on, in the same function; not into callees, nor back to callers. (An accumulation into
integers, exact in any order, is not asked about: integers.py.)
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ckptlint.analysis.knowledge import aten_ops
from ckptlint.analysis.flow.routing import flowing_names, parent_map, routing_use

COMPARISON = "a comparison"
BRANCH = "a branch condition"
INDEX = "an index"
POSITION = "a position argument"
SELECTION = "a selection whose indices route"

# reading these gives the tensor's shape or layout, not its values
_METADATA_ATTRIBUTES = frozenset({"shape", "dtype", "device", "ndim", "layout", "is_cuda", "requires_grad", "grad_fn", "names"})
_METADATA_METHODS = frozenset({"size", "dim", "numel", "nelement", "element_size", "stride", "is_contiguous", "type", "get_device", "data_ptr"})
_MODULE_ROOTS = frozenset({"torch", "F", "functional", "nn"})  # `torch.gather(...)`, `F.one_hot(...)`: the function form


@dataclass(frozen=True)
class Decision:
    """What an accumulation's result feeds: `feeds` for the message, `node` to quote."""

    feeds: str
    node: ast.AST


def decision_use(function: ast.AST, call: ast.Call, short: str) -> Decision | None:
    """The earliest routing decision the result of `call` (an accumulation) reaches, or None."""
    parents = parent_map(function)
    direct = _decision(call, function, parents)
    if direct is not None:
        return direct
    names = _bound_names(call, parents)
    if short.endswith("_") and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
        names.add(call.func.value.id)  # in place: the receiver holds the sums
    derived = flowing_names(function, names, call.lineno, bound=_assigned_names)
    inside = {id(node) for node in ast.walk(call)}
    uses = [
        found
        for node in ast.walk(function)
        if isinstance(node, ast.Name) and node.id in derived and isinstance(node.ctx, ast.Load)
        and node.lineno >= call.lineno and id(node) not in inside
        for found in [_decision(node, function, parents)]
        if found is not None
    ]  # fmt: skip
    return min(uses, key=lambda d: (getattr(d.node, "lineno", 0), getattr(d.node, "col_offset", 0))) if uses else None


def result_names(function: ast.AST, call: ast.Call, short: str) -> set[str]:
    """The names that hold the result of `call` (an accumulation) or are computed from it (the
    names `decision_use` follows); an in-place call's receiver, or the name its attribute is
    read from (`self.load.index_add_(...)`: `self`)."""
    names = _bound_names(call, parent_map(function))
    if short.endswith("_") and isinstance(call.func, ast.Attribute):
        root = call.func.value
        while isinstance(root, (ast.Attribute, ast.Subscript)):
            root = root.value
        if isinstance(root, ast.Name):
            names.add(root.id)
    return flowing_names(function, names, call.lineno, bound=_assigned_names)


def _bound_names(call: ast.Call, parents: dict[int, ast.AST]) -> set[str]:
    """The names the statement holding `call` assigns from it (`counts = torch.histc(...)`)."""
    node: ast.AST = call
    while not isinstance(node, ast.stmt):
        parent = parents.get(id(node))
        if parent is None or isinstance(parent, (ast.Lambda, ast.comprehension)):
            return set()
        node = parent
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None:
        if any(n is call for n in ast.walk(node.value)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            return {name for target in targets for name in _assigned_names(target)}
    return set()


def _assigned_names(target: ast.expr) -> set[str]:
    """Names that hold the assigned value: `a`, `a, b`, `out[idx]`'s `out`; not `idx`, nor
    an attribute's object."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return {name for element in target.elts for name in _assigned_names(element)}
    if isinstance(target, ast.Starred):
        return _assigned_names(target.value)
    if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
        return {target.value.id}
    return set()


def _decision(node: ast.AST, function: ast.AST, parents: dict[int, ast.AST]) -> Decision | None:
    """The decision `node` (or an expression computed from it in the same statement) feeds."""
    child = node
    parent = parents.get(id(child))
    while parent is not None and not isinstance(parent, (ast.Lambda, ast.comprehension)):
        if isinstance(parent, ast.keyword):  # `F.one_hot(input=keep)`: the call takes the value
            parent = parents.get(id(parent))
            continue
        if isinstance(parent, ast.stmt):
            return Decision(BRANCH, child) if isinstance(parent, (ast.If, ast.While)) and parent.test is child else None
        if isinstance(parent, ast.Subscript) and parent.slice is child:
            return Decision(INDEX, parent)
        if isinstance(parent, ast.Compare):
            return Decision(COMPARISON, parent)
        if isinstance(parent, ast.IfExp) and parent.test is child:
            return Decision(BRANCH, child)
        if isinstance(parent, ast.Call):
            return _call_decision(parent, child, False, function)  # another call's argument: not followed
        if isinstance(parent, ast.Attribute):
            call = parents.get(id(parent))
            if not (isinstance(call, ast.Call) and call.func is parent):
                if parent.attr in _METADATA_ATTRIBUTES:
                    return None
            elif parent.attr in _METADATA_METHODS:
                return None
            else:
                found = _call_decision(call, child, True, function)
                if found is not None:
                    return found
                parent = call  # `counts.float()`: a value computed from the receiver
        child, parent = parent, parents.get(id(parent))
    return None


def _call_decision(call: ast.Call, child: ast.AST, receiver: bool, function: ast.AST) -> Decision | None:
    """Whether `call` decides with `child`, its receiver or one of its arguments."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name in aten_ops.COMPARISON_CALLS:
        return Decision(COMPARISON, call)
    function_form = not receiver and (isinstance(func, ast.Name) or _root(func) in _MODULE_ROOTS)
    if name in aten_ops.SELECTION_NAMES:
        selected = receiver or (function_form and bool(call.args) and call.args[0] is child)
        return Decision(SELECTION, call) if selected and routing_use(function, call, name) is not None else None
    position = aten_ops.DECISION_POSITIONS.get(name)
    if position is None:
        return None
    function_index, method_index, keyword = position
    if receiver:
        return Decision(POSITION, call) if method_index == -1 else None
    index = function_index if function_form else method_index
    given = call.args[index] if 0 <= index < len(call.args) else next((k.value for k in call.keywords if k.arg == keyword), None)
    return Decision(POSITION, call) if given is child else None


def _root(func: ast.expr) -> str:
    node = func
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) and node is not func else ""
