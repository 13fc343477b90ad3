"""Tests whose outcome is known in the context a function is analysed in.

A branch that cannot be taken runs nothing in the replay either: `if use_cache:` with
`use_cache=False` (transformers turns the cache off when it checkpoints a layer in
training), `if cache is not None:` with `cache=None`, `x.mul_(y) if self.inplace else x.mul(y)`
with `inplace=False` (the constructor's default). Values carry what is known of their truth as a
type: `None`, `False` and `True` constants.
"""

from __future__ import annotations

import ast
from typing import Callable

from ckptlint.analysis.semantics.values import (
    CONST,
    FALSE_TYPE,
    NONE_TYPE,
    TRUE_TYPE,
    ClassObjectType,
    LiteralType,
    Types,
    Value,
    number_of,
)

_FALSE_TYPES = frozenset({NONE_TYPE, FALSE_TYPE})
TRUTH_TYPES = frozenset({NONE_TYPE, FALSE_TYPE, TRUE_TYPE})  # the types that decide a test

Lookup = Callable[[str], "Value | None"]
Truth = Callable[[ast.expr], "bool | None"]
Evaluate = Callable[[ast.expr], "Value | None"]


def false_value(path: str = "", none: bool | None = False) -> Value:
    """A constant known to be false: `False`, `None` with `none`, either with `none=None`."""
    types = _FALSE_TYPES if none is None else frozenset({NONE_TYPE if none else FALSE_TYPE})
    return Value(frozenset({CONST}), types, path=path)


def constant_value(value: object) -> Value | None:
    """The typed value of a constant whose truth is known (`None`, `False`, `True`); None for any other."""
    if value is None:
        return false_value(none=True)
    if value is False:
        return false_value()
    if value is True:
        return Value(frozenset({CONST}), frozenset({TRUE_TYPE}))
    return None


def is_false(value: Value) -> bool:
    return bool(value.types) and value.types <= _FALSE_TYPES


def is_true(value: Value) -> bool:
    return value.types == frozenset({TRUE_TYPE})


def known_truth(test: ast.expr, lookup: Lookup, values: bool = False, evaluate: Evaluate | None = None) -> bool | None:
    """True or False when the test's outcome follows from constants and known-false names; None
    otherwise. With `values`, also from what the names hold (`isinstance(attn_type, str)` with a
    class, `attn_type == 'se'` with a string constant, the truth of a class): for the arguments
    a builder is called with, not for a region's attributes, whose string defaults (a config
    dataclass's `routing_type = "aux_loss"`) the configuration a project runs may override.
    `evaluate` gives the value of a lookup in a config dict (`ba.get('num_experts', 0)`,
    `ba['stride']`), for the tests a builder makes of the dict it is handed."""
    if isinstance(test, ast.Constant):
        return bool(test.value)
    if isinstance(test, (ast.Name, ast.Attribute)):  # a flag: `inplace`, `self.inplace`
        path = _dotted(test)
        value = lookup(path) if path is not None else None
        if value is None:
            return None
        return False if is_false(value) else True if is_true(value) else _truthiness(value) if values else None
    if evaluate is not None and values and is_dict_lookup(test):
        value = evaluate(test)
        return None if value is None else False if is_false(value) else True if is_true(value) else _truthiness(value)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = known_truth(test.operand, lookup, values, evaluate)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        outcomes = [known_truth(value, lookup, values, evaluate) for value in test.values]
        decisive = isinstance(test.op, ast.Or)  # `or` is decided by a true operand, `and` by a false one
        if decisive in outcomes:
            return decisive
        return (not decisive) if all(outcome is not None for outcome in outcomes) else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot)):
        return _identity_test(test, lookup)
    if evaluate is not None and values:
        lookup = _with_dict_lookups(lookup, evaluate, test)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], tuple(_ORDER)):
        numeric = _numeric_test(test, lookup)
        if numeric is not None:
            return numeric
    if not values:
        return None
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq)):
        return _equality_test(test, lookup)
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance" and len(test.args) == 2:
        return _isinstance_test(test.args[0], test.args[1], lookup)
    return None


def is_dict_lookup(expr: ast.expr) -> bool:
    """`ba.get('num_experts', 0)`, `ba.pop('s2d', False)`, `ba['stride']`: a string key looked up in a name."""
    if isinstance(expr, ast.Subscript):
        key, base = expr.slice, expr.value
    elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("get", "pop") and expr.args:
        key, base = expr.args[0], expr.func.value
    else:
        return False
    return isinstance(base, ast.Name) and isinstance(key, ast.Constant) and isinstance(key.value, str)


def _with_dict_lookups(lookup: Lookup, evaluate: Evaluate, test: ast.Compare | ast.expr) -> Lookup:
    """`lookup`, extended to the dict lookups the test compares (by their text)."""
    operands = [test.left, *test.comparators] if isinstance(test, ast.Compare) else []
    looked_up = {ast.unparse(o): o for o in operands if is_dict_lookup(o)}
    if not looked_up:
        return lookup

    def extended(path: str) -> Value | None:
        node = looked_up.get(path)
        return evaluate(node) if node is not None else lookup(path)

    return extended


def _truthiness(value: Value) -> bool | None:
    """Class objects are true; string and int constants are what Python says; else unknown."""
    outcomes = set()
    for item in value.types:
        if isinstance(item, ClassObjectType):
            outcomes.add(True)
        elif isinstance(item, LiteralType):
            outcomes.add(_literal_truth(item))
        else:
            return None
    return outcomes.pop() if len(outcomes) == 1 else None


def none_test_types(test: ast.Compare, types_of: Callable[[ast.expr], Types]) -> Types:
    """What `x is None` / `x is not None` gives as a flag (`self.with_norm = norm_cfg is not None`)
    when the operand's types say whether it is None: `False`, `True`, or both; nothing for another
    comparison or an operand whose types are not known."""
    if not (len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot))):
        return frozenset()
    operand, other = test.left, test.comparators[0]
    if isinstance(operand, ast.Constant) and operand.value is None:
        operand, other = other, operand
    if not (isinstance(other, ast.Constant) and other.value is None):
        return frozenset()
    types = types_of(operand)
    if not types:
        return frozenset()
    negate = isinstance(test.ops[0], ast.IsNot)
    return frozenset(TRUE_TYPE if (item == NONE_TYPE) != negate else FALSE_TYPE for item in types)


def _literal_truth(item: LiteralType) -> bool:
    if not item.number:
        return bool(item.value)
    number = number_of(item)
    return True if number is None else bool(number)


_ORDER: dict[type[ast.cmpop], Callable[[float, float], bool]] = {
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
}
_MIRRORED: dict[type[ast.cmpop], type[ast.cmpop]] = {ast.Gt: ast.Lt, ast.GtE: ast.LtE, ast.Lt: ast.Gt, ast.LtE: ast.GtE, ast.Eq: ast.Eq, ast.NotEq: ast.NotEq}


def _numeric_test(test: ast.Compare, lookup: Lookup) -> bool | None:
    """`self.drop > 0.` with `self.drop` known to be only number constants (what every
    construction of the instance passed, or the default): decided when all agree."""
    left, right, op = test.left, test.comparators[0], type(test.ops[0])
    if number_constant(left) is not None:
        left, right, op = right, left, _MIRRORED[op]
    bound = number_constant(right)
    path = _dotted(left)
    if bound is None or path is None:
        return None
    value = lookup(path)
    numbers = [_as_number(t) for t in value.types] if value is not None and value.types else [None]
    known = [n for n in numbers if n is not None]
    if len(known) < len(numbers):
        return None
    outcomes = {_ORDER[op](n, bound) for n in known}
    return outcomes.pop() if len(outcomes) == 1 else None


def _as_number(item: object) -> float | None:
    """A number constant's value; `False` and `True` are 0 and 1, as Python compares them (`s2d == 1`)."""
    if item == FALSE_TYPE:
        return 0.0
    if item == TRUE_TYPE:
        return 1.0
    return number_of(item)  # type: ignore[arg-type]  # any other type gives None


def number_constant(expr: ast.expr | None) -> float | None:
    """A number constant's value, `-1` included; None for any other expression."""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        inner = number_constant(expr.operand)
        return None if inner is None else -inner
    if isinstance(expr, ast.Constant) and isinstance(expr.value, (int, float)) and not isinstance(expr.value, bool):
        return float(expr.value)
    return None


def _strings(value: Value | None) -> set[str] | None:
    """The string constants a value can be, when it is nothing else."""
    if value is None or not value.types or not all(isinstance(t, LiteralType) and not t.number for t in value.types):
        return None
    return {t.value for t in value.types if isinstance(t, LiteralType)}


def _equality_test(test: ast.Compare, lookup: Lookup) -> bool | None:
    """`attn_type == 'se'` with `attn_type` known to be one of some string constants."""
    left, right = test.left, test.comparators[0]
    if isinstance(left, ast.Constant):
        left, right = right, left
    if not (isinstance(right, ast.Constant) and isinstance(right.value, str)):
        return None
    path = _dotted(left)
    strings = _strings(lookup(path)) if path is not None else None
    if strings is None:
        return None
    equal = {value == right.value for value in strings}
    if len(equal) != 1:
        return None
    outcome = equal.pop()
    return outcome if isinstance(test.ops[0], ast.Eq) else not outcome


# what `isinstance(x, T)` names that neither a class object (nor a partial of one) nor a string is
_NOT_CLASS_OBJECTS = frozenset({"str", "bool", "int", "float", "dict", "list", "tuple", "nn.Module", "torch.nn.Module"})
_NOT_STRINGS = _NOT_CLASS_OBJECTS - {"str"} | {"type", "functools.partial", "partial", "types.FunctionType"}


def _isinstance_test(subject: ast.expr, kinds: ast.expr, lookup: Lookup) -> bool | None:
    """`isinstance(norm_layer, str)` with `norm_layer` known to hold classes, or string constants."""
    path = _dotted(subject)
    value = lookup(path) if path is not None else None
    if value is None or not value.types:
        return None
    names = {ast.unparse(k) for k in (kinds.elts if isinstance(kinds, ast.Tuple) else [kinds])}
    if all(isinstance(t, ClassObjectType) for t in value.types):
        return False if names <= _NOT_CLASS_OBJECTS else None
    if _strings(value) is not None:
        return True if "str" in names else False if names <= _NOT_STRINGS else None
    return None


def _identity_test(test: ast.Compare, lookup: Lookup) -> bool | None:
    """`x is None` / `x is not None` with `x` known to be None or False."""
    left, right = test.left, test.comparators[0]
    if isinstance(left, ast.Constant) and left.value is None:
        left, right = right, left
    if not (isinstance(right, ast.Constant) and right.value is None and isinstance(left, ast.Name)):
        return None
    value = lookup(left.id)
    if value is None or not is_false(value):
        return None
    if len(value.types) != 1:
        return None  # None or False: false, but which one is not known
    is_none = value.types == frozenset({NONE_TYPE})
    return is_none if isinstance(test.ops[0], ast.Is) else not is_none


def _dotted(expr: ast.expr) -> str | None:
    if is_dict_lookup(expr):
        return ast.unparse(expr)  # answered by `_with_dict_lookups`, or by no name
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    return ".".join([expr.id, *reversed(parts)]) if isinstance(expr, ast.Name) else None


def dead_lines(body: list[ast.stmt], truth: Truth) -> list[tuple[int, int]]:
    """The line ranges a call cannot run when `truth` decides some `if` tests outside loops: the
    arm not taken, and what follows a block that always returns (`if norm_layer is None: return
    None` with `norm_layer=None` leaves the rest of the function unrun)."""
    found: list[tuple[int, int]] = []
    _leaves(body, truth, found)
    return found


def _span(statements: list[ast.stmt]) -> tuple[int, int]:
    return statements[0].lineno, statements[-1].end_lineno or statements[-1].lineno


def _leaves(body: list[ast.stmt], truth: Truth, dead: list[tuple[int, int]]) -> bool:
    """Add the block's dead ranges to `dead`; whether the block always leaves the function."""
    for position, statement in enumerate(body):
        leaves = False
        if isinstance(statement, (ast.Return, ast.Raise)):
            leaves = True
        elif isinstance(statement, ast.If):
            outcome = truth(statement.test)
            if outcome is None:
                taken = _leaves(statement.body, truth, dead)
                leaves = _leaves(statement.orelse, truth, dead) and taken
            else:
                skipped = statement.orelse if outcome else statement.body
                if skipped:
                    dead.append(_span(skipped))
                leaves = _leaves(statement.body if outcome else statement.orelse, truth, dead)
        if leaves:
            if position + 1 < len(body):
                dead.append(_span(body[position + 1 :]))
            return True
    return False


def none_default_parameters(function: ast.AST) -> frozenset[str]:
    """The parameters of a def whose default is None: arguments a caller may leave out."""
    args = getattr(function, "args", None)
    if not isinstance(args, ast.arguments):
        return frozenset()
    positional = [*args.posonlyargs, *args.args]
    pairs = [*zip(positional[len(positional) - len(args.defaults) :], args.defaults), *zip(args.kwonlyargs, args.kw_defaults)]
    return frozenset(a.arg for a, default in pairs if isinstance(default, ast.Constant) and default.value is None)


def argument_guard(test: ast.expr, optional: frozenset[str] | set[str]) -> tuple[str, str]:
    """What an undecided test of an optional argument asks of the call, for its body and its
    `else`: `if past_key_values is not None:` runs its body only when the caller passes one
    (a model that checkpoints in training usually passes none). Empty for other tests."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        for value in test.values:
            body, _ = argument_guard(value, optional)
            if body:
                return body, ""
        return "", ""
    name, passed_in_body = None, True
    if isinstance(test, ast.Name):
        name = test.id
    elif isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name):
        other = test.comparators[0]
        if isinstance(other, ast.Constant) and other.value is None and isinstance(test.ops[0], (ast.Is, ast.IsNot)):
            name, passed_in_body = test.left.id, isinstance(test.ops[0], ast.IsNot)
    if name is None or name not in optional:
        return "", ""
    condition = f"`{name}` is not None"
    return (condition, "") if passed_in_body else ("", condition)
