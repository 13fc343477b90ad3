"""The arguments a module's own calls pass to a parameter of one of its functions.

`def apply_module(m, x)` called as `apply_module(self.mlp, x)`; `Block.__init__(self, ...,
activation_checkpoint_func=None)` called as `Block(..., activation_checkpoint_func=checkpoint)`.
Syntactic and limited to the defining module, so what a file means depends on that file.
Call recognition (calls.py) and region resolution (analysis/semantics/call_sites.py) both ask.
"""

from __future__ import annotations

import ast
from typing import Iterator

from ckptlint.symbols import (
    CLASS,
    CLASSDEF,
    DEF,
    ModuleSymbols,
    Scope,
    positional_parameters,
)


def passed_arguments(module: ModuleSymbols, scope: Scope, name: str) -> list[tuple[ast.expr, Scope]]:
    """(argument, scope of the call) for each call in `module` of the function `scope` that
    passes parameter `name`; a class's `__init__` is called by calling the class."""
    position = parameter_position(scope, name)
    found: list[tuple[ast.expr, Scope]] = []
    for call, call_scope in calls_of(module, scope):
        argument = passed_argument(call, name, position)
        if argument is not None:
            found.append((argument, call_scope))
    return found


def keyword_arguments(module: ModuleSymbols, scope: Scope, keyword: str) -> list[tuple[ast.expr, Scope]] | None:
    """What the module's calls of the function `scope` pass by `keyword` into its `**kwargs`
    (`_radio_vit_cfg(embed_dim=1024, ...)` for `def _radio_vit_cfg(**kwargs)`); None when a
    call passes `**something`, which may hold it."""
    found: list[tuple[ast.expr, Scope]] = []
    for call, call_scope in calls_of(module, scope):
        given = next((k.value for k in call.keywords if k.arg == keyword), None)
        if given is not None:
            found.append((given, call_scope))
        elif any(k.arg is None for k in call.keywords):
            return None
    return found


def calls_of(module: ModuleSymbols, scope: Scope) -> Iterator[tuple[ast.Call, Scope]]:
    """The calls in `module` of the function `scope`, each with the scope it is made in."""
    node = scope.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return
    owner = scope.parent if scope.parent is not None and scope.parent.kind == CLASS else None
    for call, call_scope in module.calls:
        if _calls(call, call_scope, module, node, owner):
            yield call, call_scope


def parameter_position(scope: Scope, name: str) -> int | None:
    """Where a call passes parameter `name` of the function `scope` positionally (a method's
    receiver left out); None when it is not a positional parameter."""
    node = scope.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    params = [a.arg for a in positional_parameters(node.args)]
    owner = scope.parent if scope.parent is not None and scope.parent.kind == CLASS else None
    if owner is not None and not _is_static(node):
        params = params[1:]
    return params.index(name) if name in params else None


def passed_argument(call: ast.Call, name: str, position: int | None) -> ast.expr | None:
    """What `call` passes for parameter `name` (at `position`); None when not known (a starred
    argument or `**kwargs` may carry it, or the default is used)."""
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    if position is not None and position < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: position + 1]):
        return call.args[position]
    return None


def _calls(call: ast.Call, scope: Scope, module: ModuleSymbols, function: ast.FunctionDef | ast.AsyncFunctionDef, owner: Scope | None) -> bool:
    """Whether `call` calls `function`: by name, `obj.<name>(...)` for a method, the class for `__init__`."""
    func = call.func
    if owner is not None and function.name == "__init__":
        class_node = owner.node
        called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if called != getattr(class_node, "name", None):
            return False
        if isinstance(func, ast.Name):
            binding = module.binding(scope, func.id, func.lineno)
            return binding is not None and binding.kind == CLASSDEF and binding.node is class_node
        return True
    if owner is not None:
        return isinstance(func, ast.Attribute) and func.attr == function.name
    if not isinstance(func, ast.Name) or func.id != function.name:
        return False
    binding = module.binding(scope, func.id, func.lineno)
    return binding is not None and binding.kind == DEF and binding.node is function


def _is_static(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
