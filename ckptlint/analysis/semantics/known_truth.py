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
    Value,
)

_FALSE_TYPES = frozenset({NONE_TYPE, FALSE_TYPE})
TRUTH_TYPES = frozenset({NONE_TYPE, FALSE_TYPE, TRUE_TYPE})  # the types that decide a test

Lookup = Callable[[str], "Value | None"]


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


def known_truth(test: ast.expr, lookup: Lookup) -> bool | None:
    """True or False when the test's outcome follows from constants and known-false names; None otherwise."""
    if isinstance(test, ast.Constant):
        return bool(test.value)
    if isinstance(test, (ast.Name, ast.Attribute)):  # a flag: `inplace`, `self.inplace`
        path = _dotted(test)
        value = lookup(path) if path is not None else None
        if value is None:
            return None
        return False if is_false(value) else True if is_true(value) else None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = known_truth(test.operand, lookup)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        outcomes = [known_truth(value, lookup) for value in test.values]
        decisive = isinstance(test.op, ast.Or)  # `or` is decided by a true operand, `and` by a false one
        if decisive in outcomes:
            return decisive
        return (not decisive) if all(outcome is not None for outcome in outcomes) else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot)):
        return _identity_test(test, lookup)
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
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    return ".".join([expr.id, *reversed(parts)]) if isinstance(expr, ast.Name) else None
