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

from ckptlint.analysis.flow.statements import StatementIndex
from ckptlint.analysis.knowledge import torch_api
from ckptlint.analysis.semantics import registries
from ckptlint.analysis.semantics.autograd_functions import APPLY, applied_forward
from ckptlint.analysis.semantics.config_fields import field_keys
from ckptlint.analysis.semantics.config_objects import SELF, ConfigObjects
from ckptlint.analysis.semantics.constant_calls import ConstantCalls
from ckptlint.analysis.semantics.instance_flags import InstanceFlags
from ckptlint.analysis.semantics.known_truth import none_test_types
from ckptlint.analysis.semantics.module_structure import ModuleStructure, is_bare_module
from ckptlint.analysis.semantics.modules import ModuleConstruction
from ckptlint.analysis.semantics.modules_beside import ModulesBeside
from ckptlint.analysis.semantics.protocol import EMPTY, Passed
from ckptlint.analysis.semantics.reaching import ReachingBindings, within
from ckptlint.analysis.semantics.run_arguments import RunArguments
from ckptlint.analysis.semantics.values import (
    FALSE_TYPE,
    OUTER,
    TRUE_TYPE,
    ClassObjectType,
    ClassType,
    ContainerType,
    FunctionType,
    KeyedType,
    TupleType,
    Type,
    Types,
    Value,
    constructed_rng,
    element_types,
    short_circuit,
    unpacked_types,
)
from ckptlint.analysis.semantics.zoo import ZooChoices, holds_no_module
from ckptlint.classes import ClassIndex, ClassInfo
from ckptlint.passed_arguments import passed_arguments
from ckptlint.project import Project
from ckptlint.symbols import (
    ASSIGN,
    CLASS,
    CLASSDEF,
    DEF,
    IMPORT,
    LOOP,
    OTHER,
    PARAM,
    UNPACK,
    Binding,
    ModuleSymbols,
    Scope,
    display_name,
    parameter_default,
    positional_parameters,
)
from ckptlint.versions import NO_VERSIONS, Versions

MAX_DEPTH = 24


class TypeInference(ModuleStructure, ZooChoices, ReachingBindings, ConfigObjects, InstanceFlags, RunArguments, ConstantCalls):
    """Types of expressions across the project; `module_structure.py` and `zoo.py` are its plugins."""

    def __init__(self, project: Project, classes: ClassIndex, versions: Versions = NO_VERSIONS):
        self.project = project
        self.classes = classes
        self.versions = versions  # what the interpreter decides version tests by (semantics/version_tests.py)
        self._attribute_types: dict[tuple[int, str], Types] = {}
        self._returns: dict[int, list[ast.expr]] = {}
        self._return_types: dict[int, Types] = {}
        self._binding_types: dict[int, Types] = {}
        self._growth = {}
        self._instance_attributes: dict[tuple[ClassType, str], Types] = {}
        self._writes = {}
        self.construction = ModuleConstruction(classes, ModulesBeside(project))
        self._dynamic_lookups = set()  # `getattr(self, name)` lookups in progress
        # argument-dependent evaluation (`build_norm_layer(dict(type='GN'), c)`, `make_layer(Block, 3)`):
        # the arguments each function scope is being evaluated with, and memos keyed by them
        self._env = {}
        self._env_binding_types: dict[tuple[int, tuple[object, ...]], Types] = {}
        self._env_returns = {}
        self._env_active = {}
        self._configured_attributes: dict[tuple[int, str, Passed], Types] = {}
        self._outside_stores: dict[tuple[int, str], bool] = {}  # (module id, attribute): set on other objects there
        self._registrations = {}
        self._choosing = {}
        self._fields = {}
        self._argument_defaults = {}  # (package, dest) -> the command line's default
        self._package_files_found = {}
        self._registering = {}
        self._dict_writes = {}  # by the name a call unpacks (`**ba`)
        self._statement_indexes: dict[int, StatementIndex] = {}  # by function scope
        self._dead: dict[int, tuple[dict[str, Types], list[tuple[int, int]]]] = {}  # by function scope: (its arguments, dead lines)
        self._folds = {}  # calls folded from constants, by function and argument values
        self._changed = {}  # names a function changes in place (constant_calls.py)
        self._passing = {}  # what a module's calls pass a function's parameter (constant_calls.py)

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
            if expr.value is None:
                return registries.NONE_ONLY
            if isinstance(expr.value, bool):
                return frozenset({TRUE_TYPE if expr.value else FALSE_TYPE})
            return registries.literal(expr.value)
        if isinstance(expr, ast.Subscript):
            base = self.types(expr.value, module, scope, depth + 1)
            if isinstance(expr.slice, ast.Slice):
                return base
            if any(isinstance(t, KeyedType) for t in base):  # `NORM_LAYERS[cfg['type']]`
                key = self.types(expr.slice, module, scope, depth + 1)
                return registries.lookup(base, key, self.builder(scope, expr.value))
            return element_types(base)
        if isinstance(expr, ast.Tuple) and not any(isinstance(e, ast.Starred) for e in expr.elts):
            positions = tuple(self.types(e, module, scope, depth + 1) for e in expr.elts)
            return frozenset({TupleType(positions), ContainerType(torch_api.SEQUENCE, frozenset().union(*positions))})
        if isinstance(expr, (ast.List, ast.Tuple, ast.Set)):
            return frozenset({ContainerType(torch_api.SEQUENCE, self.elements_types(expr.elts, module, scope, depth))})
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
            outcome = self.decided_test(module, scope, expr.test)
            body = self.types(expr.body, module, scope, depth + 1) if outcome is not False else EMPTY
            return body | (self.types(expr.orelse, module, scope, depth + 1) if outcome is not True else EMPTY)
        if isinstance(expr, ast.BoolOp):
            return short_circuit(isinstance(expr.op, ast.Or), [self.types(v, module, scope, depth + 1) for v in expr.values])
        if isinstance(expr, ast.Lambda):
            return frozenset({self.function(module, module.scope_of[id(expr)])})
        if isinstance(expr, ast.Starred):
            return element_types(self.types(expr.value, module, scope, depth + 1))
        if isinstance(expr, ast.NamedExpr):
            return self.types(expr.value, module, scope, depth + 1)
        if isinstance(expr, ast.Compare):  # `norm_cfg is not None`: a flag, when the operand's types say
            return none_test_types(expr, lambda operand: self.types(operand, module, scope, depth + 1))
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):  # `abbr + str(postfix)`: a name to register under
            return registries.concatenated([self.types(side, module, scope, depth + 1) for side in (expr.left, expr.right)])
        if isinstance(expr, ast.JoinedStr):
            return registries.concatenated([self.types(v.value if isinstance(v, ast.FormattedValue) else v, module, scope, depth + 1) for v in expr.values])
        return EMPTY

    def elements_types(self, elements: Iterable[ast.expr], module: ModuleSymbols, scope: Scope, depth: int) -> Types:
        found: set[Type] = set()
        for element in elements:
            found.update(self.types(element, module, scope, depth + 1))
        return frozenset(found)

    def _call_types(self, call: ast.Call, module: ModuleSymbols, scope: Scope, depth: int) -> Types:
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in registries.ALL_METHODS:
            chosen = self.choice_method(call, func, module, scope, depth)
            if chosen is not None:
                return chosen
        name = self.qualified_name(call.func, module, scope)
        if name is not None:
            known = self._library_call(name, call, module, scope, depth)
            if known is not None:
                return known
        if isinstance(call.func, ast.Attribute):
            known = self.module_method(call, call.func, module, scope, depth)
            if known is not None:
                return known
        results: set[Type] = set()
        for callee in self.types(call.func, module, scope, depth + 1):
            results.update(self.call_result(callee, call, module, scope, depth + 1))
        return frozenset(results)

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
            folded = self.folded_call(callee_module, callee_scope, call, module, scope) if call is not None and callee.receiver is None else None
            if folded is not None:  # `decode_arch_def(arch_def)`: the dicts its strings decode to
                return folded
            bound = self._bind_call_types(callee_scope, call, module, scope, depth)
            passed = self.passed(callee_module, callee_scope, callee.receiver is not None, call, module, scope, depth)
            objects = self.config_objects(callee.receiver.types) if callee.receiver is not None else EMPTY
            if objects:  # a method of a config object: `self` is that object
                passed = tuple(sorted({**dict(passed), SELF: objects}.items()))
            returned = self.returned_for(callee_module, callee_scope, passed)
            if holds_no_module(returned) and (modules := self.module_arguments(callee_scope, callee.receiver is not None, call, module, scope, depth)):
                returned = self.returned_for(callee_module, callee_scope, tuple(sorted({**dict(passed), **dict(modules)}.items())))  # `_get_clones(layer, n)`
            found: set[Type] = set(self._passed_through(callee_scope, callee.receiver is not None, call, module, scope, depth))
            for item in returned:
                if isinstance(item, FunctionType) and bound and item.node is not None:
                    # a closure factory: the inner function sees the factory's arguments
                    item = replace(item, bound=item.bound + bound)
                found.add(item)
            return frozenset(found)
        return EMPTY

    def _passed_through(self, callee_scope: Scope, has_receiver: bool, call: ast.Call | None, module: ModuleSymbols, scope: Scope, depth: int) -> Types:
        """What a function that returns a parameter unchanged (`not_none(value)`, a typed
        `apply_module(m)`, a cast) gives back of this call's argument for it."""
        node = callee_scope.node
        if call is None or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return EMPTY
        params = [a.arg for a in positional_parameters(node.args)][1 if has_receiver else 0 :]
        returned = {e.id for e in self.return_expressions(callee_scope) if isinstance(e, ast.Name)}
        found: set[Type] = set()
        for index, name in enumerate(params):
            if name not in returned or any(isinstance(a, ast.Starred) for a in call.args[: index + 1]):
                continue
            argument = call.args[index] if index < len(call.args) else next((k.value for k in call.keywords if k.arg == name), None)
            if argument is not None:
                found.update(self.types(argument, module, scope, depth + 1))
        return frozenset(found)

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
            named = self.getattr_of_module(call, module, scope, depth)  # `getattr(nn, 'LayerNorm')`
            if named is not None:
                return named
            base = self.types(call.args[0], module, scope, depth + 1)
            attribute = call.args[1]
            if isinstance(attribute, ast.Constant) and isinstance(attribute.value, str):
                return self.member_types(base, attribute.value)
            names = registries.keys(self.types(attribute, module, scope, depth + 1))
            if names is not None:  # `getattr(self, self.norm1_name)` with the name `build_norm_layer` gave
                return frozenset().union(*(self.member_types(base, n) for n in sorted(names)))
            return self.dynamic_attribute_types(base, attribute)
        if name == "builtins.str" and len(call.args) == 1:
            return registries.concatenated([self.types(call.args[0], module, scope, depth + 1)])
        if name in torch_api.PYTHON_CONTAINER_CALLS:
            return self.container_call(name, call, module, scope, depth)
        if name in ("copy.copy", "copy.deepcopy", "dataclasses.replace") and call.args:  # `replace(cfg, **kwargs)`: a config of the same class
            return self.types(call.args[0], module, scope, depth + 1)
        if name == "builtins.zip" and call.args and not any(isinstance(a, ast.Starred) for a in call.args):  # pairs, unpacked by position
            positions = tuple(element_types(self.types(a, module, scope, depth + 1)) for a in call.args)
            return frozenset({ContainerType(torch_api.SEQUENCE, frozenset({TupleType(positions)}))})
        if name in ("builtins.enumerate", "builtins.reversed", "builtins.iter", "builtins.sorted"):
            return frozenset({ContainerType(torch_api.SEQUENCE, self._elements_of_arguments(call, module, scope, depth))})
        if name == "builtins.next" and call.args:  # `next(mamba_layers)` over `iter([...])`
            return element_types(self.types(call.args[0], module, scope, depth + 1))
        if name == "itertools.repeat" and call.args:  # `tuple(repeat(block, n))`
            return frozenset({ContainerType(torch_api.SEQUENCE, self.types(call.args[0], module, scope, depth + 1))})
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
            item = self.configured_instance(class_name, call, module, scope, depth, built_by)
        else:
            item = replace(self.instance(class_name, call), built_by=built_by)
        info = self.classes.by_name(class_name)
        if info is None:
            return frozenset({item})
        if call is not None and module is not None and scope is not None and depth <= MAX_DEPTH:
            arguments = self.construction.arguments(self, info, call, module, scope, depth)
            if arguments:
                item = replace(item, arguments=arguments)
            elif self.config_fields(info) is not None:  # `BlockConfig(norm="ln")`: the fields it was given
                item = self.config_object(item, info, call, module, scope, depth)
        view = self.construction.container_view(self, item, call, module, scope, depth)
        return frozenset({item} if view is None else {item, view})

    def instance(self, class_name: str, call: ast.Call | None) -> ClassType:
        """An instance of the class, noting whether it is a norm that updates running statistics."""
        return ClassType(class_name, self.has_running_stats(class_name, call))

    # -- names ----------------------------------------------------------------

    def qualified_name(self, expr: ast.expr, module: ModuleSymbols, scope: Scope) -> str | None:
        name = module.qualified_name(expr, scope)
        return None if name is None else self.project.canonical_name(name)

    def _name_types(self, expr: ast.Name, module: ModuleSymbols, scope: Scope, depth: int) -> Types:
        receiver = self.self_class(module, scope, expr.id)
        if receiver is not None:
            method = module.binding(scope, expr.id)
            given = self.receiver_in_env(method.scope) if method is not None else None
            if given:  # `cfg.build()`: the config object it is called on
                return given
            item = self.receiver_type(receiver)
            view = self.construction.container_view(self, item, None, None, None, depth)
            return frozenset({item} if view is None else {item, view})
        binding = module.binding(scope, expr.id, expr.lineno)
        if binding is None:
            star = module.star_target(expr.id)
            return self.global_types(star, depth + 1) if star else EMPTY
        if binding.scope.kind == "module" or binding.kind in (IMPORT, CLASSDEF, DEF):
            return self.binding_types(module, binding, depth + 1)
        # inside a function, any of its assignments that reach the use may be the one that ran
        candidates = binding.scope.bindings.get(expr.id, [binding])
        if len(candidates) > 1 and binding.scope is scope:
            candidates = self.reaching_bindings(module, scope, candidates, expr)
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
            env_key = self.env_key(binding.scope)
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
            return self.global_types(binding.target, depth)
        if binding.kind in (ASSIGN, OTHER):
            found = set(self.types(binding.value, module, scope, depth + 1)) if binding.kind == ASSIGN else set()
            grown = self.grown_elements(module, binding.scope, binding.name, depth)
            if grown is not None:  # a list or module container built up with append/extend/+=/[k] =
                kinds = {t.kind for t in found if isinstance(t, ContainerType)} or {torch_api.SEQUENCE}
                found = {t for t in found if not isinstance(t, ContainerType)}
                found.update(ContainerType(kind, grown) for kind in kinds)
            if binding.kind == ASSIGN and is_bare_module(binding.value, module, scope):  # `m = nn.Module(); m.bn = ...`
                found = {self.bare_module(module, binding.scope, binding.name, depth)}
            elif any(isinstance(t, KeyedType) for t in found) and self._changed_in_place(binding.scope, binding.name):
                found = set(registries.changed_later(frozenset(found)))  # `args = dict(...)`, then `args['k'] = v`
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

    def global_types(self, qualified_name: str, depth: int) -> Types:
        canonical = self.project.canonical_name(qualified_name)
        found = self.project.global_binding(canonical)
        if found is not None:
            other, binding = found
            return self.binding_types(other, binding, depth + 1)
        if torch_api.torch_class(canonical) and torch_api.short_name(canonical)[:1].isupper():
            return frozenset({ClassObjectType(canonical)})
        return EMPTY

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
        if not found and default is None and _is_helper_method(binding.scope):
            # `self.get_layers(blocks, linear_layers, iter(mamba_layers))`: what the module's calls pass
            for argument, call_scope in passed_arguments(module, binding.scope, binding.name):
                found.update(self.types(argument, module, call_scope, depth + 1))
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
            if outer.rpartition(".")[2] in SEQUENCE_ANNOTATIONS:  # `Tuple[Type[BasicBlock], ...]`: a sequence of those
                parts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
                elements = frozenset().union(*(self.annotation_types(p, module, scope, depth + 1) for p in parts))
                return frozenset({ContainerType(torch_api.SEQUENCE, elements)}) if elements else EMPTY
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
            elif isinstance(base, ClassObjectType) and expr.attr == APPLY:  # `reduce = _Reduce.apply`
                forward = applied_forward(self.classes, base.name)
                if forward is not None:
                    found.add(forward)
        if found:
            return frozenset(found)
        name = self.qualified_name(expr, module, scope)
        if name is not None:
            return self.global_types(name, depth + 1)
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
        field = self.config_field_types(item, info, attribute)
        if field is not None:
            return field
        key = (item, attribute)
        cached = self._instance_attributes.get(key)
        if cached is not None:
            return cached
        self._instance_attributes[key] = EMPTY
        result = self.as_configured(item, lambda bound: self._assigned_types(info, attribute, bound))
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

    def as_configured(self, item: ClassType, evaluate: Callable[[dict[str, Types] | None], Types]) -> Types:
        """`evaluate(bound)` as the instance was built: its constructor's arguments (`bound`) and
        choosing arguments (its config, seen by `__init__`) in force."""
        info = self.classes.by_name(item.name)
        if info is None:
            return evaluate(None)
        bound = {name: frozenset(types) for name, types in item.arguments} or None
        return self._configured(info, item.config, lambda: evaluate(bound))

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
                if in_init and within(assignment.node.lineno, self._dead_lines(cls.module, assignment.method)):
                    continue  # `else: self.conv_s2d = None` when the configuration passes `s2d=1`
                sets_in_init = sets_in_init or in_init
                if in_init and initialised:
                    continue  # overridden by a subclass's __init__ (which runs after super().__init__())
                # a fresh depth budget: the result is memoised, so it must not depend on the caller's depth
                types = self.assigned_value_types(cls.module, assignment.method, attribute, assignment.value, bound if in_init else None)
                found.update(types if assignment.unpack is None else unpacked_types(types, assignment.unpack))
            initialised = initialised or sets_in_init
            annotation = cls.class_level_annotations.get(attribute)
            if annotation is not None:
                found.update(self.annotation_types(annotation, cls.module, cls.scope))
                has_init = self.classes.find_method(info, "__init__") is not None
                found.update(field_keys(cls, attribute, has_init, self.qualified_name))  # `norm_layer: str = 'layernorm'`
                default = cls.class_level_defaults.get(attribute)
                if default is not None and not has_init:  # a dataclass field naming a class: `router: RouterBuilder = TopKRouter`
                    found.update(t for t in self.types(default, cls.module, cls.scope) if isinstance(t, (ClassObjectType, FunctionType)))
            method = cls.method(attribute)
            if method is not None and is_property(method.node):  # `@property def norm1(self): return getattr(self, self.norm1_name)`
                found.update(self.returned_types(cls.module, method))
            elif method is not None:
                found.add(self.function(cls.module, method, Value(frozenset({OUTER}), frozenset({self.receiver_type(info)}), path="self")))
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

    def returned_types(self, module: ModuleSymbols, scope: Scope) -> Types:
        """What a function returns, memoised (fresh depth budget, cycle sentinel)."""
        if self._env and self.env_key(scope):
            return self.returned_types_with(module, scope, ())
        key = id(scope)
        cached = self._return_types.get(key)
        if cached is not None:
            return cached
        self._return_types[key] = EMPTY
        result = self.returns_in(module, scope, {})  # nothing passed: no argument of an enclosing evaluation reaches it
        self._return_types[key] = result
        return result

    def returns_in(self, module: ModuleSymbols, scope: Scope, env: dict[int, dict[str, Types]]) -> Types:
        """What the function's `return`s give, evaluated with the arguments `env` passes."""
        saved = self._env
        self._env = env
        try:
            found: set[Type] = set()
            for returned in self._reachable_returns(module, scope, env):
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


def _is_helper_method(scope: Scope) -> bool:
    """A method other than `__init__` and `forward` (`get_layers`, `_make_stage`): a builder the
    class calls itself, whose parameters hold what those calls pass."""
    parent = scope.parent
    name = getattr(scope.node, "name", "")
    return parent is not None and parent.kind == CLASS and name not in ("__init__", "forward") and not name.startswith("__")


# annotations of sequences whose elements the subscript names (`Tuple[Type[Block], ...]`)
SEQUENCE_ANNOTATIONS = frozenset({"Tuple", "tuple", "List", "list", "Sequence", "Iterable", "MutableSequence"})


IMPLICIT_CLASS_METHODS = frozenset({"__init_subclass__", "__new__", "__class_getitem__"})


def _is_static(node: ast.AST) -> bool:
    """A static or class method: its first parameter is not an instance."""
    if getattr(node, "name", "") in IMPLICIT_CLASS_METHODS:
        return True
    return any(isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod") for d in getattr(node, "decorator_list", ()))


def is_property(node: ast.AST) -> bool:
    """A method read as an attribute: `@property`, `@functools.cached_property`."""
    decorators = getattr(node, "decorator_list", ())
    return any((d.id if isinstance(d, ast.Name) else d.attr if isinstance(d, ast.Attribute) else "") in ("property", "cached_property") for d in decorators)

