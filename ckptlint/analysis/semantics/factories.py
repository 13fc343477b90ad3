"""Model factories: where a class handed to a builder gets its constructor keywords.

Model zoos build their networks through a factory that is given the class and forwards the
keywords its registered configurations chose: timm's `build_model_with_cfg(ResNet, variant,
pretrained, **kwargs)`, called from `_create_res2net(variant, pretrained, **dict(model_args,
**kwargs))` with `model_args = dict(block=Bottle2neck, ...)`. Each such call is a construction
of the class, in whichever file registers the configuration. This module finds, syntactically,
the expressions a constructor keyword can come from along that chain; the evaluator types them.
"""

from __future__ import annotations

import ast
from typing import Iterable, Iterator

from ckptlint.passed_arguments import calls_of
from ckptlint.symbols import ASSIGN, PARAM, ModuleSymbols, Scope, positional_parameters

MAX_HOPS = 6  # `**kwargs` handed on through this many functions or dicts is followed
Source = tuple[ast.expr, Scope]  # an expression a keyword's value comes from, and where it is evaluated


def forwarded_class_parameter(function: ast.AST) -> int | None:
    """The position of the parameter a factory calls with its own `**kwargs` (`model_cls(**kwargs)`
    in `def build(model_cls, variant, **kwargs)`); None when it has none."""
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or function.args.kwarg is None:
        return None
    rest = function.args.kwarg.arg
    names = [a.arg for a in positional_parameters(function.args)]
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in names
            and any(k.arg is None and isinstance(k.value, ast.Name) and k.value.id == rest for k in node.keywords)
        ):
            return names.index(node.func.id)
    return None


def named_parameters(function: ast.AST) -> frozenset[str]:
    """The parameters a keyword binds before it can reach the function's `**kwargs`."""
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return frozenset()
    return frozenset(a.arg for a in (*positional_parameters(function.args), *function.args.kwonlyargs))


def keyword_sources(call: ast.Call, key: str, module: ModuleSymbols, scope: Scope, skip: frozenset[str]) -> list[Source]:
    """What the factory call `call` may hand the class as keyword `key`: its own `key=...`, and
    whatever its `**mapping` arguments hold under `key`. `skip`: the factory's named parameters,
    which take such a keyword before it reaches the class."""
    if key in skip:
        return []
    found: list[Source] = []
    for keyword in call.keywords:
        if keyword.arg == key:
            found.append((keyword.value, scope))
        elif keyword.arg is None:
            found.extend(_mapping_sources(keyword.value, key, module, scope, MAX_HOPS))
    return found


def rest_keyword_sources(expr: ast.expr, keys: Iterable[str], module: ModuleSymbols, scope: Scope) -> dict[str, tuple[list[Source], bool]] | None:
    """For each of `keys`: what the callers of the function whose `**kwargs` `expr` names pass it under
    that key (`dict(dilation=d, **kwargs)` in `make_blocks`, called as `make_blocks(..., norm_layer=norm_layer)`),
    and whether every caller passes it by name; keys no caller can pass are left out. None when `expr`
    is not such a parameter."""
    if not isinstance(expr, ast.Name):
        return None
    function = next((b.scope for b in module.lookup(scope, expr.id) if b.kind == PARAM and _is_rest_keywords(b.scope, expr.id)), None)
    if function is None:
        return None
    calls = list(calls_of(module, function))
    found: dict[str, tuple[list[Source], bool]] = {}
    for key in keys:
        sources = list(_mapping_sources(expr, key, module, scope, MAX_HOPS, calls))
        if sources:
            found[key] = sources, all(any(k.arg == key for k in call.keywords) for call, _ in calls)
    return found


def _mapping_sources(
    expr: ast.expr, key: str, module: ModuleSymbols, scope: Scope, hops: int, calls: list[tuple[ast.Call, Scope]] | None = None
) -> Iterator[Source]:
    """The expressions the mapping `expr` may hold under `key`: `dict(a, **b, key=v)`, `{'key': v, **b}`,
    a local bound to one of those, or a function's `**kwargs` (what its callers in the module pass;
    `calls`: those callers, when already listed)."""
    if hops <= 0:
        return
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "dict":
        for argument in expr.args:
            yield from _mapping_sources(argument, key, module, scope, hops - 1)
        for keyword in expr.keywords:
            if keyword.arg == key:
                yield keyword.value, scope
            elif keyword.arg is None:
                yield from _mapping_sources(keyword.value, key, module, scope, hops - 1)
    elif isinstance(expr, ast.Dict):
        for name, value in zip(expr.keys, expr.values):
            if name is None:
                yield from _mapping_sources(value, key, module, scope, hops - 1)
            elif isinstance(name, ast.Constant) and name.value == key:
                yield value, scope
    elif isinstance(expr, ast.Name):
        for binding in module.lookup(scope, expr.id):
            if binding.kind == ASSIGN and binding.value is not None:
                yield from _mapping_sources(binding.value, key, module, binding.written_from or binding.scope, hops - 1)
            elif binding.kind == PARAM and _is_rest_keywords(binding.scope, expr.id):
                if key in named_parameters(binding.scope.node):
                    continue  # a named parameter of that function takes it first
                for call, caller in calls if calls is not None else calls_of(module, binding.scope):
                    for keyword in call.keywords:
                        if keyword.arg == key:
                            yield keyword.value, caller
                        elif keyword.arg is None:
                            yield from _mapping_sources(keyword.value, key, module, caller, hops - 1)


def _is_rest_keywords(scope: Scope, name: str) -> bool:
    node = scope.node
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.args.kwarg is not None and node.args.kwarg.arg == name
