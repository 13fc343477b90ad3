"""Parse source text into a tree, or say in one CKP000 finding why it cannot be parsed.

Analysis uses the standard library's `ast`: it parses about ten times faster than
libcst's native parser and carries end positions on every node (see docs/design-notes.md).
libcst is used where a concrete tree pays: source-preserving fixes, and reading a file
the running interpreter's grammar rejects (`newer_syntax.py`: code for a newer Python is
rewritten, line and column preserving, into text `ast` reads; only what libcst rejects too
is a CKP000).
"""

from __future__ import annotations

import ast
from typing import Callable, Iterator
import sys
import warnings

from ckptlint.finding import Finding
from ckptlint.source import SourceFile

PARSE_ERROR = "CKP000"


def parse_error(source: SourceFile, message: str, line: int = 1, column: int = 1) -> Finding:
    if source.text:
        line = max(1, min(line, len(source.lines)))
    line, column = max(1, line), max(1, column)
    return Finding(source.display_path, line, column, PARSE_ERROR, message, line, column)


def parse(source: SourceFile) -> ast.Module | Finding:
    """The module's tree, or a CKP000 finding; never raises for bad input."""
    null = source.text.find("\0")
    if null >= 0:
        line, column = source.position(null)
        return parse_error(source, "cannot parse file: it contains null bytes (is it a binary file?)", line, column)
    try:
        return _parse(source.parse_text, source.display_path)
    except SyntaxError as exc:
        return _parse_newer(source, exc)
    except ValueError as exc:
        return parse_error(source, f"cannot parse file: {exc}")
    except (RecursionError, MemoryError):
        return parse_error(source, "cannot parse file: expressions nested too deeply for the Python parser")


def _parse(text: str, filename: str) -> ast.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escape sequences and the like
        return ast.parse(text, filename=filename, type_comments=False)


def _parse_newer(source: SourceFile, error: SyntaxError) -> ast.Module | Finding:
    """The tree of a file written for a newer Python (its positions are the file's), else the
    CKP000 of the running grammar's `error` (libcst rejects the file too, or reads it in a way
    not lowered). Only called after `ast` failed: files it reads never pay for libcst. A text
    libcst's native parser might crash on is measured first: brackets nested too deeply for
    any Python are their own CKP000, and a text that cannot be ruled out is read in a child
    process, whose crash is this file's CKP000 (contained_lowering.py)."""
    from ckptlint.contained_lowering import Crashed, TooDeep, lower_contained

    lowered = lower_contained(source.parse_text)
    if isinstance(lowered, TooDeep):
        return parse_error(source, lowered.message, lowered.line, lowered.column)
    if isinstance(lowered, str):
        try:
            return _parse(lowered, source.display_path)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            pass
    message = f"syntax error: {error.msg} (Python {_python_version()} grammar)"
    if isinstance(lowered, Crashed):
        message += f"; {lowered.message}, so whether it is valid newer Python is unknown"
    return parse_error(source, message, error.lineno or 1, error.offset or 1)


def _python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


# -- fast traversal ------------------------------------------------------------------------
# `ast.walk` and `ast.iter_child_nodes` go through generic `iter_fields` for every node; the
# analysis visits millions of nodes, so each node class gets a generated function that
# appends its children directly (about 1.5x faster). Order is `ast.iter_child_nodes`'s.

_SCALAR_FIELDS = frozenset({"id", "attr", "arg", "asname", "level", "module", "kind", "type_comment", "conversion", "is_async", "simple", "tag"})
Appender = Callable[[ast.AST, list[ast.AST]], None]
_APPENDERS: dict[type, Appender] = {}
_BRANCH_APPENDERS: dict[type, Appender] = {}  # the same, leaving out `_LEAVES`
# Nodes without children that a search for statements, calls or attributes never wants:
# names, constants, contexts, operators. About half of a method's nodes.
_LEAVES = frozenset(
    {ast.Name, ast.Constant, ast.Pass, ast.alias}
    | {cls for base in (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop) for cls in base.__subclasses__()}
)


def _appender(cls: type, skip_leaves: bool = False) -> Appender:
    fields = [name for name in cls._fields if name not in _SCALAR_FIELDS]  # type: ignore[attr-defined]  # an ast node class has `_fields`
    if cls in (ast.Constant, ast.Global, ast.Nonlocal):
        fields = []
    keep = " and item.__class__ not in LEAVES" if skip_leaves else ""
    lines = ["def append_children(node, out):", "    pass"]
    for name in fields:
        lines += [
            f"    value = getattr(node, {name!r}, None)",
            "    if value.__class__ is list:",
            f"        out.extend([item for item in value if isinstance(item, AST){keep}])",
            f"    elif value is not None and isinstance(value, AST){keep.replace('item', 'value')}:",
            "        out.append(value)",
        ]
    namespace = {"AST": ast.AST, "LEAVES": _LEAVES}
    exec("\n".join(lines), namespace)  # noqa: S102 - generated from the node class's field names
    appender: Appender = namespace["append_children"]  # type: ignore[assignment]  # made by exec above
    return appender


def append_children(node: ast.AST, out: list[ast.AST]) -> None:
    """Append the direct children to `out`, in field order."""
    append = _APPENDERS.get(node.__class__) or _APPENDERS.setdefault(node.__class__, _appender(node.__class__))
    append(node, out)


def child_nodes(node: ast.AST) -> list[ast.AST]:
    """The direct children, in field order (as `ast.iter_child_nodes`)."""
    append = _APPENDERS.get(node.__class__) or _APPENDERS.setdefault(node.__class__, _appender(node.__class__))
    children: list[ast.AST] = []
    append(node, children)
    return children


def walk(root: ast.AST) -> list[ast.AST]:
    """Every node under `root` (included), breadth first, as `ast.walk` yields them."""
    nodes = [root]
    appenders = _APPENDERS
    index = 0
    while index < len(nodes):
        node = nodes[index]
        append = appenders.get(node.__class__) or appenders.setdefault(node.__class__, _appender(node.__class__))
        append(node, nodes)
        index += 1
    return nodes


def walk_branches(root: ast.AST) -> list[ast.AST]:
    """`walk(root)` without the nodes in `_LEAVES` (names, constants, contexts, operators):
    the same nodes otherwise, in the same order, for searches that never look at those
    (finding a class's attribute assignments and registrations walks every method)."""
    nodes = [root]
    appenders = _BRANCH_APPENDERS
    index = 0
    while index < len(nodes):
        node = nodes[index]
        append = appenders.get(node.__class__) or appenders.setdefault(node.__class__, _appender(node.__class__, skip_leaves=True))
        append(node, nodes)
        index += 1
    return nodes


def keyword_value(call: ast.Call, name: str) -> ast.expr | None:
    """The value passed as `name=` to `call`, or None."""
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    return None


_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def own_nodes(function: ast.AST) -> list[ast.AST]:
    """Every node of a def's own statements, each once: not those of functions or classes
    nested in it (walking each of `own_statements` would visit a nested block's nodes again
    for every statement that encloses it)."""
    nodes: list[ast.AST] = [s for s in getattr(function, "body", []) if not isinstance(s, _NESTED)]
    index = 0
    while index < len(nodes):
        nodes.extend(child for child in child_nodes(nodes[index]) if not isinstance(child, _NESTED))
        index += 1
    return nodes


def own_statements(function: ast.AST) -> Iterator[ast.stmt]:
    """A def's statements at any depth, not those of functions or classes nested in it."""
    stack = list(getattr(function, "body", []))
    while stack:
        statement = stack.pop()
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield statement
        for field in ("body", "orelse", "finalbody"):
            stack.extend(getattr(statement, field, []))
        for handler in getattr(statement, "handlers", []):
            stack.extend(handler.body)
