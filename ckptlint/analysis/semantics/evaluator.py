"""What an expression is, from the bindings that produce it: enough types to follow calls.

`self.block` is a `Block` because `__init__` assigned `Block(...)` (or an annotation says
so); `layer` in `for layer in self.layers` is an element of `nn.ModuleList([...])`;
`block_fn(...)` makes a `Bottleneck` because the parameter defaults to that class; a
factory returns `Block(...)`; `create_custom_forward(module)` returns an inner function
with `module` bound. Flow-insensitive and depth-limited: it only needs to be right
about what project code a region can run.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Callable, Iterable

from ckptlint.analysis.semantics import registries
from ckptlint.analysis.knowledge import torch_api
from ckptlint.analysis.semantics.config_fields import field_keys
from ckptlint.analysis.semantics.modules import ModuleConstruction, name_pattern
from ckptlint.analysis.regions.library_calls import constructed_rng
from ckptlint.analysis.flow.dict_writes import DictWrites, dict_writes
from ckptlint.classes import ClassIndex, ClassInfo
from ckptlint.passed_arguments import passed_arguments
from ckptlint.project import Project
from ckptlint.symbols import ASSIGN, CLASSDEF, DEF, IMPORT, LOOP, OTHER, PARAM, UNPACK, Binding, ModuleSymbols, Scope, parameter_default, positional_parameters
from ckptlint.syntax import walk
from ckptlint.analysis.semantics.values import Type, Types, ordered
from ckptlint.analysis.semantics.values import (
    OUTER,
    ClassObjectType,
    ClassType,
    ContainerType,
    FunctionType,
    KeyedType,
    LiteralType,
    TupleType,
    Value,
    element_types,
    unpacked_types,
)

MAX_DEPTH = 24
MAX_CONTEXTS = 8  # argument-dependent evaluations of one function; beyond, its context-free result
EMPTY: Types = frozenset()
Passed = tuple[tuple[str, Types], ...]  # what a call passes to the parameters that choose what is built


class TypeInference:
    def __init__(self, project: Project, classes: ClassIndex):
        self.project = project
        self.classes = classes
        self._attribute_types: dict[tuple[int, str], Types] = {}
        self._returns: dict[int, list[ast.expr]] = {}
        self._return_types: dict[int, Types] = {}
        self._binding_types: dict[int, Types] = {}
        self._growth: dict[int, dict[tuple[int, str], list[tuple[ast.Call, Scope]]]] = {}
        self._instance_attributes: dict[tuple[ClassType, str], Types] = {}
        self._writes: dict[int, tuple[dict[str, list[ast.expr]], dict[str, list[tuple[str, ast.expr]]]]] = {}
        self.construction = ModuleConstruction(classes)
        self._dynamic_lookups: set[tuple[str, object]] = set()  # `getattr(self, name)` lookups in progress
        # argument-dependent evaluation (`build_norm_layer(dict(type='GN'), c)`, `make_layer(Block, 3)`):
        # the arguments each function scope is being evaluated with, and memos keyed by them
        self._env: dict[int, dict[str, Types]] = {}
        self._env_binding_types: dict[tuple[int, tuple[object, ...]], Types] = {}
        self._env_returns: dict[tuple[int, tuple[object, ...]], Types] = {}
        self._contexts: dict[int, int] = {}
        self._configured_attributes: dict[tuple[int, str, Passed], Types] = {}
        self._registrations: dict[int, list[tuple[str, str, str]]] = {}
        self._choosing: dict[int, frozenset[str]] = {}
        self._registering: dict[str, bool] = {}
        self._dict_writes: dict[int, DictWrites | None] = {}  # by the name a call unpacks (`**ba`)

    # -- expressions ----------------------------------------------------------

    def types(self, expr: ast.AST | None, module: ModuleSymbols, scope: Scope, depth: int = 0) -> Types:
        if expr is None or depth > MAX_DEPTH:
            return EMPTY
        if isinstance(expr, ast.Call):
            return self._call_types(expr, module, scope, depth)
        if isinstance(expr, ast.Name):
            return self._name_types(expr, module, scope, depth)
        if isinstance(expr, ast.Attribute):
            return self._attribute_expr_types(expr, module, scope, depth)
        if isinstance(expr, ast.Constant):
            return registries.literal(expr.value)
        if isinstance(expr, ast.Subscript):
            base = self.types(expr.value, module, scope, depth + 1)
            if isinstance(expr.slice, ast.Slice):
                return base
            if any(isinstance(t, KeyedType) for t in base):  # `NORM_LAYERS[cfg['type']]`
                key = self.types(expr.slice, module, scope, depth + 1)
                return registries.lookup(base, key, self._builder(scope, expr.value))
            return element_types(base)
        if isinstance(expr, ast.Tuple) and not any(isinstance(e, ast.Starred) for e in expr.elts):
            positions = tuple(self.types(e, module, scope, depth + 1) for e in expr.elts)
            return frozenset({TupleType(positions), ContainerType(torch_api.SEQUENCE, frozenset().union(*positions))})
        if isinstance(expr, (ast.List, ast.Tuple, ast.Set)):
            return frozenset({ContainerType(torch_api.SEQUENCE, self._elements(expr.elts, module, scope, depth))})
        if isinstance(expr, ast.Dict):
            each = [self.types(v, module, scope, depth + 1) for v in expr.values]
            values = frozenset().union(*each)
            found: set[Type] = {ContainerType(torch_api.MAPPING, values)}
            if all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in expr.keys):
                found.add(registries.keyed((k.value, t) for k, t in zip(expr.keys, each)))  # type: ignore[union-attr]  # all() above: str constants
            return frozenset(found)
        if isinstance(expr, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            inner = module.scope_of.get(id(expr), scope)
            return frozenset({ContainerType(torch_api.SEQUENCE, self.types(expr.elt, module, inner, depth + 1))})
        if isinstance(expr, ast.DictComp):
            inner = module.scope_of.get(id(expr), scope)
            return frozenset({ContainerType(torch_api.MAPPING, self.types(expr.value, module, inner, depth + 1))})
        if isinstance(expr, ast.IfExp):
            return self.types(expr.body, module, scope, depth + 1) | self.types(expr.orelse, module, scope, depth + 1)
        if isinstance(expr, ast.BoolOp):
            return frozenset().union(*(self.types(v, module, scope, depth + 1) for v in expr.values))
        if isinstance(expr, ast.Lambda):
            return frozenset({self.function(module, module.scope_of[id(expr)])})
        if isinstance(expr, ast.Starred):
            return element_types(self.types(expr.value, module, scope, depth + 1))
        if isinstance(expr, ast.NamedExpr):
            return self.types(expr.value, module, scope, depth + 1)
        return EMPTY

    def _elements(self, elements: Iterable[ast.expr], module: ModuleSymbols, scope: Scope, depth: int) -> Types:
        found: set[Type] = set()
        for element in elements:
            found.update(self.types(element, module, scope, depth + 1))
        return frozenset(found)

    def _call_types(self, call: ast.Call, module: ModuleSymbols, scope: Scope, depth: int) -> Types:
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in registries.ALL_METHODS:
            chosen = self._choice_method(call, func, module, scope, depth)
            if chosen is not None:
                return chosen
        name = self.qualified_name(call.func, module, scope)
        if name is not None:
            known = self._library_call(name, call, module, scope, depth)
            if known is not None:
                return known
        if isinstance(call.func, ast.Attribute):
            known = self._module_method(call, call.func, module, scope, depth)
            if known is not None:
                return known
        results: set[Type] = set()
        for callee in self.types(call.func, module, scope, depth + 1):
            results.update(self.call_result(callee, call, module, scope, depth + 1))
        return frozenset(results)

    def _module_method(self, call: ast.Call, func: ast.Attribute, module: ModuleSymbols, scope: Scope, depth: int) -> Types | None:
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
                found.update(self.construction.added_types(self, info, pattern))
                for cls in self.classes.mro(info):
                    for attribute in sorted({*cls.attribute_assignments, *cls.class_level_annotations}):
                        if isinstance(pattern, tuple) and pattern_matches(attribute, pattern):
                            found.update(t for t in self.instance_attribute_types(item, attribute) if self.construction.is_module(t))
            finally:
                self._dynamic_lookups.discard(key)
        return frozenset(found)

    def call_result(self, callee: Type, call: ast.Call | None, module: ModuleSymbols, scope: Scope, depth: int) -> Types:
        """The types calling a value of type `callee` gives."""
        if isinstance(callee, ClassObjectType):
            return self.instance_types(callee.name, call, module, scope, depth, callee.built_by)
        if isinstance(callee, ClassType):  # calling an instance: its __call__ (a builder object)
            info = self.classes.by_name(callee.name)
            found_call = self.classes.find_method(info, "__call__") if info is not None else None
            if found_call is not None and found_call[0].name != "Module":
                owner, scope_ = found_call
                receiver = Value(frozenset({OUTER}), frozenset({callee}), path="self")
                return self.call_result(self.function(owner.module, scope_, receiver), call, module, scope, depth + 1)
            return EMPTY
        if isinstance(callee, FunctionType) and callee.node is not None and depth <= MAX_DEPTH:
            callee_module: ModuleSymbols = callee.module  # type: ignore[assignment]  # project functions carry the module that defines them
            callee_scope = callee_module.scope_of.get(id(callee.node))
            if callee_scope is None:
                return EMPTY
            bound = self._bind_call_types(callee_scope, call, module, scope, depth)
            passed = self._passed(callee_module, callee_scope, callee.receiver is not None, call, module, scope, depth)
            if passed:
                returned = self._returned_types_with(callee_module, callee_scope, passed)
            else:
                returned = self._returned_types(callee_module, callee_scope)
            found: set[Type] = set()
            for item in returned:
                if isinstance(item, FunctionType) and bound and item.node is not None:
                    # a closure factory: the inner function sees the factory's arguments
                    item = replace(item, bound=item.bound + bound)
                found.add(item)
            return frozenset(found)
        return EMPTY

    def _bind_call_types(
        self, callee_scope: Scope, call: ast.Call | None, module: ModuleSymbols, scope: Scope, depth: int
    ) -> tuple[tuple[str, Value], ...]:
        if call is None:
            return ()
        node = callee_scope.node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return ()
        params = [a.arg for a in positional_parameters(node.args)]
        bound = []
        for name, argument in zip(params, call.args):
            if isinstance(argument, ast.Starred):
                break
            bound.append((name, Value(frozenset({OUTER}), self.types(argument, module, scope, depth + 1), path=name)))
        for keyword in call.keywords:
            if keyword.arg is not None:
                types = self.types(keyword.value, module, scope, depth + 1)
                bound.append((keyword.arg, Value(frozenset({OUTER}), types, path=keyword.arg)))
        return tuple(bound)

    def container_elements(self, kind: str, arguments: Iterable[ast.expr], module: ModuleSymbols, scope: Scope, depth: int) -> Types:
        """The elements a torch container's constructor arguments give it."""
        elements: set[Type] = set()
        for argument in arguments:
            if isinstance(argument, ast.Starred):
                elements.update(element_types(self.types(argument.value, module, scope, depth + 1)))
            else:
                types = self.types(argument, module, scope, depth + 1)
                if kind == torch_api.SEQUENTIAL and not any(isinstance(t, ContainerType) for t in types):
                    elements.update(types)  # nn.Sequential(a, b, c)
                else:
                    elements.update(element_types(types))  # nn.ModuleList([...]), nn.Sequential(OrderedDict)
        return frozenset(elements)

    def _library_call(self, name: str, call: ast.Call, module: ModuleSymbols, scope: Scope, depth: int) -> Types | None:
        short = torch_api.short_name(name)
        if name.startswith("torch.nn.") and short in torch_api.TORCH_CONTAINERS:
            kind = torch_api.TORCH_CONTAINERS[short]
            elements = self.container_elements(kind, call.args, module, scope, depth)
            return frozenset({ContainerType(kind, elements), ClassType(name)})
        if name == "builtins.getattr" and len(call.args) >= 2:
            named = self._getattr_of_module(call, module, scope, depth)  # `getattr(nn, 'LayerNorm')`
            if named is not None:
                return named
            base = self.types(call.args[0], module, scope, depth + 1)
            attribute = call.args[1]
            if isinstance(attribute, ast.Constant) and isinstance(attribute.value, str):
                return self.member_types(base, attribute.value)
            return self.dynamic_attribute_types(base, attribute)
        if name in torch_api.PYTHON_CONTAINER_CALLS:
            return self._container_call(name, call, module, scope, depth)
        if name in ("copy.copy", "copy.deepcopy") and call.args:
            return self.types(call.args[0], module, scope, depth + 1)
        if name in ("builtins.enumerate", "builtins.reversed", "builtins.iter", "builtins.sorted"):
            return frozenset({ContainerType(torch_api.SEQUENCE, self._elements_of_arguments(call, module, scope, depth))})
        if name == "functools.partial" and call.args:
            return self.types(call.args[0], module, scope, depth + 1)
        rng = constructed_rng(name, call)
        if rng is not None:
            return frozenset({rng})
        project_class = self.classes.by_name(name)
        if project_class is not None:
            return self.instance_types(project_class.qualified_name, call, module, scope, depth)
        if torch_api.torch_class(name) is not None and short[:1].isupper():
            return frozenset({self.instance(name, call)})
        return None

    def _elements_of_arguments(self, call: ast.Call, module: ModuleSymbols, scope: Scope, depth: int) -> Types:
        found: set[Type] = set()
        for argument in call.args[:1]:
            found.update(element_types(self.types(argument, module, scope, depth + 1)))
        return frozenset(found)

    def instance_types(
        self, class_name: str, call: ast.Call | None, module: ModuleSymbols | None, scope: Scope | None, depth: int, built_by: str = ""
    ) -> Types:
        """An instance made by `call`: with the arguments that choose what it builds (`config`),
        the modules it passes to the constructor (`arguments`), and seen as the container it is
        when the class derives from a torch container."""
        if module is not None and scope is not None:
            item = self._configured_instance(class_name, call, module, scope, depth, built_by)
        else:
            item = replace(self.instance(class_name, call), built_by=built_by)
        info = self.classes.by_name(class_name)
        if info is None:
            return frozenset({item})
        if call is not None and module is not None and scope is not None and depth <= MAX_DEPTH:
            arguments = self.construction.arguments(self, info, call, module, scope, depth)
            if arguments:
                item = replace(item, arguments=arguments)
        view = self.construction.container_view(self, item, call, module, scope, depth)
        return frozenset({item} if view is None else {item, view})

    def instance(self, class_name: str, call: ast.Call | None) -> ClassType:
        """An instance of the class, noting whether it is a norm that updates running statistics."""
        return ClassType(class_name, self._has_running_stats(class_name, call))

    def _has_running_stats(self, class_name: str, call: ast.Call | None) -> bool:
        short = torch_api.torch_class(class_name)
        if short is None:
            info = self.classes.by_name(class_name)
            if info is None or self._defines(info, "forward"):
                return False
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

    def _defines(self, info: ClassInfo, method: str) -> bool:
        return any(cls.method(method) is not None for cls in self.classes.mro(info))

    # -- construction: what builders, registries and config choose ---------------

    def _container_call(self, name: str, call: ast.Call, module: ModuleSymbols, scope: Scope, depth: int) -> Types:
        """`list(...)`, `dict(...)`: elements; `dict(type='BN')` and `dict(cfg)` also keep their keys."""
        kind = torch_api.PYTHON_CONTAINER_CALLS[name]
        elements: set[Type] = set()
        keyed: set[Type] = set()
        for argument in call.args:
            given = self.types(argument, module, scope, depth + 1)
            elements.update(element_types(given))
            keyed.update(t for t in given if isinstance(t, KeyedType))
        if name == "builtins.dict" and call.keywords and not call.args:
            pairs = [(k.arg, self.types(k.value, module, scope, depth + 1)) for k in call.keywords if k.arg is not None]
            keyed.add(registries.keyed(pairs))
            elements.update(t for _, types in pairs for t in types)
        return frozenset({ContainerType(kind, frozenset(elements)), *keyed})

    def _getattr_of_module(self, call: ast.Call, module: ModuleSymbols, scope: Scope, depth: int) -> Types | None:
        """`getattr(nn, 'LayerNorm')`: the class each literal name names; None when the first
        argument is not a module, or the name is not known (then nothing is assumed)."""
        owner = call.args[0]
        if not isinstance(owner, (ast.Name, ast.Attribute)):
            return None
        binding = module.binding(scope, owner.id, owner.lineno) if isinstance(owner, ast.Name) else None
        if isinstance(owner, ast.Name) and (binding is None or binding.kind != IMPORT):
            return None
        prefix = self.qualified_name(owner, module, scope)
        names = registries.keys(self.types(call.args[1], module, scope, depth + 1))
        if prefix is None or names is None:
            return None
        found: set[Type] = set()
        for name in sorted(names):
            found.update(self._global_types(f"{prefix}.{name}", depth + 1))
        return frozenset(found)

    def _choice_method(self, call: ast.Call, func: ast.Attribute, module: ModuleSymbols, scope: Scope, depth: int) -> Types | None:
        """`MODELS.build(cfg)`, `cfg.get('type')`, `cfg.copy()`, `name.lower()`; None: not one of those."""
        method = func.attr
        if method in registries.REGISTRY_METHODS:
            registered = self._registered(func.value, module, scope)
            if registered:
                return self._registry_call(func, registered, call, module, scope, depth)
        if method not in registries.KEYED_METHODS and method not in registries.STRING_METHODS:
            return None
        base = self.types(func.value, module, scope, depth + 1)
        if method in registries.STRING_METHODS:
            return registries.string_method_call(base, method, call.args)
        if not any(isinstance(t, KeyedType) for t in base):
            return None
        if method == "copy":
            return base
        if not call.args:
            return None
        found = registries.lookup(base, self.types(call.args[0], module, scope, depth + 1), self._builder(scope, func.value))
        if len(call.args) > 1:
            found |= self.types(call.args[1], module, scope, depth + 1)
        return found

    def _registered(self, registry: ast.expr, module: ModuleSymbols, scope: Scope) -> dict[str, list[str]] | None:
        """Classes registered with `@REG.register_module()` under each key, for a module-level
        registry object `REG`: found in its own module, the calling module and the modules it imports."""
        if not isinstance(registry, (ast.Name, ast.Attribute)):
            return None
        name = self.qualified_name(registry, module, scope)
        found = self.project.global_binding(name) if name else None
        if found is None or found[1].kind != ASSIGN or not isinstance(found[1].value, ast.Call):
            return None
        defining, _ = found
        modules = [defining, module]
        for imported in module.imported:
            if self._may_register(imported):
                other = self.project.module_named(imported)
                if other is not None:
                    modules.append(other)
        registered: dict[str, list[str]] = {}
        seen: set[int] = set()
        for other in modules:
            if id(other) in seen:
                continue
            seen.add(id(other))
            for target, key, class_name in self._module_registrations(other):
                if target == name:
                    registered.setdefault(key, []).append(class_name)
        return registered or None

    def _may_register(self, module_name: str) -> bool:
        """Whether a project module's text can hold a registration (read, not parsed, to decide)."""
        cached = self._registering.get(module_name)
        if cached is None:
            path = self.project.module_path(module_name) if self.project.is_project_name(module_name) else None
            try:
                if path is None:
                    cached = False
                else:  # an editor's unsaved buffer is parsed to find out
                    cached = self.project.has_overlay(path) or any(f".{m}".encode() in path.read_bytes() for m in registries.REGISTER_METHODS)
            except OSError:
                cached = False
            self._registering[module_name] = cached
        return cached

    def _module_registrations(self, module: ModuleSymbols) -> list[tuple[str, str, str]]:
        """(registry, key, class) for each `@REG.register_module()` class of a module, memoised."""
        cached = self._registrations.get(id(module))
        if cached is None:
            cached = []
            for target, scope, key, node in registries.registrations(module):
                registry = self.qualified_name(target, module, scope)
                if registry is not None:
                    cached.append((registry, key, module.defined_name(scope, node.name)))
            self._registrations[id(module)] = cached
        return cached

    def _registry_call(
        self, func: ast.Attribute, registered: dict[str, list[str]], call: ast.Call, module: ModuleSymbols, scope: Scope, depth: int
    ) -> Types:
        """`REG.build(dict(type='X', ...))` builds X; `REG.get('X')` is the class X; an unknown key, any of them."""
        argument = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg in ("cfg", "name", "key")), None)
        given = self.types(argument, module, scope, depth + 1) if argument is not None else EMPTY
        building = func.attr != "get" and func.attr != "get_module"
        key_types = frozenset().union(*(t.get("type") for t in given if isinstance(t, KeyedType))) if building else given
        names = registries.keys(key_types)
        chosen = sorted(names & registered.keys()) if names is not None else sorted(registered)
        builder = "" if names is not None else f"{ast.unparse(func.value)}.{func.attr}"
        classes = [ClassObjectType(c) for key in chosen for c in registered[key]]
        if len({c.name for c in classes}) < 2:
            builder = ""
        if not building:
            return frozenset(ClassObjectType(c.name, builder) for c in classes)
        config = tuple(sorted((k, registries.choices(v)) for t in given if isinstance(t, KeyedType) for k, v in t.items if k != "type"))
        found: set[Type] = set()
        for item in classes:
            instance = self.instance(item.name, None)
            found.add(replace(instance, config=config if self._choice_parameters_of(item.name, config) else (), built_by=builder))
        return frozenset(found)

    def _choice_parameters_of(self, class_name: str, config: Passed) -> bool:
        info = self.classes.by_name(class_name)
        init = self.classes.find_method(info, "__init__") if info is not None else None
        return bool(config) and init is not None and all(name in _parameter_names(init[1]) for name, _ in config)

    def _builder(self, scope: Scope, mapping: ast.expr) -> str:
        return registries.builder_name(display_name(scope), ast.unparse(mapping))

    def _configured_instance(
        self, class_name: str, call: ast.Call | None, module: ModuleSymbols, scope: Scope, depth: int, built_by: str = ""
    ) -> ClassType:
        """An instance, with the constructor arguments that choose what it builds (its `config`)."""
        item = self.instance(class_name, call)
        info = self.classes.by_name(class_name) if call is not None else None
        init = self.classes.find_method(info, "__init__") if info is not None else None
        config = self._passed(init[0].module, init[1], True, call, module, scope, depth) if init is not None else ()
        return replace(item, config=config, built_by=built_by) if config or built_by else item

    def _passed(
        self, callee_module: ModuleSymbols, callee_scope: Scope, has_receiver: bool, call: ast.Call | None, module: ModuleSymbols, scope: Scope, depth: int
    ) -> Passed:
        """What a call passes to the parameters that choose what the callee builds: arguments
        carrying literals, config dicts or classes, and (as unknown) any argument given to a
        parameter whose default is one. Empty for the common call, which chooses nothing."""
        node = callee_scope.node
        if call is None or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return ()
        params = [a.arg for a in positional_parameters(node.args)][1 if has_receiver else 0 :]
        keyword_only = {a.arg for a in node.args.kwonlyargs}
        choosing = self._choice_defaults(callee_module, callee_scope)
        passed: dict[str, Types] = {}
        for name, argument in zip(params, call.args):
            if isinstance(argument, ast.Starred):
                break
            types = self.types(argument, module, scope, depth + 1)
            if name in choosing or registries.is_choice(types):
                passed[name] = registries.choices(types)
        named = {*params, *keyword_only}
        given = [(k.arg, self.types(k.value, module, scope, depth + 1)) for k in call.keywords if k.arg in named]
        for name, (types, may_miss) in self.unpacked_keywords(call, module, scope, depth, named).items():
            binding = next((b for b in callee_scope.bindings.get(name, ()) if b.kind == PARAM), None)
            if binding is not None:  # `Block(**ba)`: a key the call may miss may leave the default
                default = parameter_default(binding) if may_miss else None
                given.append((name, types | self.types(default, callee_module, callee_scope.parent or callee_scope, depth + 1)))
        for name, types in given:
            if name in choosing or registries.is_choice(types):
                passed[name] = registries.choices(types)
        return tuple(sorted(passed.items()))

    def unpacked_keywords(
        self, call: ast.Call, module: ModuleSymbols, scope: Scope, depth: int, names: Iterable[str]
    ) -> dict[str, tuple[Types, bool]]:
        """What a call's `**ba` gives each of `names` its function writes (`ba['norm_layer'] = ...`,
        `dict(k=v)`, `ba.update(k=v)`): the types, and whether the call may miss the key, so that
        the parameter may keep its default (written under a branch, popped, or after a write that
        can give any key). Keys no write names are left out: as under any unknown `**kwargs`,
        their parameters keep their defaults."""
        wanted = set(names)
        found: dict[str, tuple[Types, bool]] = {}
        for keyword in call.keywords:
            if keyword.arg is not None or not isinstance(keyword.value, ast.Name):
                continue
            key = id(keyword.value)
            if key not in self._dict_writes:
                self._dict_writes[key] = dict_writes(module, scope, keyword.value)
            writes = self._dict_writes[key]
            if writes is None:
                continue
            values = {k: self._elements(v, module, scope, depth) for k, v in writes.values.items() if k in wanted}
            sure, opaque = set(writes.sure), writes.opaque
            for mapping, on_every_path, start in writes.merged:  # `ba.update(self.dd)`: the keys its type knows
                keyed = [t for t in self.types(mapping, module, scope, depth + 1) if isinstance(t, KeyedType)]
                opaque = opaque or (not keyed and not start)  # an unknown mapping merged later may give any key
                for item in keyed:
                    for k, types in item.items:
                        if k in wanted:
                            values[k] = values.get(k, EMPTY) | types
                if on_every_path and len(keyed) == 1:
                    sure.update(k for k, _ in keyed[0].items)
            for k, types in values.items():
                found[k] = (types, opaque or k not in sure or k in writes.removed)
        return found

    def _choice_defaults(self, module: ModuleSymbols, scope: Scope) -> frozenset[str]:
        """Parameters whose default chooses what is built (`norm_cfg=dict(type='BN')`), memoised."""
        cached = self._choosing.get(id(scope))
        if cached is None:
            node = scope.node
            names: set[str] = set()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                args = node.args
                positional = positional_parameters(args)
                pairs = [*zip(positional[len(positional) - len(args.defaults) :], args.defaults), *zip(args.kwonlyargs, args.kw_defaults)]
                saved = self._env
                self._env = {}
                try:
                    for parameter, default in pairs:
                        if default is not None and registries.is_choice(self.types(default, module, scope.parent or scope)):
                            names.add(parameter.arg)
                finally:
                    self._env = saved
            cached = self._choosing[id(scope)] = frozenset(names)
        return cached

    def _returned_types_with(self, module: ModuleSymbols, scope: Scope, passed: Passed) -> Types:
        """What a function returns when called with `passed` (and inside the evaluations that enclose it)."""
        outer = {k: v for k, v in self._env.items() if k in _ancestor_ids(scope)}
        if passed:
            outer[id(scope)] = dict(passed)
        env_key = _frozen_env(outer)
        key = (id(scope), env_key)
        cached = self._env_returns.get(key)
        if cached is not None:
            return cached
        count = self._contexts.get(id(scope), 0)
        if count >= MAX_CONTEXTS and not self._env_key(scope):
            return self._returned_types(module, scope)
        self._contexts[id(scope)] = count + 1
        self._env_returns[key] = EMPTY
        result = self._returns_in(module, scope, outer)
        self._env_returns[key] = result
        return result

    def _env_key(self, scope: Scope) -> tuple[object, ...]:
        """The arguments being evaluated with that `scope` (or a scope enclosing it) sees."""
        env = self._env
        found = []
        current: Scope | None = scope
        while current is not None:
            passed = env.get(id(current))
            if passed is not None:
                found.append((id(current), tuple(sorted(passed.items()))))
            current = current.parent
        return tuple(found)

    def _receiver_type(self, info: ClassInfo) -> ClassType:
        """`self` in a method: configured like the instance being evaluated, if it is."""
        passed = self._env.get(id(info.scope)) if self._env else None
        return ClassType(info.qualified_name, config=tuple(sorted(passed.items()))) if passed else ClassType(info.qualified_name)

    # -- names ----------------------------------------------------------------

    def qualified_name(self, expr: ast.expr, module: ModuleSymbols, scope: Scope) -> str | None:
        name = module.qualified_name(expr, scope)
        return None if name is None else self.project.canonical_name(name)

    def _name_types(self, expr: ast.Name, module: ModuleSymbols, scope: Scope, depth: int) -> Types:
        receiver = self.self_class(module, scope, expr.id)
        if receiver is not None:
            item = self._receiver_type(receiver)
            view = self.construction.container_view(self, item, None, None, None, depth)
            return frozenset({item} if view is None else {item, view})
        binding = module.binding(scope, expr.id, expr.lineno)
        if binding is None:
            star = module.star_target(expr.id)
            return self._global_types(star, depth + 1) if star else EMPTY
        if binding.scope.kind == "module" or binding.kind in (IMPORT, CLASSDEF, DEF):
            return self.binding_types(module, binding, depth + 1)
        # inside a function, any of its assignments may be the one that ran (`if ...: block = A() else: block = B()`),
        # unless the function is straight-line there: then the one that reaches the use
        candidates = binding.scope.bindings.get(expr.id, [binding])
        if len(candidates) > 1 and binding.scope is scope:
            reaching = _reaching_binding(candidates, scope, expr)
            if reaching is not None:
                candidates = [reaching]
        found: set[Type] = set()
        for candidate in candidates:
            found.update(self.binding_types(module, candidate, depth + 1))
        return frozenset(found)

    def binding_types(self, module: ModuleSymbols, binding: Binding, depth: int = 0) -> Types:
        """Memoised per binding; a fresh depth budget inside (the memo and a cycle sentinel bound the work)."""
        if self._env:
            passed = self._env.get(id(binding.scope))
            if binding.kind == PARAM and passed is not None and binding.name in passed:
                return passed[binding.name]  # what the call being evaluated passes
            env_key = self._env_key(binding.scope)
            if env_key:
                return self._binding_types_in_env(module, binding, env_key)
        key = id(binding)
        cached = self._binding_types.get(key)
        if cached is not None:
            return cached
        self._binding_types[key] = EMPTY  # a binding that (indirectly) refers to itself
        result = self._binding_types_uncached(module, binding, 0)
        self._binding_types[key] = result
        return result

    def _binding_types_in_env(self, module: ModuleSymbols, binding: Binding, env_key: tuple[object, ...]) -> Types:
        key = (id(binding), env_key)
        cached = self._env_binding_types.get(key)
        if cached is not None:
            return cached
        self._env_binding_types[key] = EMPTY
        result = self._binding_types_uncached(module, binding, 0)
        self._env_binding_types[key] = result
        return result

    def _binding_types_uncached(self, module: ModuleSymbols, binding: Binding, depth: int) -> Types:
        scope = binding.written_from or binding.scope
        if binding.kind == CLASSDEF:
            return frozenset({ClassObjectType(module.binding_qualified_name(binding) or binding.name)})
        if binding.kind == DEF:
            function_scope = module.scope_of.get(id(binding.node))
            return frozenset({self.function(module, function_scope)}) if function_scope else EMPTY
        if binding.kind == IMPORT and binding.target:
            return self._global_types(binding.target, depth)
        if binding.kind in (ASSIGN, OTHER):
            found = set(self.types(binding.value, module, scope, depth + 1)) if binding.kind == ASSIGN else set()
            grown = self._grown_elements(module, binding.scope, binding.name, depth)
            if grown is not None:  # a list or module container built up with append/extend/+=/[k] =
                kinds = {t.kind for t in found if isinstance(t, ContainerType)} or {torch_api.SEQUENCE}
                found = {t for t in found if not isinstance(t, ContainerType)}
                found.update(ContainerType(kind, grown) for kind in kinds)
            if binding.kind == ASSIGN and _is_bare_module(binding.value, module, scope):  # `m = nn.Module(); m.bn = ...`
                found = {self._bare_module(module, binding.scope, binding.name, depth)}
            return frozenset(found)
        if binding.kind == LOOP:
            return self._loop_types(binding, module, scope, depth)
        if binding.kind == UNPACK and binding.unpack:
            types = self.types(binding.value, module, scope, depth + 1)
            for index in binding.unpack:
                types = unpacked_types(types, index)
            return types
        if binding.kind == PARAM:
            return self._parameter_types(binding, module, depth)
        return EMPTY

    def _grown_elements(self, module: ModuleSymbols, scope: Scope, name: str, depth: int) -> Types | None:
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

    def _bare_module(self, module: ModuleSymbols, scope: Scope, name: str, depth: int) -> ClassType:
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

    def _global_types(self, qualified_name: str, depth: int) -> Types:
        canonical = self.project.canonical_name(qualified_name)
        found = self.project.global_binding(canonical)
        if found is not None:
            other, binding = found
            return self.binding_types(other, binding, depth + 1)
        if torch_api.torch_class(canonical) and torch_api.short_name(canonical)[:1].isupper():
            return frozenset({ClassObjectType(canonical)})
        return EMPTY

    def _loop_types(self, binding: Binding, module: ModuleSymbols, scope: Scope, depth: int) -> Types:
        iterable = binding.value
        if iterable is None:
            return EMPTY
        unpack = binding.unpack
        if isinstance(iterable, ast.Call) and unpack:
            name = module.qualified_name(iterable.func, scope)
            if name == "builtins.enumerate" and unpack[0] == 1 and iterable.args:
                return element_types(self.types(iterable.args[0], module, scope, depth + 1))
            if name == "builtins.zip" and unpack[0] < len(iterable.args):
                return element_types(self.types(iterable.args[unpack[0]], module, scope, depth + 1))
            if isinstance(iterable.func, ast.Attribute) and iterable.func.attr == "items" and unpack[0] == 1:
                return element_types(self.types(iterable.func.value, module, scope, depth + 1))
            types = element_types(self.types(iterable, module, scope, depth + 1))  # `named_children()`: (name, module) pairs
            for index in unpack:
                types = unpacked_types(types, index)
            return types
        return element_types(self.types(iterable, module, scope, depth + 1))

    def _parameter_types(self, binding: Binding, module: ModuleSymbols, depth: int) -> Types:
        found: set[Type] = set()
        if binding.value is not None:  # the annotation
            found.update(self.annotation_types(binding.value, module, binding.scope.parent or binding.scope, depth))
        default = parameter_default(binding)
        if default is not None:
            chosen = self.types(default, module, binding.scope.parent or binding.scope, depth + 1)
            found.update(chosen)
            if registries.is_choice(chosen):  # `attention='plain'`: or what this module's calls choose instead
                for argument, call_scope in passed_arguments(module, binding.scope, binding.name):
                    found.update(registries.choices(self.types(argument, module, call_scope, depth + 1)))
        found.update(self.construction.site_types(self, binding, module))  # `Wrapper(Block())` for `__init__(self, inner)`
        return frozenset(found)

    def annotation_types(self, annotation: ast.expr, module: ModuleSymbols, scope: Scope, depth: int = 0) -> Types:
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                annotation = ast.parse(annotation.value, mode="eval").body
            except SyntaxError:
                return EMPTY
        if isinstance(annotation, ast.Subscript):
            outer = module.qualified_name(annotation.value, scope) or ""
            inner = annotation.slice
            if outer.rpartition(".")[2] in ("Type", "type"):
                return frozenset(
                    ClassObjectType(t.name) for t in self.annotation_types(inner, module, scope, depth + 1) if isinstance(t, ClassType)
                )
            if outer.rpartition(".")[2] in ("Optional", "Union"):
                parts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
                return frozenset().union(*(self.annotation_types(p, module, scope, depth + 1) for p in parts))
            return EMPTY
        if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
            return self.annotation_types(annotation.left, module, scope, depth + 1) | self.annotation_types(
                annotation.right, module, scope, depth + 1
            )
        if isinstance(annotation, (ast.Name, ast.Attribute)):
            name = self.qualified_name(annotation, module, scope)
            if name is None:
                return EMPTY
            if self.classes.by_name(name) is not None or (torch_api.torch_class(name) and name.rpartition(".")[2][:1].isupper()):
                return frozenset({ClassType(name)})
        return EMPTY

    # -- attributes -----------------------------------------------------------

    def _attribute_expr_types(self, expr: ast.Attribute, module: ModuleSymbols, scope: Scope, depth: int) -> Types:
        found: set[Type] = set()
        for base in self.types(expr.value, module, scope, depth + 1):
            if isinstance(base, ClassType):
                found.update(self.instance_attribute_types(base, expr.attr))
            elif isinstance(base, KeyedType):  # `cfg.type` on a config dict
                found.update(base.get(expr.attr))
        if found:
            return frozenset(found)
        name = self.qualified_name(expr, module, scope)
        if name is not None:
            return self._global_types(name, depth + 1)
        return EMPTY

    def instance_attribute_types(self, item: ClassType, attribute: str) -> Types:
        """`attribute` of one instance: built from what its constructor call passed, when known."""
        info = self.classes.by_name(item.name)
        if info is None:
            if item.name == torch_api.BARE_MODULE:
                return frozenset(dict(item.arguments).get(attribute, ()))
            return EMPTY
        if not item.arguments:
            return self.attribute_types(info, attribute, item.config)
        key = (item, attribute)
        cached = self._instance_attributes.get(key)
        if cached is not None:
            return cached
        self._instance_attributes[key] = EMPTY
        bound = {name: frozenset(types) for name, types in item.arguments}
        result = self._configured(info, item.config, lambda: self._assigned_types(info, attribute, bound))
        self._instance_attributes[key] = result
        return result

    def attribute_types(self, info: ClassInfo, attribute: str, config: Passed = ()) -> Types:
        """What `self.<attribute>` can hold; `config`: what the instance's constructor was passed
        (the literal `norm_cfg=dict(type='GN')` that chose its norm layer)."""
        saved = self._env
        if config and self.classes.find_method(info, "__init__") is not None:
            configured = (id(info.scope), attribute, config)
            cached = self._configured_attributes.get(configured)
            if cached is not None:
                return cached
            self._configured_attributes[configured] = EMPTY
            result = self._configured(info, config, lambda: self._assigned_types(info, attribute, None))
            self._configured_attributes[configured] = result
            return result
        key = (id(info.scope), attribute)
        cached = self._attribute_types.get(key)
        if cached is not None:
            return cached
        self._attribute_types[key] = EMPTY  # cycles: `self.a = self.a.b`
        self._env = {}  # an instance's attributes do not depend on the call being evaluated
        try:
            result = self._assigned_types(info, attribute, None)
        finally:
            self._env = saved
        self._attribute_types[key] = result
        return result

    def _configured(self, info: ClassInfo, config: Passed, evaluate: Callable[[], Types]) -> Types:
        """`evaluate()` with the constructor's choosing arguments (`config`) seen by `__init__`."""
        init = self.classes.find_method(info, "__init__")
        if not config or init is None:
            return evaluate()
        saved = self._env
        passed = dict(config)
        self._env = {id(init[1]): passed, id(init[0].scope): passed}
        try:
            return evaluate()
        finally:
            self._env = saved

    def _assigned_types(self, info: ClassInfo, attribute: str, bound: dict[str, Types] | None) -> Types:
        """What the class's methods assign, register or grow under `attribute`; `bound`: the
        `__init__` parameters one constructor call passed."""
        found: set[Type] = set()
        initialised = False  # the most derived class that sets it in __init__ overrides its bases
        for cls in self.classes.mro(info):
            sets_in_init = False
            for assignment in cls.attribute_assignments.get(attribute, ()):
                if assignment.value is None or assignment.augmented:
                    continue
                in_init = assignment.method.node.name in torch_api.INIT_LIKE_METHODS  # type: ignore[attr-defined]  # a method scope's node is a def
                sets_in_init = sets_in_init or in_init
                if in_init and initialised:
                    continue  # overridden by a subclass's __init__ (which runs after super().__init__())
                # a fresh depth budget: the result is memoised, so it must not depend on the caller's depth
                types = self.construction.value_types(self, assignment.value, cls.module, assignment.method, bound if in_init else None)
                found.update(types if assignment.unpack is None else unpacked_types(types, assignment.unpack))
            initialised = initialised or sets_in_init
            annotation = cls.class_level_annotations.get(attribute)
            if annotation is not None:
                found.update(self.annotation_types(annotation, cls.module, cls.scope))
                has_init = self.classes.find_method(info, "__init__") is not None
                found.update(field_keys(cls, attribute, has_init, self.qualified_name))  # `norm_layer: str = 'layernorm'`
            method = cls.method(attribute)
            if method is not None:
                found.add(self.function(cls.module, method, Value(frozenset({OUTER}), frozenset({self._receiver_type(info)}), path="self")))
        built = self.construction
        found.update(built.added_types(self, info, attribute, computed=False, bound=bound))  # `self.add_module("norm", m)`
        if not found:  # registered under a name computed at run time: it may be this one
            found.update(built.added_types(self, info, attribute, bound=bound))
        grown = built.grown_types(self, info, attribute, bound)  # `self.blocks.append(m)`, `self.heads[k] = m`
        if grown:
            kinds = {t.kind for t in found if isinstance(t, ContainerType)} or {torch_api.SEQUENCE}
            found.update(ContainerType(kind, grown) for kind in kinds)
        if attribute == "_modules":
            found.add(ContainerType(torch_api.MAPPING, built.children(self, info)))
        return frozenset(found)

    # -- functions ------------------------------------------------------------

    def function(self, module: ModuleSymbols, scope: Scope, receiver: Value | None = None, bound: Iterable[tuple[str, Value]] = ()) -> FunctionType:
        node = scope.node
        return FunctionType(id(node), display_name(scope), receiver, tuple(bound), node=node, module=module)

    def _returned_types(self, module: ModuleSymbols, scope: Scope) -> Types:
        """What a function returns, memoised (fresh depth budget, cycle sentinel)."""
        if self._env and self._env_key(scope):
            return self._returned_types_with(module, scope, ())
        key = id(scope)
        cached = self._return_types.get(key)
        if cached is not None:
            return cached
        self._return_types[key] = EMPTY
        result = self._returns_in(module, scope, {})  # nothing passed: no argument of an enclosing evaluation reaches it
        self._return_types[key] = result
        return result

    def _returns_in(self, module: ModuleSymbols, scope: Scope, env: dict[int, dict[str, Types]]) -> Types:
        """What the function's `return`s give, evaluated with the arguments `env` passes."""
        saved = self._env
        self._env = env
        try:
            found: set[Type] = set()
            for returned in self.return_expressions(scope):
                found.update(self.types(returned, module, scope))
        finally:
            self._env = saved
        return frozenset(found)

    def return_expressions(self, scope: Scope) -> list[ast.expr]:
        cached = self._returns.get(id(scope))
        if cached is None:
            cached = []
            node = scope.node
            if isinstance(node, ast.Lambda):
                cached.append(node.body)
            else:
                stack = list(getattr(node, "body", []))
                while stack:
                    current = stack.pop()
                    if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                        continue
                    if isinstance(current, ast.Return) and current.value is not None:
                        cached.append(current.value)
                    stack.extend(c for c in ast.iter_child_nodes(current) if isinstance(c, ast.stmt | ast.excepthandler | ast.match_case))
            self._returns[id(scope)] = cached
        return cached

    def self_class(self, module: ModuleSymbols, scope: Scope, name: str) -> ClassInfo | None:
        """The class when `name` is the `self` of the method `scope` is (or is nested in)."""
        current: Scope | None = scope
        while current is not None:
            owner = current.enclosing_class
            if owner is not None:
                if current.first_parameter() == name and not _is_static(current.node):
                    return self.classes.info(module, owner)
                return None
            if name in current.bindings and current is not scope:
                return None
            current = current.parent
        return None


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


def _is_bare_module(value: ast.expr | None, module: ModuleSymbols, scope: Scope) -> bool:
    if not (isinstance(value, ast.Call) and not value.args and not value.keywords):
        return False
    func = value.func
    if (func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else "") != "Module":
        return False
    return torch_api.torch_class(module.qualified_name(func, scope) or "") == "Module"


def pattern_matches(attribute: str, pattern: tuple[str, str]) -> bool:
    prefix, suffix = pattern
    return len(attribute) >= len(prefix) + len(suffix) and attribute.startswith(prefix) and attribute.endswith(suffix)


def display_name(scope: Scope) -> str:
    """`Block.forward`, `create_custom_forward.custom_forward`, `<lambda>`."""
    return scope.qualname.replace("<locals>.", "") or "<module>"


IMPLICIT_CLASS_METHODS = frozenset({"__init_subclass__", "__new__", "__class_getitem__"})


def _is_static(node: ast.AST) -> bool:
    """A static or class method: its first parameter is not an instance."""
    if getattr(node, "name", "") in IMPLICIT_CLASS_METHODS:
        return True
    return any(isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod") for d in getattr(node, "decorator_list", ()))


def _keyword_constant(call: ast.Call | None, name: str) -> object:
    if call is None:
        return None
    for keyword in call.keywords:
        if keyword.arg == name and isinstance(keyword.value, ast.Constant):
            return keyword.value.value
    return None


def _parameter_names(scope: Scope) -> set[str]:
    node = scope.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return set()
    return {a.arg for a in (*positional_parameters(node.args), *node.args.kwonlyargs)}


def _ancestor_ids(scope: Scope) -> set[int]:
    found = set()
    current = scope.parent
    while current is not None:
        found.add(id(current))
        current = current.parent
    return found


def _frozen_env(env: dict[int, dict[str, Types]]) -> tuple[object, ...]:
    return tuple(sorted((k, tuple(sorted(v.items()))) for k, v in env.items()))


def _reaching_binding(candidates: list[Binding], scope: Scope, use: ast.Name) -> Binding | None:
    """The binding of a name that reaches `use` when every binding is a statement of the
    function's own body (no branch or loop around it) or a parameter; None otherwise (then
    any of them may have run, and the caller keeps their union)."""
    node = scope.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    body = {id(statement) for statement in node.body}
    position = (use.lineno, use.col_offset)
    reaching: Binding | None = None
    reached_at: tuple[int, int] = (0, -1)
    for candidate in candidates:
        if candidate.kind == PARAM:
            at = (0, 0)
        elif id(candidate.node) in body and (candidate.kind in (ASSIGN, UNPACK, LOOP) or isinstance(candidate.node, ast.AugAssign)):
            statement = candidate.node
            if candidate.kind == LOOP:
                at = (statement.lineno, statement.col_offset)  # type: ignore[attr-defined]  # a body statement
                if at >= position:
                    continue
            else:
                end = (getattr(statement, "end_lineno", None) or 0, getattr(statement, "end_col_offset", None) or 0)
                if end > position:
                    continue  # bound after the use (or by the statement the use is part of)
                at = end
        else:
            return None
        if at >= reached_at:
            reaching, reached_at = candidate, at
    return reaching
