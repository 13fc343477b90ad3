"""Calls of project functions folded from the constants they are given (a mixin of
`evaluator.TypeInference`): `decode_arch_def(arch_def)` with `arch_def` a list of timm's block
strings is the list of block-argument dicts it returns, so a builder handed it builds the blocks
those strings name and no others (folding.py computes; this finds the constants and types the
result).

An argument is constant when it is a literal or display, a local name every assignment of which
is one, a module-level constant, or a parameter: the value the call being evaluated passes, else
the default and what the module's own calls pass. Floats are taken at one value (a depth or width
multiplier scales what is built, it chooses nothing). A call is folded only when it is handed a
list or dict (data to decode), for at most MAX_CANDIDATES combinations of values.
"""

from __future__ import annotations

import ast
from typing import Iterable

from ckptlint.analysis.knowledge import torch_api
from ckptlint.analysis.semantics import registries
from ckptlint.analysis.semantics.folding import (
    MAX_CANDIDATES,
    OPAQUE,
    Folder,
    FunctionRef,
    Unfoldable,
    candidates_product,
)
from ckptlint.analysis.semantics.protocol import EMPTY, TypeEvaluator
from ckptlint.analysis.semantics.values import (
    FALSE_TYPE,
    NONE_TYPE,
    TRUE_TYPE,
    ContainerType,
    LiteralType,
    TupleType,
    Type,
    Types,
)
from ckptlint.passed_arguments import passed_arguments
from ckptlint.symbols import ASSIGN, DEF, PARAM, ModuleSymbols, Scope, parameter_default

MAX_NAME_DEPTH = 4  # names followed to the constant they hold


class ConstantCalls(TypeEvaluator):
    _folds: dict[tuple[int, str], Types | None]
    _env: dict[int, dict[str, Types]]

    def folded_call(self, callee_module: ModuleSymbols, callee_scope: Scope, call: ast.Call, module: ModuleSymbols, scope: Scope) -> Types | None:
        """What a call of a plain project function returns, computed from constant arguments;
        None when it is not handed data to decode or does not fold."""
        node = callee_scope.node
        if not isinstance(node, ast.FunctionDef) or not _hands_data(call):
            return None
        choices: list[list[object]] = []
        names: list[str | None] = []
        for argument in call.args:
            if isinstance(argument, ast.Starred):
                return None
            choices.append(self._constants(argument, module, scope, 0) or [])
            names.append(None)
        for keyword in call.keywords:
            if keyword.arg is None:
                return None
            choices.append(self._constants(keyword.value, module, scope, 0) or [])
            names.append(keyword.arg)
        product = candidates_product(choices)
        if product is None:
            return None
        combinations = list(product)
        if not any(isinstance(value, (list, tuple, dict)) for combination in combinations for value in combination):
            return None
        key = (id(node), repr(combinations))
        if key in self._folds:
            return self._folds[key]
        self._folds[key] = None  # a fold that reaches the same call again does not fold
        found: set[Type] = set()
        function = FunctionRef(node, callee_module, callee_scope)
        try:
            for combination in combinations:
                args = [v for v, n in zip(combination, names) if n is None]
                kwargs = {n: v for v, n in zip(combination, names) if n is not None}
                found.update(constant_types(Folder(self._folded_function).call(function, args, kwargs)))
        except Unfoldable:
            return None
        result = frozenset(found) or None
        self._folds[key] = result
        return result

    def _folded_function(self, module: ModuleSymbols, scope: Scope, node: ast.Name | ast.Attribute) -> FunctionRef | None:
        """The project function a name in folded code refers to (`_decode_block_str`), if any."""
        qualified = module.qualified_name(node, scope)
        found = self.project.global_binding(qualified) if qualified else None
        if found is None or found[1].kind != DEF:
            return None
        defining, binding = found
        definition = binding.node
        inner = defining.scope_of.get(id(definition))
        return FunctionRef(definition, defining, inner) if inner is not None and isinstance(definition, ast.FunctionDef) else None

    # -- the constants an argument may be -----------------------------------

    def _constants(self, expr: ast.expr, module: ModuleSymbols, scope: Scope, depth: int) -> list[object] | None:
        if depth > MAX_NAME_DEPTH:
            return None
        if isinstance(expr, ast.Constant):
            return [expr.value]
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub) and isinstance(expr.operand, ast.Constant):
            value = expr.operand.value
            return [-value] if isinstance(value, (int, float)) else None
        if isinstance(expr, (ast.List, ast.Tuple)):
            elements = [self._constants(e, module, scope, depth) for e in expr.elts]
            if any(e is None or isinstance(x, ast.Starred) for e, x in zip(elements, expr.elts)):
                return None
            combined = candidates_product(elements)  # type: ignore[arg-type]  # None excluded above
            if combined is None:
                return None
            return [list(c) if isinstance(expr, ast.List) else tuple(c) for c in combined]
        if isinstance(expr, ast.Dict):
            if not all(isinstance(k, ast.Constant) for k in expr.keys):
                return None
            values = [self._constants(v, module, scope, depth) for v in expr.values]
            if any(v is None for v in values):
                return None
            combined = candidates_product(values)  # type: ignore[arg-type]  # None excluded above
            if combined is None:
                return None
            return [{k.value: v for k, v in zip(expr.keys, c)} for c in combined]  # type: ignore[union-attr]  # constants, checked
        if isinstance(expr, ast.Name):
            return self._name_constants(expr, module, scope, depth)
        return None

    def _name_constants(self, expr: ast.Name, module: ModuleSymbols, scope: Scope, depth: int) -> list[object] | None:
        binding = module.binding(scope, expr.id, expr.lineno)
        if binding is None:
            return None
        if binding.kind == PARAM:
            return self._parameter_constants(expr.id, binding.scope, module, depth)
        if binding.kind != ASSIGN:
            return None
        bindings = [b for b in binding.scope.bindings.get(expr.id, ()) if b.kind != "annotation"]
        found: list[object] = []
        for candidate in bindings:
            if candidate.kind != ASSIGN or not isinstance(candidate.node, ast.Assign) or candidate.value is None:
                return None  # a loop target, an augmented or unpacking assignment: not one constant
            values = self._constants(candidate.value, module, binding.scope, depth + 1)
            if values is None:
                return None
            found.extend(v for v in values if v not in found)
        return found if 0 < len(found) <= MAX_CANDIDATES else None

    def _parameter_constants(self, name: str, function: Scope, module: ModuleSymbols, depth: int) -> list[object] | None:
        """A parameter's values: what the evaluation under way passes, else its default and what
        the module's own calls of the function pass."""
        passed = self._env.get(id(function), {}).get(name) if self._env else None
        if passed is not None:
            return _type_constants(passed)
        binding = next((b for b in function.bindings.get(name, ()) if b.kind == PARAM), None)
        default = parameter_default(binding) if binding is not None else None
        sources = [(default, function.parent or function)] if default is not None else []
        sources += passed_arguments(module, function, name)
        found: list[object] = []
        for argument, where in sources:
            values = self._constants(argument, module, where, depth + 1)
            if values is None:
                return None
            found.extend(v for v in values if v not in found)
        numbers = [v for v in found if isinstance(v, float)]
        if len(numbers) > 1:  # a multiplier: one value stands for all
            found = [v for v in found if not isinstance(v, float) or v is numbers[0]]
        return found if 0 < len(found) <= MAX_CANDIDATES else None


def _hands_data(call: ast.Call) -> bool:
    """Whether any argument may be a list or dict: a display, or a name (followed later)."""
    arguments: Iterable[ast.expr] = [*call.args, *(k.value for k in call.keywords)]
    return any(isinstance(a, (ast.List, ast.Tuple, ast.Dict, ast.Name)) for a in arguments)


def _type_constants(types: Types) -> list[object] | None:
    """The constants the types of an argument stand for (string and number literals, flags, None)."""
    found: list[object] = []
    for item in types:
        if item == NONE_TYPE:
            found.append(None)
        elif item in (TRUE_TYPE, FALSE_TYPE):
            found.append(item == TRUE_TYPE)
        elif isinstance(item, LiteralType) and not item.number:
            found.append(item.value)
        elif isinstance(item, LiteralType):
            try:
                found.append(int(item.value) if item.value.lstrip("-").isdigit() else float(item.value))
            except ValueError:
                return None
        else:
            return None
    return found or None


def constant_types(value: object) -> Types:
    """The abstract types of a folded value: literals, flags, None, lists and string-keyed dicts."""
    if value is OPAQUE:
        return EMPTY
    if value is None:
        return frozenset({NONE_TYPE})
    if isinstance(value, bool):
        return frozenset({TRUE_TYPE if value else FALSE_TYPE})
    if isinstance(value, (int, float)):
        return frozenset({LiteralType(repr(value), number=True)})
    if isinstance(value, str):
        return registries.literal(value)
    if isinstance(value, (list, set)):
        return frozenset({ContainerType(torch_api.SEQUENCE, frozenset().union(*(constant_types(v) for v in value)))})
    if isinstance(value, tuple):
        positions = tuple(constant_types(v) for v in value)
        return frozenset({TupleType(positions), ContainerType(torch_api.SEQUENCE, frozenset().union(*positions))})
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        each = [(k, constant_types(v)) for k, v in value.items()]
        values = frozenset().union(*(types for _, types in each))
        return frozenset({registries.keyed(each), ContainerType(torch_api.MAPPING, values)})
    return EMPTY

