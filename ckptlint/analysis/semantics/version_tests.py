"""Tests of a library's version, decided by the version the code runs with (versions.py).

Training frameworks keep code for old releases behind version tests
(`version.parse(torch.__version__) >= version.parse("1.13")`, often bound once at module level
and tested in each helper); the arm an old release would take never runs with the installed or
pinned one, and what it does is no hazard of this code. Decided only for the tracked libraries
whose version (or pinned range) is known, and only when every version it allows agrees.
"""

from __future__ import annotations

import ast

from ckptlint.symbols import ASSIGN, ModuleSymbols, Scope
from ckptlint.versions import TRACKED, Release, Versions, release

_PARSERS = frozenset({"packaging.version.parse", "packaging.version.Version", "pkg_resources.parse_version", "distutils.version.LooseVersion"})


def version_test(test: ast.Compare, module: ModuleSymbols, scope: Scope, versions: Versions) -> bool | None:
    """The outcome of `parse(<lib>.__version__) <op> parse("X")` (either side), or None."""
    if len(test.ops) != 1:
        return None
    op, left, right = test.ops[0], test.left, test.comparators[0]
    library, literal = _library_version(left, module, scope), _literal_version(right, module, scope)
    if library is None or literal is None:
        library, literal = _library_version(right, module, scope), _literal_version(left, module, scope)
        op = _MIRRORED.get(type(op), op)  # `parse("1.13") <= parse(torch.__version__)`
    if library is None or literal is None:
        return None
    known = versions.get(library)
    if known is None or known.low is None:
        return None
    low, high = known.low, known.high  # [low, high): every version the code may run with
    if isinstance(op, (ast.GtE, ast.Gt)):
        if low >= literal and (isinstance(op, ast.GtE) or low > literal):
            return True
        if high is not None and high <= literal:
            return False
    elif isinstance(op, (ast.Lt, ast.LtE)):
        if low >= literal and (isinstance(op, ast.Lt) or low > literal):
            return False
        if high is not None and high <= literal:
            return True
    return None


def version_truth(test: ast.expr, module: ModuleSymbols, scope: Scope, versions: Versions) -> bool | None:
    """A version test written in place, or a name bound once to one (`if torch_version_above_1_13:`)."""
    if not versions.known:
        return None
    if isinstance(test, ast.Compare):
        return version_test(test, module, scope, versions)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = version_truth(test.operand, module, scope, versions)
        return None if inner is None else not inner
    if isinstance(test, ast.Name):
        bindings = module.lookup(scope, test.id)
        if len(bindings) == 1 and bindings[0].kind == ASSIGN and isinstance(bindings[0].value, ast.Compare) and bindings[0].written_from is None:
            return version_test(bindings[0].value, module, bindings[0].scope, versions)
    return None


_MIRRORED = {ast.LtE: ast.GtE(), ast.Lt: ast.Gt(), ast.GtE: ast.LtE(), ast.Gt: ast.Lt()}


def _library_version(expr: ast.expr, module: ModuleSymbols, scope: Scope) -> str | None:
    """`parse(torch.__version__)` -> "torch" (a tracked library's own version string)."""
    if not (isinstance(expr, ast.Call) and len(expr.args) == 1 and module.qualified_name(expr.func, scope) in _PARSERS):
        return None
    inner = expr.args[0]
    if isinstance(inner, ast.Attribute) and inner.attr == "__version__":
        name = module.qualified_name(inner.value, scope)
        return name if name in TRACKED else None
    return None


def _literal_version(expr: ast.expr, module: ModuleSymbols, scope: Scope) -> Release | None:
    """`parse("1.13.0")` -> (1, 13)."""
    if isinstance(expr, ast.Call) and len(expr.args) == 1 and module.qualified_name(expr.func, scope) in _PARSERS:
        value = expr.args[0]
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return release(value.value)
    return None
