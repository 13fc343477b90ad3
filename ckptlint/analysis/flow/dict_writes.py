"""What a function writes into a dict it then unpacks into a call (`Block(**ba)`).

timm's block builders collect a block's arguments in a dict (`ba['norm_layer'] =
self.norm_layer`, `ba.update(self.dd)`) and build with `UniversalInvertedResidual(**ba)`.
Without those keys the constructor's default (`norm_layer=nn.BatchNorm2d`) looks kept, and a
block configured with an RmsNorm reads as one with running statistics. Syntactic: this finds
the writes, inference gives them types (`TypeInference.unpacked_keywords`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ckptlint.symbols import ANNOTATION, ASSIGN, PARAM, ModuleSymbols, Scope
from ckptlint.syntax import walk

READING_METHODS = frozenset({"get", "keys", "values", "items", "copy", "__contains__", "__getitem__"})
READING_BUILTINS = frozenset({"str", "repr", "len", "print", "bool", "isinstance", "sorted", "list", "tuple", "set", "dict", "iter"})


@dataclass
class DictWrites:
    """The writes to a dict in the function whose call unpacks it (values from any of them)."""

    values: dict[str, list[ast.expr]] = field(default_factory=dict)  # each constant key, with the values written under it
    sure: set[str] = field(default_factory=set)  # keys written on every path to the call
    removed: set[str] = field(default_factory=set)  # keys popped or deleted somewhere: the call may miss them
    merged: list[tuple[ast.expr, bool, bool]] = field(default_factory=list)  # (mapping merged in, on every path, is the dict's start)
    opaque: bool = False  # a write that can give or remove any key: a computed key, `ba.clear()`, the dict passed on or aliased


def dict_writes(module: ModuleSymbols, scope: Scope, use: ast.Name) -> DictWrites | None:
    """The writes to the dict `use` names (`**ba`) in the function holding the call; None
    when the name is not one local binding of that function (then nothing is known)."""
    function = scope.node
    bindings = [b for b in scope.bindings.get(use.id, ()) if b.kind != ANNOTATION]
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or len(bindings) != 1 or use.id in scope.nonlocals | scope.globals:
        return None
    parents = {id(child): node for node in walk(function) for child in ast.iter_child_nodes(node)}
    writes = DictWrites()
    binding = bindings[0]
    if binding.kind == ASSIGN and isinstance(binding.node, ast.stmt):
        _start(writes, binding.value, _before(binding.node, use, parents), module, scope)
    elif binding.kind == PARAM and not _is_rest_parameter(function, use.id):  # `_make_block(self, ba)`: the keys of the dict the caller hands over
        writes.merged.append((use, True, True))
    for node in walk(function):
        if isinstance(node, ast.Name) and node.id == use.id and isinstance(node.ctx, ast.Load) and node is not use:
            _use(writes, node, use, parents, module, scope)
    return writes


def _is_rest_parameter(function: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> bool:
    """`**kwargs` or `*args` of the function: what its callers pass, followed elsewhere (factories.py)."""
    rest = [function.args.vararg, function.args.kwarg]
    return any(parameter is not None and parameter.arg == name for parameter in rest)


def _start(writes: DictWrites, value: ast.expr | None, sure: bool, module: ModuleSymbols, scope: Scope) -> None:
    """The dict's first value: `{'k': v}` and `dict(k=v)` give their keys; anything else, keys not known."""
    if isinstance(value, ast.Dict):
        _literal(writes, value, sure, start=True)
    elif isinstance(value, ast.Call) and _is_builtin(value.func, "dict", module, scope):
        writes.merged.extend((argument, sure, True) for argument in value.args)
        _keywords(writes, value, sure, start=True)


def _literal(writes: DictWrites, value: ast.Dict, sure: bool, start: bool) -> None:
    for key, item in zip(value.keys, value.values):
        if key is None:
            writes.merged.append((item, sure, start))  # `{**other, 'k': v}`
        elif (name := _key(key)) is not None:
            _write(writes, name, item, sure)
        else:
            writes.opaque = True


def _keywords(writes: DictWrites, call: ast.Call, sure: bool, start: bool) -> None:
    for keyword in call.keywords:
        if keyword.arg is None:
            writes.merged.append((keyword.value, sure, start))
        else:
            _write(writes, keyword.arg, keyword.value, sure)


def _use(writes: DictWrites, name: ast.Name, use: ast.Name, parents: dict[int, ast.AST], module: ModuleSymbols, scope: Scope) -> None:
    """One other use of the dict: a read, a write under a constant key, or anything else (opaque)."""
    if _function_of(name, parents) is not _function_of(use, parents):
        writes.opaque = True  # a nested function's: it runs whenever it is called
        return
    parent = parents.get(id(name))
    if isinstance(parent, ast.Subscript) and parent.value is name:
        statement, key = parents.get(id(parent)), _key(parent.slice)
        if isinstance(parent.ctx, ast.Load):
            return
        if key is None:
            writes.opaque = True
        elif isinstance(parent.ctx, ast.Del):
            writes.removed.add(key)
        elif isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
            _write(writes, key, statement.value, _before(statement, use, parents))
        elif not isinstance(statement, ast.AugAssign):  # `ba['out_chs'] *= 4` keeps the key, and its value is no class
            writes.opaque = True
        return
    if isinstance(parent, ast.Attribute) and parent.value is name:
        call = parents.get(id(parent))
        if not (isinstance(call, ast.Call) and call.func is parent):
            writes.opaque = True
        elif parent.attr in READING_METHODS:
            pass
        elif parent.attr in ("update", "setdefault", "pop"):
            _update(writes, parent.attr, call, _before(call, use, parents))
        else:
            writes.opaque = True
        return
    if isinstance(parent, (ast.Compare, ast.FormattedValue)) or (isinstance(parent, ast.keyword) and parent.arg is None):
        return  # `'k' in ba`, `f'{ba}'`, another `**ba`
    if isinstance(parent, (ast.For, ast.comprehension)) and parent.iter is name:
        return
    if isinstance(parent, ast.Call) and name in parent.args and _reads(parent.func, module, scope):
        return  # `str(ba)`, `'{}'.format(ba)`
    writes.opaque = True  # passed to a call, aliased, stored or returned: anything may write it


def _update(writes: DictWrites, method: str, call: ast.Call, sure: bool) -> None:
    """`ba.update(k=v)`, `ba.update({'k': v})`, `ba.update(other)`, `ba.setdefault('k', v)`, `ba.pop('k')`."""
    if method in ("setdefault", "pop"):
        key = _key(call.args[0]) if call.args else None
        if key is None:
            writes.opaque = True
        elif method == "pop":
            writes.removed.add(key)
        else:
            _write(writes, key, call.args[1] if len(call.args) > 1 else ast.Constant(None), sure)
        return
    for argument in call.args:
        if isinstance(argument, ast.Dict):
            _literal(writes, argument, sure, start=False)
        else:
            writes.merged.append((argument, sure, False))
    _keywords(writes, call, sure, start=False)


def _write(writes: DictWrites, key: str, value: ast.expr, sure: bool) -> None:
    writes.values.setdefault(key, []).append(value)
    if sure:
        writes.sure.add(key)


def _key(key: ast.expr | None) -> str | None:
    """A constant string key; None for any other."""
    return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None


def _is_builtin(func: ast.expr, name: str, module: ModuleSymbols, scope: Scope) -> bool:
    return isinstance(func, ast.Name) and func.id == name and module.binding(scope, name, func.lineno) is None


def _reads(func: ast.expr, module: ModuleSymbols, scope: Scope) -> bool:
    """A call that only reads a dict passed to it: a builtin such as `str`, or `'...'.format`."""
    if isinstance(func, ast.Attribute):
        return func.attr == "format" and isinstance(func.value, ast.Constant) and isinstance(func.value.value, str)
    return isinstance(func, ast.Name) and func.id in READING_BUILTINS and _is_builtin(func, func.id, module, scope)


def _before(statement: ast.AST, use: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Whether `statement` runs before `use` on every path to it: it comes earlier in the same
    list of statements as the statement holding `use`, or as one enclosing that statement."""
    while not isinstance(statement, ast.stmt):
        parent = parents.get(id(statement))
        if parent is None:
            return False
        statement = parent
    node: ast.AST = use
    while id(node) in parents:
        parent = parents[id(node)]
        if isinstance(node, ast.stmt):
            for block in _blocks(parent):
                if any(s is node for s in block):
                    earlier = block[: next(i for i, s in enumerate(block) if s is node)]
                    if any(s is statement for s in earlier):
                        return True
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return False
        node = parent
    return False


def _function_of(node: ast.AST, parents: dict[int, ast.AST]) -> ast.AST | None:
    while id(node) in parents:
        node = parents[id(node)]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return node
    return None


def _blocks(node: ast.AST) -> list[list[ast.stmt]]:
    blocks = [getattr(node, name) for name in ("body", "orelse", "finalbody") if isinstance(getattr(node, name, None), list)]
    blocks.extend(handler.body for handler in getattr(node, "handlers", ()))
    blocks.extend(case.body for case in getattr(node, "cases", ()))
    return blocks


_CHANGING_METHODS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update", "setdefault", "popitem"})


def changed_in_place(scope: Scope, name: str, items: bool = True) -> bool:
    """Whether the function changes the object `name` holds: an item (with `items`) or attribute
    stored or deleted, an augmented assignment, or a changing method called on it."""
    node = scope.node
    if scope.kind == "module" or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return False
    for inner in ast.walk(node):
        if isinstance(inner, (ast.Subscript, ast.Attribute)) and isinstance(inner.ctx, (ast.Store, ast.Del)):
            if isinstance(inner.value, ast.Name) and inner.value.id == name and (items or isinstance(inner, ast.Attribute)):
                return True
        elif isinstance(inner, ast.AugAssign) and isinstance(inner.target, ast.Name) and inner.target.id == name:
            return True
        elif isinstance(inner, ast.Call):
            func = inner.func
            if isinstance(func, ast.Attribute) and func.attr in _CHANGING_METHODS and isinstance(func.value, ast.Name) and func.value.id == name:
                return True
    return False
