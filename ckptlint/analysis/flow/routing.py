"""Whether a selection's indices choose what the rest of a function computes (CKP504).

`weights, experts = torch.topk(scores, k)` routes when `experts` (or a name computed from
it: `experts.view(-1)`, `experts == i`, `torch.argsort(experts)`) is used as an index
(`x[order]`, `out[mask] = ...`) or passed to a call that picks positions with it
(`F.one_hot(experts, n)`, `torch.gather(x, 1, experts)`, `counts.scatter_(1, experts, 1)`,
aten_ops.ROUTING_CALLS; by keyword only under the keyword that takes the positions, as torch
spells it: `index=`, `indices=`, `F.one_hot(input=...)`, aten_ops.DECISION_POSITIONS), or
sorted (`experts.argsort()`, `torch.argsort(experts)`) where the sort's result is so used: a
sort of the indices is reported at the selection, not as a selection of its own
(regions/library_calls.py, integers.py). Indices kept only for a metric (`(pred == labels).float().mean()`)
or discarded (`values, _ = torch.topk(...)`) do not route: a recompute that picks other
indices among ties changes nothing the backward reads. Read from the function's own lines,
in order from the selection on (a loop that uses a name before the line computing it is not
followed); names handed to a callee are listed (`handed_on`) for the caller's interpreter,
which asks the callee whether its parameter routes (`parameter_routing_use`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from ckptlint.analysis.flow.statements import exclusive_lines, if_branches
from ckptlint.analysis.knowledge import aten_ops
from ckptlint.syntax import own_statements

_VALUES_ONLY = frozenset({"values"})  # `torch.topk(...).values`: the scores, not the indices
_INDEX_POSITION = {"topk": 1, "sort": 1}  # where the indices are in the result's tuple


def index_position(short: str) -> int | None:
    """Where a selection's result tuple holds its indices (`topk`, `sort`: 1); None when the
    result is the indices (`argmax`, `argsort`)."""
    return _INDEX_POSITION.get(short)


def routing_use(function: ast.AST, call: ast.Call, short: str) -> ast.AST | None:
    """Where the indices of `call` (a `topk`, `sort`, `argsort`, `argmax`, `argmin`) route,
    or None when they do not."""
    return routing_use_at(function, call, index_position(short))


def routing_use_at(function: ast.AST, call: ast.Call, position: int | None) -> ast.AST | None:
    """`routing_use` for a call whose result holds indices at `position` (None: the whole
    value): a selection, or a helper's call that returned one's indices (`weights, experts =
    self.route(x)`)."""
    parents = parent_map(function)
    holder, target = _holder(call, parents, position)
    if holder is None:
        return None
    direct = _routing_position(holder, parents)
    if direct is not None:
        return direct
    derived = flowing_names(function, set(_index_names(target, position)), call.lineno)
    if not derived:
        return None
    line = call.lineno
    branches = list(if_branches(function))
    uses = [
        found
        for node in ast.walk(function)
        if isinstance(node, ast.Name) and node.id in derived and isinstance(node.ctx, ast.Load) and node.lineno >= line
        if not exclusive_lines(branches, line, node.lineno)  # another arm of an `if` the selection is in
        for found in [_routing_position(node, parents)]
        if found is not None
    ]
    return min(uses, key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))) if uses else None


@dataclass(frozen=True)
class Returned:
    """Where a function's return value holds a selection's indices: `position` in the
    returned tuple (`return weights, experts`: 1), None when the value is the indices."""

    position: int | None


def returned_indices(function: ast.AST, call: ast.Call, position: int | None) -> Returned | None:
    """Where the function returns the indices `call`'s result holds at `position` (a
    selection, `return logits.topk(k).indices`, `return weights, experts`; or a helper's call
    that returned them, returned on), or None when it does not return them. Its caller decides
    whether they route (`routing_use_at`)."""
    parents = parent_map(function)
    holder, target = _holder(call, parents, position)
    if holder is None:
        return None
    if isinstance(parents.get(id(holder)), ast.Return):
        return Returned(position if holder is call else None)  # `return torch.topk(...)`, `return x.topk(k).indices`
    derived = flowing_names(function, set(_index_names(target, position)), call.lineno)
    branches = list(if_branches(function))
    for node in own_statements(function):
        if not (isinstance(node, ast.Return) and node.value is not None and node.lineno >= call.lineno):
            continue
        if exclusive_lines(branches, call.lineno, node.lineno):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in derived:
            return Returned(None)
        if isinstance(node.value, ast.Tuple):
            for index, element in enumerate(node.value.elts):
                if isinstance(element, ast.Name) and element.id in derived:
                    return Returned(index)
    return None


def handed_on(function: ast.AST, call: ast.Call, position: int | None) -> list[tuple[ast.Call, int | str]]:
    """The later calls of the function that are handed the indices `call`'s result holds at
    `position` (or a name computed from them) as an argument of their own (`self.experts(x,
    top_k_index, weights)`): each call with the argument's position or keyword. Whether they
    route there is the callee's to say (`parameter_routing_use`)."""
    parents = parent_map(function)
    holder, target = _holder(call, parents, position)
    if holder is None:
        return []
    names = set(_index_names(target, position))
    if not names:
        return []
    branches = list(if_branches(function))
    found: list[tuple[ast.Call, int | str]] = []
    for node in ast.walk(function):
        if not isinstance(node, ast.Call) or node is call or node.lineno < call.lineno or exclusive_lines(branches, call.lineno, node.lineno):
            continue
        # what the names hold when the call reads them: `h = self.experts(h, idx, w)` hands on `idx`, not `h`
        derived = flowing_names(function, names, call.lineno, until=node.lineno) if node.lineno > call.lineno else names
        found += [(node, index) for index, argument in enumerate(node.args) if isinstance(argument, ast.Name) and argument.id in derived]
        found += [(node, k.arg) for k in node.keywords if k.arg is not None and isinstance(k.value, ast.Name) and k.value.id in derived]
    return found


def parameter_routing_use(function: ast.AST, name: str) -> ast.AST | None:
    """Where the function routes with the indices its parameter `name` holds (`F.one_hot(top_k_index,
    n)` in an experts module handed its router's selection), or None when it does not."""
    parents = parent_map(function)
    derived = flowing_names(function, {name}, 0)
    uses = [
        found
        for node in ast.walk(function)
        if isinstance(node, ast.Name) and node.id in derived and isinstance(node.ctx, ast.Load)
        for found in [_routing_position(node, parents)]
        if found is not None
    ]
    return min(uses, key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))) if uses else None


def index_names(function: ast.AST, call: ast.Call, short: str) -> set[str]:
    """The names that hold the indices of `call` or are computed from them (the names
    `routing_use` follows), for whether they leave the code that computes them."""
    position = index_position(short)
    holder, target = _holder(call, parent_map(function), position)
    return flowing_names(function, set(_index_names(target, position)), call.lineno) if holder is not None else set()


def flowing_names(
    function: ast.AST, names: set[str], line: int, bound: Callable[[ast.expr], set[str]] | None = None, until: int | None = None
) -> set[str]:
    """`names` and every name assigned from an expression mentioning one of them, reading the
    function's assignments in order from `line` on, and before line `until` when given (shared
    with accumulation.py). `bound`: the names an assignment target binds (default: every name
    in it, `out[idx]`'s `idx` too)."""
    derived = set(names)
    if not derived:
        return derived
    statements = sorted(
        (s for s in own_statements(function) if s.lineno >= line and (until is None or s.lineno < until)), key=lambda s: (s.lineno, s.col_offset)
    )
    for statement in statements:
        if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and statement.value is not None:
            if _mentions(statement.value, derived):
                targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                derived |= {name for t in targets for name in (bound or _every_name)(t)}
    return derived


def _every_name(target: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def parent_map(function: ast.AST) -> dict[int, ast.AST]:
    """Each node's parent, by the child's id."""
    return {id(child): parent for parent in ast.walk(function) for child in ast.iter_child_nodes(parent)}


def _holder(call: ast.Call, parents: dict[int, ast.AST], position: int | None) -> tuple[ast.AST | None, ast.expr | None]:
    """The expression holding the indices (the call, or `call.indices` / `call[1]`) and the
    assignment target it is bound to, if any; (None, None) when only the values are taken.
    `position`: where the call's tuple holds the indices (None: it is the indices)."""
    holder: ast.AST = call
    parent = parents.get(id(call))
    if isinstance(parent, ast.Attribute):
        if parent.attr in _VALUES_ONLY:
            return None, None
        holder = parent
    elif isinstance(parent, ast.Subscript) and position is not None and isinstance(parent.slice, ast.Constant):
        if parent.slice.value != position:
            return None, None
        holder = parent
    bound = parents.get(id(holder))
    if isinstance(bound, ast.Assign) and len(bound.targets) == 1:
        target = bound.targets[0]
        if holder is not call and isinstance(target, ast.Name):
            return holder, target  # already the indices
        return holder, target if holder is call else None
    return holder, None


def _index_names(target: ast.expr | None, position: int | None) -> list[str]:
    if isinstance(target, ast.Tuple) and position is not None and len(target.elts) > position:
        element = target.elts[position]
        return [element.id] if isinstance(element, ast.Name) and element.id != "_" else []
    if isinstance(target, ast.Name):
        return [target.id]
    return []


def _mentions(expression: ast.AST, names: set[str]) -> bool:
    return any(isinstance(node, ast.Name) and node.id in names for node in ast.walk(expression))


def _routing_position(node: ast.AST, parents: dict[int, ast.AST]) -> ast.AST | None:
    """The indexing or routing call that `node` (or an expression built from it) feeds directly."""
    child = node
    parent = parents.get(id(child))
    while parent is not None and not isinstance(parent, (ast.stmt, ast.Lambda, ast.comprehension)):
        if isinstance(parent, ast.Subscript) and parent.slice is child:
            return parent
        if isinstance(parent, ast.keyword):  # `torch.gather(x, 0, index=order)`: the keyword that takes positions
            call = parents.get(id(parent))
            if isinstance(call, ast.Call) and parent.arg is not None and parent.arg == _position_keyword(call):
                return call
            if isinstance(call, ast.Call) and _called(call) in aten_ops.SORTS and parent.arg == "input":
                child, parent = call, parents.get(id(call))  # `torch.argsort(input=experts)`: computed from them
                continue
            return None
        if isinstance(parent, ast.Call) and _routing_call(parent) and child in parent.args:
            return parent
        if isinstance(parent, ast.Attribute) and parent.attr in aten_ops.ROUTING_CALLS:
            call = parents.get(id(parent))
            if isinstance(call, ast.Call) and call.func is parent:
                return call  # `experts.bincount()`
        if isinstance(parent, ast.Call) and _called(parent) in aten_ops.SORTS and (parent.func is child or (bool(parent.args) and parent.args[0] is child)):
            child, parent = parent, parents.get(id(parent))  # `experts.argsort()`, `torch.argsort(experts)`: computed from them
            continue
        if isinstance(parent, ast.Call):
            return None  # another call's argument: what it returns is not followed here
        child, parent = parent, parents.get(id(parent))
    return None


def _routing_call(call: ast.Call) -> bool:
    return _called(call) in aten_ops.ROUTING_CALLS


def _position_keyword(call: ast.Call) -> str | None:
    """The keyword under which a routing call takes the positions it picks (`index`, `indices`,
    `input` for `F.one_hot`, `mask`), as torch spells it."""
    position = aten_ops.DECISION_POSITIONS.get(_called(call)) if _routing_call(call) else None
    return position[2] if position is not None else None


def _called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
