"""What an `nn.Module` holds and calls, as the type evaluator sees it: `m.children()`,
`get_submodule('a.b')`, `getattr(self, f"layer{i}")`, modules grown by `append`/`add_module`,
and which instances keep running statistics. A mixin of `evaluator.TypeInference`, written
against `protocol.TypeEvaluator`.
"""

from __future__ import annotations

import ast

from ckptlint.analysis.knowledge import torch_api
from ckptlint.analysis.semantics.modules import name_pattern
from ckptlint.analysis.semantics.protocol import EMPTY, TypeEvaluator
from ckptlint.analysis.semantics.values import (
    ClassType,
    ContainerType,
    TupleType,
    Type,
    Types,
    element_types,
    ordered,
)
from ckptlint.symbols import ASSIGN, ModuleSymbols, Scope
from ckptlint.syntax import walk


class ModuleStructure(TypeEvaluator):
    """The evaluator's `nn.Module` structure: registered children, submodules and grown containers."""

    _dynamic_lookups: set[tuple[str, object]]  # `getattr(self, name)` lookups in progress
    _growth: dict[int, dict[tuple[int, str], list[tuple[ast.Call, Scope]]]]
    _writes: dict[int, tuple[dict[str, list[ast.expr]], dict[str, list[tuple[str, ast.expr]]]]]

    def module_method(self, call: ast.Call, func: ast.Attribute, module: ModuleSymbols, scope: Scope, depth: int) -> Types | None:
        """`Block().to(device)` is the Block; `m.children()`, `m.named_modules()`, `d.values()`,
        `d.items()`, `m.get_submodule("a.b")` give its registered modules; None: another method."""
        if func.attr not in MODULE_METHODS:
            return None
        return self.module_method_types(func.attr, self.types(func.value, module, scope, depth + 1), call.args[0] if call.args else None)

    def module_method_types(self, method: str, base: Types, first_argument: ast.expr | None) -> Types | None:
        """What an `nn.Module` method in MODULE_METHODS returns on values of types `base`."""
        if any(self._defines_method(t, method) for t in base):
            return None  # the project class's own method
        if method in torch_api.MODULE_RETURNING_METHODS:
            return base if any(self.construction.is_module(t) for t in base) else None
        if method == "get_submodule":
            return self.submodule_types(base, first_argument)
        if method in ("values", "items"):
            elements = element_types(base)
        elif method in torch_api.CHILDREN_METHODS:
            elements = self.children_types(base)
        else:
            elements = self.construction.descendants(self, base)
        if method in ("items", "named_children", "named_modules"):
            return frozenset({ContainerType(torch_api.SEQUENCE, frozenset({TupleType((EMPTY, elements))}))})
        return frozenset({ContainerType(torch_api.SEQUENCE, elements)})

    def _defines_method(self, item: Type, method: str) -> bool:
        if not isinstance(item, ClassType):
            return False
        info = self.classes.by_name(item.name)
        return info is not None and self.classes.find_method(info, method) is not None

    def children_types(self, base: Types) -> Types:
        """`children()` of values of these types: a container's elements, a class's registered modules."""
        found: set[Type] = set(element_types(base))
        for item in base:
            if isinstance(item, ClassType):
                info = self.classes.by_name(item.name)
                if info is not None:
                    found.update(self.construction.children(self, info))
        return frozenset(found)

    def submodule_types(self, base: Types, path: ast.expr | None) -> Types:
        """`get_submodule("encoder.layers")`: the attribute chain; any registered module when the path is computed."""
        if not (isinstance(path, ast.Constant) and isinstance(path.value, str)):
            return self.construction.descendants(self, base)
        current = base
        for part in path.value.split("."):
            if part.isdigit():
                current = element_types(current)
                continue
            current = self.member_types(current, part)
        return current

    def member_types(self, base: Types, attribute: str) -> Types:
        """`base.attribute` for instances of project classes (with their constructor arguments)."""
        found: set[Type] = set()
        for item in base:
            if isinstance(item, ClassType):
                found.update(self.instance_attribute_types(item, attribute))
            elif isinstance(item, ContainerType) and item.kind == torch_api.MAPPING:
                found.update(item.elements)  # `self.heads.cls` on a ModuleDict
        return frozenset(found)

    def dynamic_attribute_types(self, base: Types, name: ast.expr) -> Types:
        """`getattr(self, f"layer{i}")`, `getattr(self, name)`: every registered module and
        module attribute whose name can match."""
        pattern = name_pattern(name)
        found: set[Type] = set()
        for item in base:
            if not isinstance(item, ClassType):
                continue
            info = self.classes.by_name(item.name)
            key = (item.name, pattern)
            if info is None or key in self._dynamic_lookups:
                continue  # a module registered from a getattr on its own class (transformers' Trainer): no new types
            self._dynamic_lookups.add(key)
            try:
                found.update(self.as_configured(item, lambda bound: self.construction.added_types(self, info, pattern, bound=bound)))
                for cls in self.classes.mro(info):
                    for attribute in sorted({*cls.attribute_assignments, *cls.class_level_annotations}):
                        if isinstance(pattern, tuple) and pattern_matches(attribute, pattern):
                            found.update(t for t in self.instance_attribute_types(item, attribute) if self.construction.is_module(t))
            finally:
                self._dynamic_lookups.discard(key)
        return frozenset(found)

    def has_running_stats(self, class_name: str, call: ast.Call | None) -> bool:
        short = torch_api.torch_class(class_name)
        if short is None:
            info = self.classes.by_name(class_name)
            if info is None:
                return False
            # a subclass keeps its base's statistics, whether or not it writes its own forward (timm's
            # BatchNormAct2d): the call reports them, and the forward's own updates are that hazard
            short = next(
                (torch_api.torch_class(a) for a in self.classes.ancestors(info) if isinstance(a, str) and torch_api.torch_class(a)),
                None,
            )
            if short is None:
                return False
        track = _keyword_constant(call, "track_running_stats")
        if short in torch_api.TORCH_BATCH_NORM_MODULES:
            return track is not False
        if short in torch_api.TORCH_INSTANCE_NORM_MODULES:
            return track is True
        return False

    def grown_elements(self, module: ModuleSymbols, scope: Scope, name: str, depth: int) -> Types | None:
        """Element types of a list `name` that the scope builds: `[...]`, `.append(x)`, `+= [...]`."""
        bindings = scope.bindings.get(name, [])
        if not any(b.kind == ASSIGN and _is_container_start(b.value) for b in bindings):
            return None
        elements: set[Type] = set()
        for b in bindings:
            if b.kind == ASSIGN:
                elements.update(element_types(self.types(b.value, module, scope, depth + 1)))
            elif isinstance(b.node, ast.AugAssign):
                elements.update(element_types(self.types(b.node.value, module, scope, depth + 1)))
        for call, call_scope in self._growth_calls(module).get((id(scope), name), ()):
            method = call.func.attr  # type: ignore[attr-defined]  # _growth_calls indexes `name.append(...)`-style calls only
            if method == "append" and call.args:
                elements.update(self.types(call.args[0], module, call_scope, depth + 1))
            elif method == "insert" and len(call.args) > 1:
                elements.update(self.types(call.args[1], module, call_scope, depth + 1))
            elif method in ("extend", "update") and call.args:
                elements.update(element_types(self.types(call.args[0], module, call_scope, depth + 1)))
            elif method in ("add_module", "register_module") and len(call.args) > 1:
                elements.update(self.types(call.args[1], module, call_scope, depth + 1))
        for value in self._local_writes(scope)[0].get(name, ()):  # `blocks[key] = Block()`
            elements.update(self.types(value, module, scope, depth + 1))
        return frozenset(elements)

    def assigned_value_types(self, module: ModuleSymbols, method: Scope, attribute: str, value: ast.expr, bound: dict[str, Types] | None) -> Types:
        """What `self.<attribute> = value` in `method` stores: a bare `nn.Module()` holds the
        attributes the method then sets on it (`self.mid = nn.Module(); self.mid.block_1 = Block()`)."""
        receiver = method.first_parameter()
        if receiver is not None and is_bare_module(value, module, method):
            return frozenset({self.bare_module(module, method, f"{receiver}.{attribute}", 0)})
        return self.construction.value_types(self, value, module, method, bound)

    def bare_module(self, module: ModuleSymbols, scope: Scope, name: str, depth: int) -> ClassType:
        """A bare `nn.Module()` with the attributes the scope sets on it, kept as its `arguments`."""
        attributes: dict[str, set[Type]] = {}
        for attribute, value in self._local_writes(scope)[1].get(name, ()):
            attributes.setdefault(attribute, set()).update(self.types(value, module, scope, depth + 1))
        return ClassType(torch_api.BARE_MODULE, arguments=tuple((a, tuple(ordered(t))) for a, t in sorted(attributes.items())))

    def _local_writes(self, scope: Scope) -> tuple[dict[str, list[ast.expr]], dict[str, list[tuple[str, ast.expr]]]]:
        """`name[k] = value` and `name.attr = value` statements of a scope, by name (memoised)."""
        cached = self._writes.get(id(scope))
        if cached is None:
            items: dict[str, list[ast.expr]] = {}
            attributes: dict[str, list[tuple[str, ast.expr]]] = {}
            for node in walk(scope.node) if scope.kind != "module" else ():
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                            items.setdefault(target.value.id, []).append(node.value)
                        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                            attributes.setdefault(target.value.id, []).append((target.attr, node.value))
                        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute) and isinstance(target.value.value, ast.Name):
                            owner = f"{target.value.value.id}.{target.value.attr}"  # `self.mid.block_1 = ...`
                            attributes.setdefault(owner, []).append((target.attr, node.value))
            cached = self._writes[id(scope)] = (items, attributes)
        return cached

    def _growth_calls(self, module: ModuleSymbols) -> dict[tuple[int, str], list[tuple[ast.Call, Scope]]]:
        """`name.append(...)`-style calls of a module, by (scope owning the name, name)."""
        index = self._growth.get(id(module))
        if index is None:
            index = {}
            for call, scope in module.calls:
                func = call.func
                if isinstance(func, ast.Attribute) and func.attr in _GROWTH_METHODS and isinstance(func.value, ast.Name):
                    owner: Scope | None = scope
                    while owner is not None and func.value.id not in owner.bindings:
                        owner = owner.parent
                    if owner is not None:
                        index.setdefault((id(owner), func.value.id), []).append((call, scope))
            self._growth[id(module)] = index
        return index


MODULE_METHODS = torch_api.MODULE_RETURNING_METHODS | torch_api.CHILDREN_METHODS | torch_api.DESCENDANT_METHODS | {"values", "items", "get_submodule"}


_GROWTH_METHODS = frozenset({"append", "extend", "insert", "update", "add_module", "register_module"})


_CONTAINER_STARTS = frozenset({*torch_api.TORCH_CONTAINERS, "list", "dict", "OrderedDict"})


def _is_container_start(value: ast.expr | None) -> bool:
    """A literal or an (empty or filled) container constructor a scope then grows."""
    if isinstance(value, (ast.List, ast.Tuple, ast.ListComp, ast.Dict, ast.DictComp)):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        return (func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else "") in _CONTAINER_STARTS
    return False


def pattern_matches(attribute: str, pattern: tuple[str, str]) -> bool:
    prefix, suffix = pattern
    return len(attribute) >= len(prefix) + len(suffix) and attribute.startswith(prefix) and attribute.endswith(suffix)


def _keyword_constant(call: ast.Call | None, name: str) -> object:
    if call is None:
        return None
    for keyword in call.keywords:
        if keyword.arg == name and isinstance(keyword.value, ast.Constant):
            return keyword.value.value
    return None


def is_bare_module(value: ast.expr | None, module: ModuleSymbols, scope: Scope) -> bool:
    """`nn.Module()`: an empty module the code then hangs submodules on."""
    if not (isinstance(value, ast.Call) and not value.args and not value.keywords):
        return False
    func = value.func
    if (func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else "") != "Module":
        return False
    return torch_api.torch_class(module.qualified_name(func, scope) or "") == "Module"

