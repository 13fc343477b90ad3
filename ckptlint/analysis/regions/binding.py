"""How a call's values meet a function's parameters.

Two directions: `call_context` binds a call's argument values to the callee's parameters
(after partial and closure bindings), giving the `Context` its summary is computed in;
`parameter_values` turns a `Context` back into the values the function's parameters hold,
with a region entry's parameters as inputs of the checkpoint call.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Callable

from ckptlint.analysis.knowledge import torch_api
from ckptlint.analysis.regions.summary import Context
from ckptlint.analysis.semantics.known_truth import constant_value, false_value
from ckptlint.analysis.semantics.values import (
    CONST_VALUE,
    INPUT,
    LOCAL,
    OUTER,
    ClassType,
    ContainerType,
    FunctionType,
    Types,
    Value,
    merge,
)
from ckptlint.symbols import ModuleSymbols, Scope, positional_parameters

if TYPE_CHECKING:
    from ckptlint.analysis.semantics.evaluator import TypeInference

TENSOR = ClassType("torch.Tensor")
SCALAR_ANNOTATIONS = frozenset({"int", "float", "bool", "str", "complex"})
CONTAINER_ANNOTATIONS = {
    **dict.fromkeys(("dict", "Dict", "Mapping", "MutableMapping", "OrderedDict", "defaultdict"), torch_api.MAPPING),
    **dict.fromkeys(("list", "List", "Sequence", "MutableSequence", "set", "Set", "tuple", "Tuple", "deque"), torch_api.SEQUENCE),
}
SCALAR_TYPES = frozenset(ClassType(f"builtins.{name}") for name in SCALAR_ANNOTATIONS)


def parameter_values(node: ast.AST, context: Context, annotation_types: Callable[[ast.expr | None], Types]) -> dict[str, Value]:
    """The values a function's parameters hold when called in `context`: what the call passes,
    inputs of the checkpoint call for a region entry, defaults otherwise."""
    env: dict[str, Value] = {}
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return env
    args = node.args
    positional = positional_parameters(args)
    given = dict(context.arguments)
    defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults) :]], args.defaults))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    parameters = [*positional, *args.kwonlyargs]
    if positional and context.receiver is not None:
        env[positional[0].arg] = context.receiver.renamed(positional[0].arg)
        parameters = parameters[1:]
    free_positional = [p.arg for p in positional if p.arg not in given and p in parameters]
    for parameter in parameters:
        name = parameter.arg
        annotation = annotation_types(parameter.annotation)
        if name in given:
            value = given[name]
        elif context.entry and _false_by_checkpoint(context, name, free_positional):
            value = false_value(name, none=None)
        elif context.entry and (name not in defaults or _passed_by_checkpoint(context, name, free_positional)):
            value = Value(frozenset({INPUT}), annotation, path=name)
        elif name in defaults:
            value = _default_value(defaults[name])
        else:
            value = Value(frozenset({INPUT}), path=name)
        if annotation and not value.types:
            value = value.with_types(annotation)
        env[name] = value.renamed(name)
    for star in (args.vararg, args.kwarg):
        if star is not None:
            passed = given.get(star.arg)
            env[star.arg] = passed or Value(frozenset({INPUT if context.entry else LOCAL}), path=star.arg)
    return env


def _passed_by_checkpoint(context: Context, name: str, free_positional: list[str]) -> bool:
    """Does the checkpoint call pass this parameter? (Unpassed ones take their defaults.)"""
    if context.entry_positional is None:
        return True
    if name in context.entry_keywords:
        return True
    return name in free_positional[: context.entry_positional]


def _false_by_checkpoint(context: Context, name: str, free_positional: list[str]) -> bool:
    """Does the checkpoint call pass this parameter a value that is false in a training step?"""
    if name in context.entry_false_keywords:
        return True
    return name in free_positional and free_positional.index(name) in context.entry_false_positions


def annotation_types(inference: TypeInference, module: ModuleSymbols, scope: Scope, annotation: ast.expr | None) -> Types:
    """Types a parameter annotation promises (`Tensor`, `list[int]`, a project class)."""
    if annotation is None:
        return frozenset()
    text = ast.unparse(annotation)
    head = (annotation.value if isinstance(annotation, ast.Subscript) else annotation)
    head_name = ast.unparse(head).rpartition(".")[2]
    if head_name in ("Tensor", "FloatTensor", "LongTensor", "BoolTensor"):
        return frozenset({TENSOR})
    if head_name in CONTAINER_ANNOTATIONS:
        return frozenset({ContainerType(CONTAINER_ANNOTATIONS[head_name])})
    if text in SCALAR_ANNOTATIONS:
        return frozenset({ClassType(f"builtins.{text}")})
    return inference.annotation_types(annotation, module, scope)


def _default_value(default: ast.expr) -> Value:
    if isinstance(default, (ast.List, ast.Dict, ast.Set)):
        return Value(frozenset({OUTER}), path="a mutable default argument")
    if isinstance(default, ast.Constant):
        return constant_value(default.value) or CONST_VALUE
    return CONST_VALUE


def call_context(
    function: FunctionType, scope: Scope, node: ast.Call, arguments: list[Value], keywords: dict[str, Value]
) -> Context | None:
    """Bind a call's argument values to the callee's parameters (after partial/closure bindings).

    None when Python would reject the call (too many positional arguments, an unknown
    keyword): with a union of possible callees, that one is not the target.
    """
    definition = scope.node
    bound = dict(function.bound)
    params: list[str] = []
    vararg = kwarg = None
    if isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        params = [a.arg for a in positional_parameters(definition.args)]
        vararg = definition.args.vararg.arg if definition.args.vararg else None
        kwarg = definition.args.kwarg.arg if definition.args.kwarg else None
        keyword_only = [a.arg for a in definition.args.kwonlyargs]
    else:
        keyword_only = []
    if function.receiver is not None and params:
        params = params[1:]
    free = [name for name in params if name not in bound]
    values: dict[str, Value] = {name: value for name, value in bound.items() if name in params or name in keyword_only}
    closure = tuple((name, value) for name, value in bound.items() if name not in values)
    first_star = next((i for i, a in enumerate(node.args) if isinstance(a, ast.Starred)), None)
    positional = arguments if first_star is None else arguments[:first_star]
    star_values = [] if first_star is None else list(arguments[first_star:])
    for name, value in zip(free, positional):
        values[name] = value
    star_values.extend(positional[len(free) :])
    if len(positional) > len(free) and vararg is None:
        return None
    unknown_keywords = [k for k in keywords if k not in params and k not in keyword_only and k not in bound]
    if unknown_keywords and kwarg is None:
        return None
    if first_star is not None:  # `*args` may fill the remaining parameters
        for name in free[len(positional) :]:
            values.setdefault(name, merge(star_values))
    for name, value in keywords.items():
        if name in params or name in keyword_only:
            values[name] = value
    if vararg is not None and star_values:
        values[vararg] = merge(star_values)
    if kwarg is not None:
        extra = [v for k, v in keywords.items() if k not in params and k not in keyword_only]
        if extra:
            values[kwarg] = merge(extra)
    arguments_ = tuple(sorted((name, _normalised(value, name)) for name, value in values.items()))
    receiver = _normalised(function.receiver, "self") if function.receiver is not None else None
    closure_values = tuple(sorted((n, _normalised(v, n)) for n, v in closure))
    return Context(receiver, arguments_, closure_values, closure_in_region=function.defined_in_region)


def _normalised(value: Value, name: str) -> Value:
    """The value as the callee sees it: named by its parameter (so summaries are shared).

    An object (a module, a container) passes no volatility: whether `self.dispatcher` is
    reassigned says nothing about the branches inside the dispatcher's methods.
    """
    is_object = any(isinstance(t, (ClassType, ContainerType)) for t in value.types)
    return Value(value.origins, value.types, frozenset() if is_object else value.volatile, name, value.attribute)
