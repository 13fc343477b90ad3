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
import copy
from typing import Iterable

from ckptlint.analysis.flow.dict_writes import changed_in_place
from ckptlint.analysis.knowledge import torch_api
from ckptlint.analysis.semantics import registries
from ckptlint.analysis.semantics.folding import (
    MAX_CANDIDATES,
    OPAQUE,
    Folder,
    FunctionRef,
    Unfoldable,
    binary,
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
    _folds: dict[tuple[int, str], list[object] | None]
    _changed: dict[tuple[int, str], bool]  # (function scope id, name): changed in place there
    _passing: dict[tuple[int, str], list[tuple[ast.expr, Scope]]]  # (function scope id, parameter): what its module's calls pass
    _env: dict[int, dict[str, Types]]

    def folded_call(self, callee_module: ModuleSymbols, callee_scope: Scope, call: ast.Call, module: ModuleSymbols, scope: Scope) -> Types | None:
        """What a call of a plain project function returns, computed from constant arguments;
        None when it is not handed data to decode or does not fold."""
        node = callee_scope.node
        if not isinstance(node, ast.FunctionDef) or not _hands_data(call):
            return None
        values = self._folded_values(FunctionRef(node, callee_module, callee_scope), call, module, scope, 0, needs_data=True)
        if values is None:
            return None
        return frozenset().union(*(constant_types(v) for v in values)) or None

    def _folded_values(
        self, function: FunctionRef, call: ast.Call, module: ModuleSymbols, scope: Scope, depth: int, needs_data: bool = False
    ) -> list[object] | None:
        """What `call` of `function` returns for each combination of its arguments' constant values
        (`needs_data`: only when one of them is a list, tuple or dict); None when it does not fold."""
        choices: list[list[object]] = []
        names: list[str | None] = []
        arguments = [(None, a) for a in call.args] + [(k.arg, k.value) for k in call.keywords]
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return None
        for name, argument in arguments:
            values = self._constants(argument, module, scope, depth)
            if not values:
                return None  # one argument not known: no combination folds
            choices.append(values)
            names.append(name)
        product = candidates_product(choices)
        if product is None:
            return None
        combinations = list(product)
        if needs_data and not any(isinstance(value, (list, tuple, dict)) for combination in combinations for value in combination):
            return None
        key = (id(function.node), repr(combinations))
        if key in self._folds:
            cached = self._folds[key]
            return None if cached is None else copy.deepcopy(cached)  # a fold may change what it is handed
        self._folds[key] = None  # a fold that reaches the same call again does not fold
        found: list[object] = []
        try:
            for combination in combinations:
                args = [v for v, n in zip(combination, names) if n is None]
                kwargs = {n: v for v, n in zip(combination, names) if n is not None}
                found.append(Folder(self._folded_function).call(function, args, kwargs))
        except Unfoldable:
            return None
        self._folds[key] = found
        return copy.deepcopy(found)

    def _folded_function(self, module: ModuleSymbols, scope: Scope, node: ast.Name | ast.Attribute) -> FunctionRef | None:
        """The project function a name in folded code refers to (`_decode_block_str`, or a function
        defined in the calling function), if any."""
        local = module.binding(scope, node.id) if isinstance(node, ast.Name) else None
        if local is not None and local.kind == DEF and local.scope.kind != "module":
            return _function_ref(module, local.node)
        qualified = module.qualified_name(node, scope)
        found = self.project.global_binding(qualified) if qualified else None
        return _function_ref(found[0], found[1].node) if found is not None and found[1].kind == DEF else None

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
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Mult)):  # `(1.2,) * 4 + (1.6,) * 2`
            return _combined(expr.op, self._constants(expr.left, module, scope, depth), self._constants(expr.right, module, scope, depth))
        if isinstance(expr, ast.Call) and isinstance(expr.func, (ast.Name, ast.Attribute)):  # `_arch_def(channels, group_size)`
            function = self._folded_function(module, scope, expr.func)
            return self._folded_values(function, expr, module, scope, depth + 1) if function is not None else None
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
        assigned: list[list[object]] = []
        for candidate in bindings:
            if candidate.kind != ASSIGN or not isinstance(candidate.node, ast.Assign) or candidate.value is None:
                return None  # a loop target, an augmented or unpacking assignment: not one constant
            values = self._constants(candidate.value, module, binding.scope, depth + 1)
            if values is None:
                return None
            assigned.append(values)
        stores: list[tuple[object, object]] = []
        if self._changed_in_place(binding.scope, expr.id):  # `arch_def[0] = [...]` under a branch
            found_stores = self._item_stores(binding.scope, expr.id, module, depth)
            if found_stores is None:
                return None
            stores = found_stores
        found: list[object] = []
        for values in assigned:
            for value in values:
                for changed in _with_stores(value, stores):
                    if changed not in found:
                        found.append(changed)
        return found if 0 < len(found) <= MAX_CANDIDATES else None

    def _changed_in_place(self, function: Scope, name: str) -> bool:
        """`changed_in_place`, memoised: it walks the whole function."""
        key = (id(function), name)
        found = self._changed.get(key)
        if found is None:
            found = self._changed[key] = changed_in_place(function, name)
        return found

    def _item_stores(self, function: Scope, name: str, module: ModuleSymbols, depth: int) -> list[tuple[object, object]] | None:
        """The `name[key] = constant` statements of the function, in order, when they are the only
        way it changes `name`'s object (else None): each may or may not have run."""
        if changed_in_place(function, name, items=False):
            return None  # `arch_def.append(...)`, `arch_def += [...]`: not folded
        stores: list[tuple[object, object]] = []
        for node in ast.walk(function.node):
            if isinstance(node, ast.Assign) and any(_item_of(t, name) for t in node.targets):
                target = node.targets[0]
                if len(node.targets) != 1 or not isinstance(target, ast.Subscript) or not isinstance(target.slice, (ast.Constant, ast.UnaryOp)):
                    return None
                keys = self._constants(target.slice, module, function, depth + 1)
                values = self._constants(node.value, module, function, depth + 1)
                if keys is None or values is None or len(keys) != 1 or len(values) != 1:
                    return None
                stores.append((keys[0], values[0]))
        counted = sum(1 for node in ast.walk(function.node) if _item_of(node, name))
        return stores if stores and counted == len(stores) and len(stores) <= 3 else None

    def _parameter_constants(self, name: str, function: Scope, module: ModuleSymbols, depth: int) -> list[object] | None:
        """A parameter's values: what the evaluation under way passes, else its default and what
        the module's own calls of the function pass."""
        passed = self._env.get(id(function), {}).get(name) if self._env else None
        if passed is not None:
            return _type_constants(passed)
        binding = next((b for b in function.bindings.get(name, ()) if b.kind == PARAM), None)
        default = parameter_default(binding) if binding is not None else None
        sources = [(default, function.parent or function)] if default is not None else []
        key = (id(function), name)
        passing = self._passing.get(key)
        if passing is None:  # the module's calls of the function, scanned once per parameter
            passing = self._passing[key] = passed_arguments(module, function, name)
        sources += passing
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


def _combined(op: ast.operator, left: list[object] | None, right: list[object] | None) -> list[object] | None:
    """`left + right` or `left * right` for each pair of values; None when one is unknown or an
    operation fails (folding.binary)."""
    if left is None or right is None or len(left) * len(right) > MAX_CANDIDATES:
        return None
    found: list[object] = []
    for a in left:
        for b in right:
            try:
                value = binary(op, a, b)
            except Unfoldable:
                return None
            if value not in found:
                found.append(value)
    return found


def _function_ref(module: ModuleSymbols, definition: ast.AST) -> FunctionRef | None:
    """The def `definition` of `module` as folded code calls it (an async def is not folded)."""
    inner = module.scope_of.get(id(definition))
    return FunctionRef(definition, module, inner) if inner is not None and isinstance(definition, ast.FunctionDef) else None


def _item_of(node: ast.AST, name: str) -> bool:
    """`name[...]` stored or deleted."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return isinstance(node.value, ast.Name) and node.value.id == name
    return False


def _with_stores(value: object, stores: list[tuple[object, object]]) -> list[object]:
    """`value` after each subset of `stores` ran, in order (a store under a branch may not have)."""
    if not stores:
        return [value]
    results: list[object] = []
    for mask in range(1 << len(stores)):
        changed = copy.deepcopy(value)
        try:
            for index, (key, item) in enumerate(stores):
                if mask & (1 << index):
                    changed[key] = copy.deepcopy(item)  # type: ignore[index]  # a list or dict; a bad key raises
        except (TypeError, IndexError, KeyError):
            continue
        results.append(changed)
    return results


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

