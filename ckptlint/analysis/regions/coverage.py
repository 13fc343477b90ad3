"""Which calls a region makes the analysis followed, and why not the others.

A finding can only come from code the analysis reads: a call it cannot resolve (a callee of
unknown value, a dynamic attribute, an `autograd.Function.apply`) is where it stopped, and
nothing says so unless it is listed. When asked (`ckptlint calls --unresolved`), each
function's summary carries a `CallEdge` per call it and its callees make: resolved (to a
project definition, a library table entry, a torch op, a builtin or a known method name) or
not, with the reason. A call resolved in any calling context counts as resolved.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterable

from ckptlint.analysis.knowledge.method_names import (
    BUILTIN_TYPE_METHODS,
    MODULE_METHODS,
    TENSOR_METHODS,
)
from ckptlint.symbols import ModuleSymbols

RESOLVED = ""
# why a call was not followed (the words `ckptlint calls --unresolved` prints)
FUNCTION_APPLY = "apply of an autograd.Function"
DYNAMIC_ATTRIBUTE = "dynamic attribute"
ATTRIBUTE_UNKNOWN = "attribute value unknown"
VALUE_UNKNOWN = "callee value unknown"
RECEIVER_UNKNOWN = "method of a value of unknown type"
NOT_READ = "library not read"
UNBOUND = "arguments do not bind"
STAR_ARGUMENTS = "star-args"
REGION_UNKNOWN = "region value unknown"  # the checkpoint call's region itself
INSTANCES_MERGED = "instances merged"  # its `self` is built several ways, analysed as one


@dataclass(frozen=True, eq=False)
class CallEdge:
    """One call in a region: where it is and, when the analysis did not follow it, why."""

    module: ModuleSymbols
    node: ast.expr | ast.stmt  # a call; the checkpoint call's statement when its region is unknown
    reason: str = RESOLVED

    @property
    def resolved(self) -> bool:
        return self.reason == RESOLVED

    @property
    def callee(self) -> str:
        node = self.node
        if isinstance(node, ast.Call):
            node = node.args[0] if self.reason in (REGION_UNKNOWN, INSTANCES_MERGED) and node.args else node.func
        text = ast.unparse(node)
        return text if len(text) <= 60 else text[:57] + "..."


class CallLog:
    """The calls one function's interpretation made and those of its callees, by node."""

    def __init__(self) -> None:
        self.edges: dict[int, CallEdge] = {}
        self._pending: dict[int, str] = {}  # this function's calls being dispatched: why not followed yet

    def resolved(self, node: ast.Call) -> None:
        self._pending[id(node)] = RESOLVED

    def unresolved(self, node: ast.Call, reason: str) -> None:
        """Not followed this way; another type of the same callee may still resolve it."""
        self._pending.setdefault(id(node), reason)

    def close(self, module: ModuleSymbols, node: ast.Call, fallback: str) -> None:
        """The call's dispatch is over: log it (`fallback` when nothing marked it)."""
        reason = self._pending.pop(id(node), fallback)
        self.add(CallEdge(module, node, reason))

    def add(self, edge: CallEdge) -> None:
        known = self.edges.get(id(edge.node))
        if known is None or (edge.resolved and not known.resolved):
            self.edges[id(edge.node)] = edge

    def extend(self, edges: Iterable[CallEdge]) -> None:
        for edge in edges:
            self.add(edge)


def callee_reason(node: ast.Call, qualified_name: str | None, described: bool) -> str:
    """Why a call whose callee has no known value was not followed; RESOLVED when `described`:
    its library is never read (the standard library, torch, NumPy), the library tables answer for it."""
    func = node.func
    if isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "getattr":
        return DYNAMIC_ATTRIBUTE
    if described:
        return RESOLVED
    if any(isinstance(a, ast.Starred) for a in node.args):
        return STAR_ARGUMENTS
    if isinstance(func, ast.Attribute) and func.attr == "apply":
        return FUNCTION_APPLY
    if qualified_name is not None and "." in qualified_name:
        return NOT_READ
    if isinstance(func, ast.Attribute):
        return ATTRIBUTE_UNKNOWN
    return VALUE_UNKNOWN


def method_reason(method: str, typed: bool) -> str:
    """Why a method call that nothing answered was not followed; RESOLVED for a method name whose
    meaning is known: an `nn.Module` method on a project module (`self.parameters()`), or on a
    value of unknown type a tensor's (`x.view()`), a module's or a built-in type's (`s.split()`)."""
    if method == "apply":
        return FUNCTION_APPLY
    if typed:  # a project class that neither defines nor assigns it a known value (`self.act_fn = ACT2FN[name]`)
        return RESOLVED if method in MODULE_METHODS else ATTRIBUTE_UNKNOWN
    if method in TENSOR_METHODS or method in MODULE_METHODS or method in BUILTIN_TYPE_METHODS:
        return RESOLVED
    return RECEIVER_UNKNOWN


def shown_path(edge: CallEdge) -> str:
    source = edge.module.source
    return source.display_path if source is not None else edge.module.name


def unresolved(edges: Iterable[CallEdge]) -> list[CallEdge]:
    return sorted((e for e in edges if not e.resolved), key=lambda e: (shown_path(e), e.node.lineno, e.node.col_offset))
