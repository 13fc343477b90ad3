"""Syntax facts about one function's body that the composition checks share (CKP305, CKP403-CKP405):
its `if` branches, the function a nested scope belongs to, a callee's last word, an
expression's root name."""

from __future__ import annotations

import ast
from typing import Iterator

from ckptlint.symbols import Scope
from ckptlint.syntax import own_statements


def if_branches(function: ast.AST) -> Iterator[tuple[ast.expr, bool, int, int]]:
    """Each `if` of a function as (test, True, first line, last line) for its body and
    (test, False, ...) for its `else`, nested functions aside."""
    for statement in own_statements(function):
        if isinstance(statement, ast.If):
            for side, body in ((True, statement.body), (False, statement.orelse)):
                if body:
                    yield statement.test, side, body[0].lineno, body[-1].end_lineno or body[-1].lineno


def function_scope(scope: Scope) -> Scope:
    """The function (or module) a call's statements belong to: lambdas and comprehensions are folded in."""
    current = scope
    while current.parent is not None and isinstance(current.node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        current = current.parent
    return current


def callee_leaf(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def root_name(expr: ast.expr) -> str | None:
    """`model` for `model`, `model.base.layers[0]`, `model.get_input_embeddings()`."""
    while True:
        if isinstance(expr, ast.Name):
            return expr.id
        if isinstance(expr, (ast.Attribute, ast.Subscript)):
            expr = expr.value
        elif isinstance(expr, ast.Call):
            expr = expr.func
        else:
            return None
