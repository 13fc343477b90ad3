"""What builders, registries and configurations choose to build: `getattr(nn, name)`,
`NORM_LAYERS.get(key)`, `MODELS.build(cfg)`, `build_norm_layer(dict(type='GN'), c)`, `Block(**ba)`.
A function that chooses by its arguments is evaluated with the arguments a call passes
(argument-dependent contexts, each memoised by its arguments; there is no budget of contexts per
function: a budget spent by the files a worker analysed before made a later file's call fall back
to the context-free result, so findings depended on the order of the run). A mixin of
`evaluator.TypeInference`, written against `protocol.TypeEvaluator`.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Iterable

from ckptlint.analysis.flow.dict_writes import DictWrites, dict_writes
from ckptlint.analysis.knowledge import torch_api
from ckptlint.analysis.semantics import registries
from ckptlint.analysis.semantics.factories import named_parameters, rest_keyword_sources
from ckptlint.analysis.semantics.protocol import EMPTY, Passed, TypeEvaluator
from ckptlint.analysis.semantics.values import (
    ClassObjectType,
    ClassType,
    ContainerType,
    KeyedType,
    TupleType,
    Type,
    Types,
    element_types,
)
from ckptlint.classes import ClassInfo
from ckptlint.symbols import (
    ASSIGN,
    COMPREHENSION,
    IMPORT,
    PARAM,
    ModuleSymbols,
    Scope,
    display_name,
    parameter_default,
    positional_parameters,
)


# how many evaluations of one function with arguments may be under way at once: a recursive
# function whose arguments change at each call (a prefix grown by concatenation) has no fixed point
MAX_ENV_RECURSION = 3


class ZooChoices(TypeEvaluator):
    """The evaluator's model-zoo construction: registries, config dicts and argument-dependent evaluation."""

    # the arguments each function scope is being evaluated with (`build_norm_layer(dict(type='GN'), c)`),
    # and memos keyed by them
    _env: dict[int, dict[str, Types]]
    _env_returns: dict[tuple[int, tuple[object, ...]], Types]
    _env_active: dict[int, int]  # function scope id -> evaluations with arguments under way
    _registrations: dict[int, list[tuple[str, str, str]]]
    _choosing: dict[int, frozenset[str]]
    _registering: dict[str, bool]
    _dict_writes: dict[int, DictWrites | None]  # by the name a call unpacks (`**ba`)

    def container_call(self, name: str, call: ast.Call, module: ModuleSymbols, scope: Scope, depth: int) -> Types:
        """`list(...)`, `dict(...)`: elements; `dict(type='BN')` and `dict(cfg)` also keep their keys."""
        kind = torch_api.PYTHON_CONTAINER_CALLS[name]
        elements: set[Type] = set()
        keyed: set[Type] = set()
        for argument in call.args:
            given = self.types(argument, module, scope, depth + 1)
            items = element_types(given)
            entries = [t for t in items if isinstance(t, TupleType) and len(t.positions) == 2] if kind == torch_api.MAPPING else []
            elements.update(frozenset().union(*(e.positions[1] for e in entries)) if entries else items)  # `OrderedDict([(name, m), ...])`: the values
            keyed.update(t for t in given if isinstance(t, KeyedType))
        if name == "builtins.dict" and call.keywords and not call.args:
            pairs = [(k.arg, self.types(k.value, module, scope, depth + 1)) for k in call.keywords if k.arg is not None]
            keyed.add(registries.keyed(pairs))
            elements.update(t for _, types in pairs for t in types)
        return frozenset({ContainerType(kind, frozenset(elements)), *keyed})

    def getattr_of_module(self, call: ast.Call, module: ModuleSymbols, scope: Scope, depth: int) -> Types | None:
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
            found.update(self.global_types(f"{prefix}.{name}", depth + 1))
        return frozenset(found)

    def choice_method(self, call: ast.Call, func: ast.Attribute, module: ModuleSymbols, scope: Scope, depth: int) -> Types | None:
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
            return registries.string_method_call(base, method, call.args, call.keywords)
        if base == registries.NONE_ONLY and method != "copy":
            return registries.NO_KEY  # `cfg.get('type')` on a config left None: that code does not run
        if not any(isinstance(t, KeyedType) for t in base):
            return None
        if method == "copy":
            return base
        if not call.args:
            return None
        key = self.types(call.args[0], module, scope, depth + 1)
        found = registries.lookup(base, key, self.builder(scope, func.value))
        if not found and any(isinstance(t, KeyedType) and not t.complete for t in base):
            return found  # a key the dict may have gained after it was built: neither entry nor default is known
        if len(call.args) > 1 and not registries.always_holds(base, key):
            found |= self.types(call.args[1], module, scope, depth + 1)  # the default, where the key may be missing
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
                module.note_import_read(imported)
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
                    cached = self.project.has_overlay(path) or any(f".{m}".encode() in self.project.file_bytes(path) for m in registries.REGISTER_METHODS)
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
            for target, key, registered in registries.call_registrations(module):
                registry = self.qualified_name(target, module, module.scope)
                class_name = self.qualified_name(registered, module, module.scope)
                if registry is not None and class_name is not None:
                    cached.append((registry, key, class_name))
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
        return bool(config) and init is not None and all(name in named_parameters(init[1].node) for name, _ in config)

    def builder(self, scope: Scope, mapping: ast.expr) -> str:
        return registries.builder_name(display_name(scope), ast.unparse(mapping))

    def configured_instance(
        self, class_name: str, call: ast.Call | None, module: ModuleSymbols, scope: Scope, depth: int, built_by: str = ""
    ) -> ClassType:
        """An instance, with the constructor arguments that choose what it builds (its `config`)."""
        item = self.instance(class_name, call)
        info = self.classes.by_name(class_name) if call is not None else None
        init = self.classes.find_method(info, "__init__") if info is not None else None
        config = self.passed(init[0].module, init[1], True, call, module, scope, depth) if init is not None else ()
        return replace(item, config=config, built_by=built_by) if config or built_by else item

    def merged_instances(self, info: ClassInfo) -> int:
        """How many differently configured instances of the class the project builds (its
        constructions' choosing arguments, one set per instance); the analysis of a method's
        `self` merges them, so more than one is said (`calls --unresolved`: instances merged)."""
        configs = {self.configured_instance(info.qualified_name, call, at, scope, 0).config for call, scope, at in self.construction.construction_calls(self, info)}
        return len(configs)

    def built_instance(self, class_name: str, call: ast.Call, module: ModuleSymbols, scope: Scope) -> ClassType:
        """The instance a call the code shows builds, with every choosing parameter it leaves out at
        its default (`Net(8)` has `use_checkpoint=False`): what that one object was built with."""
        item = self.configured_instance(class_name, call, module, scope, 0)
        info = self.classes.by_name(class_name)
        found = self.classes.find_method(info, "__init__") if info is not None else None
        if found is None or any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
            return item
        owner, init = found
        node = init.node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return item
        given = {a.arg for a in positional_parameters(node.args)[1 : 1 + len(call.args)]} | {k.arg for k in call.keywords if k.arg}
        config = dict(item.config)
        for name in self._choice_defaults(owner.module, init) - given - config.keys():
            binding = next((b for b in init.bindings.get(name, ()) if b.kind == PARAM), None)
            default = parameter_default(binding) if binding is not None else None
            if default is not None:
                config[name] = registries.choices(self.types(default, owner.module, init.parent or init))
        return replace(item, config=tuple(sorted(config.items()))) if config else item

    def passed(
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
        given: list[tuple[str, Types]] = []
        for name, argument in zip(params, call.args):
            if isinstance(argument, ast.Starred):
                break
            given.append((name, self.types(argument, module, scope, depth + 1)))
        named = {*params, *keyword_only}
        given += [(k.arg, self.types(k.value, module, scope, depth + 1)) for k in call.keywords if k.arg in named]
        for name, (types, may_miss) in self.unpacked_keywords(call, module, scope, depth, named).items():
            binding = next((b for b in callee_scope.bindings.get(name, ()) if b.kind == PARAM), None)
            if binding is not None:  # `Block(**ba)`: a key the call may miss may leave the default
                default = parameter_default(binding) if may_miss else None
                given.append((name, types | self.types(default, callee_module, callee_scope.parent or callee_scope, depth + 1)))
        passed: dict[str, Types] = {}
        for name, types in given:
            objects = self.config_objects(types)  # `build_module(spec, dim)`: a config object chooses what is built
            if name in choosing or registries.is_choice(types, passed=True) or objects:
                passed[name] = registries.choices(types) | objects
        return tuple(sorted(passed.items()))

    def returned_for(self, module: ModuleSymbols, scope: Scope, passed: Passed) -> Types:
        """What the function returns with the choosing arguments `passed`, one combination at a time."""
        if not passed:
            return self.returned_types(module, scope)
        return frozenset().union(*(self.returned_types_with(module, scope, each) for each in registries.case_split(passed)))

    def module_arguments(
        self, callee_scope: Scope, has_receiver: bool, call: ast.Call | None, module: ModuleSymbols, scope: Scope, depth: int
    ) -> Passed:
        """The modules a call passes to a function whose return says nothing without them (`_get_clones(layer,
        n)` returning `nn.ModuleList([copy.deepcopy(module) for _ in range(n)])`): each parameter given a module."""
        node = callee_scope.node
        if call is None or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return ()
        params = [a.arg for a in positional_parameters(node.args)][1 if has_receiver else 0 :]
        given = [(name, argument) for name, argument in zip(params, call.args)] + [(k.arg, k.value) for k in call.keywords if k.arg in params]
        found: dict[str, Types] = {}
        for name, argument in given:
            if isinstance(argument, ast.Starred):
                break
            modules = frozenset(t for t in self.types(argument, module, scope, depth + 1) if self.construction.is_module(t))
            if modules:
                found[name] = modules
        return tuple(sorted(found.items(), key=lambda item: item[0]))

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
            if key not in self._dict_writes:  # `[block(**ba) for _ in ...]`: the dict is the function's
                self._dict_writes[key] = dict_writes(module, _function_scope(scope), keyword.value)
            writes = self._dict_writes[key]
            if writes is None:
                continue
            values = {k: self.elements_types(v, module, scope, depth) for k, v in writes.values.items() if k in wanted}
            sure, opaque = set(writes.sure), writes.opaque
            for mapping, on_every_path, start in writes.merged:  # `ba.update(self.dd)`: the keys its type knows
                keyed = [t for t in self.types(mapping, module, scope, depth + 1) if isinstance(t, KeyedType)]
                passed = rest_keyword_sources(mapping, sorted(wanted), module, scope) if not keyed else None
                for k, (sources, every_caller) in (passed or {}).items():  # `dict(d=d, **kwargs)`: what the function's callers pass
                    values[k] = values.get(k, EMPTY) | frozenset().union(*(self.types(e, module, s, depth + 1) for e, s in sources))
                    if every_caller and on_every_path:
                        sure.add(k)
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

    def returned_types_with(self, module: ModuleSymbols, scope: Scope, passed: Passed) -> Types:
        """What a function returns when called with `passed` (and inside the evaluations that enclose it)."""
        outer = {k: v for k, v in self._env.items() if k in _ancestor_ids(scope)}
        if passed:
            outer[id(scope)] = dict(passed)
        env_key = _frozen_env(outer)
        key = (id(scope), env_key)
        cached = self._env_returns.get(key)
        if cached is not None:
            return cached
        active = self._env_active.get(id(scope), 0)
        if active >= MAX_ENV_RECURSION:  # a function that calls itself with other arguments each time
            return EMPTY
        self._env_returns[key] = EMPTY
        self._env_active[id(scope)] = active + 1
        try:
            result = self.returns_in(module, scope, outer)
        finally:
            self._env_active[id(scope)] = active
        self._env_returns[key] = result
        return result

    def env_key(self, scope: Scope) -> tuple[object, ...]:
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

    def receiver_type(self, info: ClassInfo) -> ClassType:
        """`self` in a method: configured like the instance being evaluated, if it is."""
        passed = self._env.get(id(info.scope)) if self._env else None
        return ClassType(info.qualified_name, config=tuple(sorted(passed.items()))) if passed else ClassType(info.qualified_name)




def holds_no_module(types: Types) -> bool:
    """Nothing, or only torch containers with no known element (`nn.ModuleList([module ...])` of an
    unknown `module`): a return that says what it builds only with its call's arguments."""
    return all(
        (isinstance(t, ContainerType) and not t.elements) or (isinstance(t, ClassType) and torch_api.short_name(t.name) in torch_api.TORCH_CONTAINERS)
        for t in types
    )


def _function_scope(scope: Scope) -> Scope:
    """The function a comprehension's code runs in (its own scope holds only its loop variables)."""
    while scope.kind == COMPREHENSION and scope.parent is not None:
        scope = scope.parent
    return scope


def _ancestor_ids(scope: Scope) -> set[int]:
    found = set()
    current = scope.parent
    while current is not None:
        found.add(id(current))
        current = current.parent
    return found


def _frozen_env(env: dict[int, dict[str, Types]]) -> tuple[object, ...]:
    return tuple(sorted((k, tuple(sorted(v.items()))) for k, v in env.items()))
