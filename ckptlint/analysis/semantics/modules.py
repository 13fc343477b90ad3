"""How model code builds its modules beyond `self.x = Block()`, so regions reach them.

Zoos register submodules by computed name (`self.add_module(f"layer{i}", m)`, `setattr`),
grow containers in loops (`self.blocks.append(m)`, `self.heads[k] = m`), subclass
`nn.Sequential`, iterate `self.children()`, and pass modules in as constructor arguments
(`Block(norm=nn.BatchNorm2d(c))`). `ModuleConstruction` answers, per class and memoised,
what those constructions can hold. Where a name or a site is unknown it over-approximates:
every module the class registers, every argument its sites in the defining module pass.

It holds no reference to the evaluator it serves (each method is given it): the
analysis runs with the cyclic garbage collector off.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Iterator

from ckptlint.analysis.knowledge import torch_api
from ckptlint.analysis.semantics.factories import forwarded_class_parameter, keyword_sources, named_parameters
from ckptlint.analysis.semantics.known_truth import none_test_types, number_constant
from ckptlint.analysis.semantics.modules_beside import ModulesBeside
from ckptlint.analysis.semantics.values import (
    FALSE_TYPE,
    NONE_TYPE,
    TRUE_TYPE,
    ClassObjectType,
    ClassType,
    ContainerType,
    FunctionType,
    Type,
    Types,
    element_types,
    number_of,
    ordered,
    short_circuit,
)
from ckptlint.classes import ClassIndex, ClassInfo
from ckptlint.passed_arguments import calls_of, parameter_position, passed_argument
from ckptlint.symbols import ASSIGN, CLASS, PARAM, Binding, ModuleSymbols, Scope, positional_parameters
from ckptlint.syntax import walk

if TYPE_CHECKING:
    from ckptlint.analysis.semantics.protocol import TypeEvaluator

EMPTY: Types = frozenset()
Arguments = tuple[tuple[str, tuple[Type, ...]], ...]
Pattern = tuple[str, str] | str  # a literal name, or the (prefix, suffix) an f-string or variable name can have


class ModuleConstruction:
    def __init__(self, classes: ClassIndex, beside: ModulesBeside):
        self.classes = classes
        self.beside = beside  # a class's module and those beside it that use it
        self._is_module: dict[int, bool] = {}  # by class scope id
        self._container_kind: dict[int, str | None] = {}
        self._children: dict[int, Types] = {}
        self._descendants: dict[int, Types] = {}
        self._feeding: dict[int, tuple[str, ...]] = {}
        self._sites: dict[int, list[tuple[ast.Call, Scope, bool, ModuleSymbols]]] = {}  # init node id -> (call, scope, passes self, its module)
        self._beside_sites: dict[int, list[tuple[ast.Call, Scope, bool, ModuleSymbols]]] = {}  # class scope id -> those in the modules beside it
        self._factories: dict[int, list[tuple[ast.Call, Scope, ModuleSymbols, frozenset[str]]]] = {}  # class scope id -> factory calls handed it
        self._spellings: dict[int, _SpellingIndex] = {}  # by module id

    # -- what kind of object ------------------------------------------------------

    def is_module(self, item: Type) -> bool:
        """An `nn.Module` (or a container of them), as far as the project can tell."""
        if isinstance(item, ContainerType):
            return True
        if not isinstance(item, ClassType):
            return False
        if torch_api.torch_class(item.name) is not None:
            return True
        info = self.classes.by_name(item.name)
        return info is not None and self.is_module_class(info)

    def is_module_class(self, info: ClassInfo) -> bool:
        """Derives from something outside the project that is not a plain-object base."""
        key = id(info.scope)
        found = self._is_module.get(key)
        if found is None:
            found = self._is_module[key] = any(
                isinstance(a, str) and not a.startswith(torch_api.NON_MODULE_BASE_PREFIXES) for a in self.classes.ancestors(info)
            )
        return found

    def container_kind(self, info: ClassInfo) -> str | None:
        """SEQUENTIAL for an `nn.Sequential` subclass without a forward of its own (calling it runs
        every registered module), SEQUENCE / MAPPING for other torch container subclasses."""
        key = id(info.scope)
        if key not in self._container_kind:
            kind = next((torch_api.TORCH_CONTAINER_BASES[a] for a in self.classes.ancestors(info) if isinstance(a, str) and a in torch_api.TORCH_CONTAINER_BASES), None)
            if kind == torch_api.SEQUENTIAL and self.classes.find_method(info, "forward") is not None:
                kind = torch_api.SEQUENCE  # its own forward decides what runs; iterating it still gives the modules
            self._container_kind[key] = kind
        return self._container_kind[key]

    # -- registered submodules ------------------------------------------------------

    def added_types(
        self, inference: TypeEvaluator, info: ClassInfo, name: Pattern | None, computed: bool = True, bound: dict[str, Types] | None = None
    ) -> Types:
        """Modules the class registers with `add_module`/`register_module`/`setattr` under a name
        that may be `name` (None: any name); `computed=False` leaves out those registered under
        a variable, whose name could be anything."""
        found: set[Type] = set()
        for cls in self.classes.mro(info):
            for added in cls.added_modules:
                pattern = name_pattern(added.name)
                if not computed and pattern == ("", ""):
                    continue
                if name is None or patterns_meet(pattern, name):
                    found.update(self.value_types(inference, added.value, cls.module, added.method, bound))
        return frozenset(found)

    def grown_types(self, inference: TypeEvaluator, info: ClassInfo, attribute: str, bound: dict[str, Types] | None = None) -> Types:
        """Elements the class's methods add to container attribute `attribute` (`""`: to `self`)."""
        found: set[Type] = set()
        for cls in self.classes.mro(info):
            for growth in cls.container_growth.get(attribute, ()):
                types = self.value_types(inference, growth.value, cls.module, growth.method, bound)
                found.update(element_types(types) if growth.collection else types)
        return frozenset(found)

    def children(self, inference: TypeEvaluator, info: ClassInfo) -> Types:
        """`self.children()`: every module-typed attribute, registered module and container element."""
        key = id(info.scope)
        cached = self._children.get(key)
        if cached is not None:
            return cached
        self._children[key] = EMPTY  # cycles: a child whose construction asks for its parent's children
        attributes: set[str] = set()
        for cls in self.classes.mro(info):
            attributes.update(a for a, assigned in cls.attribute_assignments.items() if any(x.value is not None for x in assigned))
            attributes.update(cls.class_level_annotations)
        found: set[Type] = set()
        for attribute in sorted(attributes):
            found.update(t for t in inference.attribute_types(info, attribute) if self.is_module(t) and not isinstance(t, FunctionType))
        found.update(self.added_types(inference, info, None))
        if self.container_kind(info) is not None:
            found.update(self.initial_elements(inference, info))
            found.update(self.grown_types(inference, info, ""))
        result = frozenset(found)
        self._children[key] = result
        return result

    def descendants(self, inference: TypeEvaluator, types: Types) -> Types:
        """`modules()` without the module itself: children, recursively (each class once)."""
        found: set[Type] = set()
        for item in types:
            if isinstance(item, ContainerType):
                found.update(item.elements)
                found.update(self.descendants(inference, item.elements))
            elif isinstance(item, ClassType):
                info = self.classes.by_name(item.name)
                if info is not None:
                    found.update(self._class_descendants(inference, info))
        return frozenset(found)

    def _class_descendants(self, inference: TypeEvaluator, info: ClassInfo) -> Types:
        key = id(info.scope)
        cached = self._descendants.get(key)
        if cached is not None:
            return cached
        self._descendants[key] = EMPTY
        children = self.children(inference, info)
        result = children | self.descendants(inference, children)
        self._descendants[key] = result
        return result

    def initial_elements(self, inference: TypeEvaluator, info: ClassInfo) -> Types:
        """What a container subclass's `__init__` hands its torch base: `super().__init__(*layers)`."""
        kind = self.container_kind(info)
        found: set[Type] = set()
        for cls in self.classes.mro(info):
            init = cls.method("__init__")
            if init is None:
                continue
            for _, arguments in _base_init_calls(init.node):
                found.update(inference.container_elements(kind or torch_api.SEQUENCE, arguments, cls.module, init, 0))
        return frozenset(found)

    def container_view(self, inference: TypeEvaluator, item: ClassType, call: ast.Call | None, module: ModuleSymbols | None, scope: Scope | None, depth: int) -> ContainerType | None:
        """An instance of a torch container subclass seen as the container it is."""
        info = self.classes.by_name(item.name)
        kind = None if info is None else self.container_kind(info)
        if info is None or kind is None:
            return None
        elements = set(self.children(inference, info))
        if call is not None and module is not None and scope is not None:
            found = self.classes.find_method(info, "__init__")
            if found is None:
                elements.update(inference.container_elements(kind, call.args, module, scope, depth))  # `Stage(conv, bn)`
            else:  # `ModuleList(modules, init_cfg)` whose `__init__` hands `modules` to `nn.ModuleList.__init__`
                bound = _bind(found[1], call, passes_self=False)
                handed = [bound[name] for name in _handed_to_base_init(found[1].node) if name in bound]
                elements.update(inference.container_elements(kind, handed, module, scope, depth))
        return ContainerType(kind, frozenset(elements))

    # -- constructor arguments ------------------------------------------------------

    def arguments(self, inference: TypeEvaluator, info: ClassInfo, call: ast.Call, module: ModuleSymbols, scope: Scope, depth: int) -> Arguments:
        """The modules a constructor call passes to the `__init__` parameters the class builds
        attributes from (`Wrapper(inner=Block())`): () when it passes none."""
        found = self.classes.find_method(info, "__init__")
        if found is None:
            return ()
        owner, init = found
        feeding = self._feeding_parameters(init)
        if not feeding:
            return ()
        bound = _bind(init, call, passes_self=False)
        unpacked = inference.unpacked_keywords(call, module, scope, depth, feeding) if any(k.arg is None for k in call.keywords) else {}
        recorded: list[tuple[str, tuple[Type, ...]]] = []
        for name in feeding:
            argument = bound.get(name)
            given, may_miss = unpacked.get(name, (EMPTY, True))  # `Block(**ba)` after `ba['norm_layer'] = ...`
            if argument is not None:
                types = inference.types(argument, module, scope, depth + 1)
            elif may_miss:
                default = _default(init, name)
                types = given | (EMPTY if default is None else inference.types(default, owner.module, init.parent or init, depth + 1))
            else:
                types = given
            # modules and what builds them; None (`ConvModule(c)` builds no norm where `ConvModule(c, norm_layer=BN)` does);
            # numbers and flags too, for the tests on them (`if self.drop > 0:`, `x.mul_(g) if self.inplace else x * g`)
            kept = (t for t in types if self.is_module(t) or isinstance(t, (ClassObjectType, FunctionType)) or t in (NONE_TYPE, FALSE_TYPE, TRUE_TYPE) or number_of(t) is not None)
            recorded.append((name, tuple(ordered(kept))))
        if all(number_of(t) is not None or t in (FALSE_TYPE, TRUE_TYPE) for _, types in recorded for t in types):
            return ()  # no module passed: the class's attributes, with every construction's numbers and flags, answer
        return tuple(recorded)

    def _feeding_parameters(self, init: Scope) -> tuple[str, ...]:
        """`__init__` parameters its body uses (what it builds attributes from is among them)."""
        key = id(init.node)
        cached = self._feeding.get(key)
        if cached is None:
            node = init.node
            parameters = [a.arg for a in (*positional_parameters(node.args), *node.args.kwonlyargs)][1:] if isinstance(node, ast.FunctionDef) else []
            used = {n.id for n in walk(node) if isinstance(n, ast.Name)}
            cached = self._feeding[key] = tuple(p for p in parameters if p in used)
        return cached

    def value_types(self, inference: TypeEvaluator, value: ast.expr, module: ModuleSymbols, scope: Scope, bound: dict[str, Types] | None) -> Types:
        """The types of a value an `__init__` stores, with its parameters bound to what one
        constructor call passed (when `bound` is given and the shape is simple enough)."""
        if bound and scope.node.name == "__init__" and _names(value, bound):  # type: ignore[attr-defined]  # a method scope's node is a def
            found = self._bound_types(inference, value, bound, module, scope)
            if found is not None:
                return found
        return inference.types(value, module, scope)

    def _bound_types(self, inference: TypeEvaluator, expr: ast.expr, bound: dict[str, Types], module: ModuleSymbols, scope: Scope) -> Types | None:
        def sub(e: ast.expr) -> Types:
            found = self._bound_types(inference, e, bound, module, scope) if _names(e, bound) else None
            return inference.types(e, module, scope) if found is None else found  # unbound, or a shape it does not follow

        if isinstance(expr, ast.Name):
            return bound.get(expr.id)
        if isinstance(expr, ast.IfExp):
            return sub(expr.body) | sub(expr.orelse)
        if isinstance(expr, ast.Compare):  # `self.with_norm = norm_layer is not None`
            return none_test_types(expr, sub) or None
        if isinstance(expr, ast.BoolOp):
            return short_circuit(isinstance(expr.op, ast.Or), [sub(v) for v in expr.values])
        if isinstance(expr, ast.Starred):
            return element_types(sub(expr.value))
        if isinstance(expr, (ast.List, ast.Tuple)):
            elements: set[Type] = set()
            for element in expr.elts:
                elements.update(sub(element) if not isinstance(element, ast.Starred) else element_types(sub(element.value)))
            return frozenset({ContainerType(torch_api.SEQUENCE, frozenset(elements))})
        if isinstance(expr, ast.Call):
            func = expr.func
            if isinstance(func, ast.Name) and func.id in bound:  # `norm_layer(dim)`
                results: set[Type] = set()
                for callee in bound[func.id]:
                    results.update(inference.call_result(callee, expr, module, scope, 1))
                return frozenset(results)
            if isinstance(func, ast.Attribute) and func.attr in torch_api.MODULE_RETURNING_METHODS and _names(func.value, bound):
                return sub(func.value)
            name = inference.qualified_name(func, module, scope)
            short = torch_api.short_name(name or "")
            if name is not None and name.startswith("torch.nn.") and short in torch_api.TORCH_CONTAINERS:
                kind = torch_api.TORCH_CONTAINERS[short]
                elements = set()
                for argument in expr.args:
                    types = sub(argument.value) if isinstance(argument, ast.Starred) else sub(argument)
                    if isinstance(argument, ast.Starred) or kind != torch_api.SEQUENTIAL or any(isinstance(t, ContainerType) for t in types):
                        types = element_types(types)
                    elements.update(types)
                return frozenset({ContainerType(kind, frozenset(elements)), ClassType(name)})
        return None

    def site_types(self, inference: TypeEvaluator, binding: Binding, module: ModuleSymbols) -> Types:
        """What the instantiation sites in the class's own module (and its subclasses' `super().__init__`
        calls there) pass to an `__init__` parameter: the type of `self.inner = inner`."""
        init = binding.scope
        owner = init.parent
        if owner is None or owner.kind != CLASS or getattr(init.node, "name", "") != "__init__":
            return EMPTY
        info = self.classes.info(module, owner)
        sites = self._sites.get(id(init.node))
        if sites is None:
            sites = self._sites[id(init.node)] = [(call, scope, passes_self, module) for call, scope, passes_self in self._find_sites(inference, module, info)]
        if not self.is_module_class(info):  # a module's instances carry their own configuration (`config`)
            sites = [*sites, *self._other_modules_sites(inference, module, info)]
        found: set[Type] = set()
        for call, scope, passes_self, at in sites:
            argument = _bind(init, call, passes_self).get(binding.name)
            if argument is not None:
                found.update(inference.types(argument, at, scope, 1))
        if self.is_module_class(info):  # `build_model_with_cfg(ResNet, ..., **kwargs)` here and in the files registering it
            for call, scope, at, taken in self._factory_sites(inference, module, info):
                for expression, where in keyword_sources(call, binding.name, at, scope, taken):
                    found.update(inference.types(expression, at, where, 1))
        return frozenset(found)

    def set_from_parameters(self, inference: TypeEvaluator, item: ClassType, attribute: str) -> bool:
        """Whether a module's `attribute` is only ever set from constants or from an `__init__` parameter
        that every construction the project shows gives a number constant (`self.drop = drop`, built as
        `ResidualDrop(m)`), so a test comparing it with a number is decided; a value read from a
        configuration object (`self.drop = config.drop_rate`) or the command line is whatever a run loads."""
        info = self.classes.by_name(item.name)
        if info is None or not self.is_module_class(info):
            return False
        for cls in self.classes.mro(info):
            for assignment in cls.attribute_assignments.get(attribute, ()):
                value = assignment.value
                if isinstance(value, ast.Constant):
                    continue
                in_init = getattr(assignment.method.node, "name", "") == "__init__"
                if not (in_init and isinstance(value, ast.Name) and self.numbers_known(inference, cls, value.id)):
                    return False
        return True

    def numbers_known(self, inference: TypeEvaluator, info: ClassInfo, parameter: str) -> bool:
        """Whether the constructions of the class the project shows (in its module, the modules beside
        it, and the factories handed it), at least one, each give `__init__` parameter `parameter` a
        number constant: passed as one, through a chain of parameters with number defaults, or
        left at a number default. A value from anywhere else (`getattr(args, 'drop', 0)`, a config
        attribute) is whatever a run loads, so a test on it is not decided."""
        found = self.classes.find_method(info, "__init__")
        if found is None:
            return False
        owner, init = found
        default = _default(init, parameter)
        module = owner.module
        sites = [(call, scope, passes_self, module) for call, scope, passes_self in self._find_sites(inference, module, info)]
        sites += self._other_modules_sites(inference, module, info)
        factories = self._factory_sites(inference, module, info)
        if not sites and not factories:
            return False
        for call, scope, passes_self, at in sites:
            argument = _bind(init, call, passes_self).get(parameter)
            if argument is None:
                if default is None or number_constant(default) is None or _may_unpack(call):
                    return False
            elif not numeric_source(argument, at, scope):
                return False
        for call, scope, at, taken in factories:
            sources = keyword_sources(call, parameter, at, scope, taken)
            if not all(numeric_source(expression, at, where) for expression, where in sources):
                return False
            if not sources and (default is None or number_constant(default) is None):
                return False
        return True

    def construction_calls(self, inference: TypeEvaluator, info: ClassInfo) -> list[tuple[ast.Call, Scope, ModuleSymbols]]:
        """The calls that build the class the project shows: `Cls(...)` in its module and the modules beside it."""
        module = info.module
        sites = [(call, scope, module) for call, scope, passes_self in self._find_sites(inference, module, info) if not passes_self and not _is_init_call(call)]
        return sites + [(call, scope, at) for call, scope, _, at in self._other_modules_sites(inference, module, info)]

    def _factory_sites(self, inference: TypeEvaluator, module: ModuleSymbols, info: ClassInfo) -> list[tuple[ast.Call, Scope, ModuleSymbols, frozenset[str]]]:
        """Calls that hand the class to a factory which constructs it with the keywords it is
        given (`build_model_with_cfg(Net, variant, **kwargs)`), in the class's module and the
        modules beside it that register configurations of it; with the factory's named
        parameters, which take their keywords before the class sees them."""
        beside = self.beside.of(info)  # asked on every answer: each file that reads the sites depends on those modules
        sites = self._factories.get(id(info.scope))
        if sites is None:
            sites = []
            for other in beside:
                index = self._spelling_index(other)
                for position in index.handed.get(info.name, ()):
                    call, scope = index.calls[position]
                    handed = [
                        i
                        for i, argument in enumerate(call.args)
                        if any(_last_name(arm) == info.name and self._names(inference, arm, other, scope, info) for arm in _handed_classes(argument, scope))
                    ]
                    if not handed:
                        continue
                    for factory in inference.types(call.func, other, scope):
                        if isinstance(factory, FunctionType) and forwarded_class_parameter(factory.node) in handed:
                            sites.append((call, scope, other, named_parameters(factory.node)))
                            break
            self._factories[id(info.scope)] = sites
        return sites

    def _other_modules_sites(self, inference: TypeEvaluator, module: ModuleSymbols, info: ClassInfo) -> list[tuple[ast.Call, Scope, bool, ModuleSymbols]]:
        """`Cls(...)` calls in the modules beside the class's that use it (`EfficientNetBuilder(norm_layer=...)`
        in the model's module): without them a builder's parameter would look like it only ever
        holds its default. Only for classes that are not `nn.Module`s: a module class (mmcv's
        `ConvModule`) is built in many places with many configurations, and an instance's own are
        in its `config`; the union of every site would give `ConvModule(norm_cfg=None)` the
        BatchNorm of others."""
        beside = self.beside.of(info)  # asked on every answer: each file that reads the sites depends on those modules
        sites = self._beside_sites.get(id(info.scope))
        if sites is None:
            sites = []
            for other in beside:
                if other is module:
                    continue
                index = self._spelling_index(other)
                for position in index.called.get(info.name, ()):
                    call, scope = index.calls[position]
                    if self._names(inference, call.func, other, scope, info):
                        sites.append((call, scope, False, other))
            self._beside_sites[id(info.scope)] = sites
        return sites

    def _find_sites(self, inference: TypeEvaluator, module: ModuleSymbols, info: ClassInfo) -> list[tuple[ast.Call, Scope, bool]]:
        """The module's calls that run `info`'s `__init__`: `Cls(...)`, `Cls.__init__(self, ...)`, and
        `super().__init__(...)` in subclasses that name it as a base. Names are checked by spelling
        first (through the module's `_SpellingIndex`), so that only candidates are resolved."""
        name = info.name
        index = self._spelling_index(module)
        subclasses = {node.name: self.classes.info(module, module.scope_of[id(node)]) for node in index.subclasses.get(name, ())}
        inheriting = {sub for sub, sub_info in subclasses.items() if sub_info.method("__init__") is None}
        sites: list[tuple[ast.Call, Scope, bool]] = []
        for call, scope in index.candidates(name, bool(subclasses), inheriting):
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr == "__init__":
                if _is_super(call):
                    current = self.classes.enclosing_class(module, scope)
                    if current is not None and current.name in subclasses and info.qualified_name in self.classes.base_names(current):
                        sites.append((call, scope, False))
                elif _last_name(func.value) == name and self._names(inference, func.value, module, scope, info):
                    sites.append((call, scope, True))
                continue
            called = _last_name(func)
            if called == name and self._names(inference, func, module, scope, info):
                sites.append((call, scope, False))
            elif called in inheriting and self._names(inference, func, module, scope, subclasses[called]):
                sites.append((call, scope, False))
        return sites

    def _names(self, inference: TypeEvaluator, expr: ast.expr, module: ModuleSymbols, scope: Scope, info: ClassInfo) -> bool:
        return inference.qualified_name(expr, module, scope) == info.qualified_name

    def _spelling_index(self, module: ModuleSymbols) -> _SpellingIndex:
        index = self._spellings.get(id(module))
        if index is None:
            index = self._spellings[id(module)] = _SpellingIndex(module)
        return index


class _SpellingIndex:
    """A module's calls and classes by the names they spell, built once per module: `_find_sites`
    is asked about every `__init__` parameter of the module's classes, and scanning all of a
    large module's calls for each of them cost more than the rest of the construction analysis."""

    def __init__(self, module: ModuleSymbols):
        self.calls = module.calls
        self.called: dict[str, list[int]] = {}  # `Cls(...)`, `mod.Cls(...)`: by `Cls`; positions in `calls`
        self.init_called: dict[str, list[int]] = {}  # `Cls.__init__(self, ...)`: by `Cls`
        self.super_inits: list[int] = []  # `super().__init__(...)`
        self.subclasses: dict[str, list[ast.ClassDef]] = {}  # by the last name of one of their bases
        self.handed: dict[str, list[int]] = {}  # `build(Cls, ...)`: by `Cls`, a name passed positionally
        for position, (call, scope) in enumerate(module.calls):
            func = call.func
            for argument in call.args:
                for arm in _handed_classes(argument, scope):
                    handed = _last_name(arm)
                    if handed is not None:
                        positions = self.handed.setdefault(handed, [])
                        if not positions or positions[-1] != position:
                            positions.append(position)
            if isinstance(func, ast.Attribute) and func.attr == "__init__":
                if _is_super(call):
                    self.super_inits.append(position)
                elif (owner := _last_name(func.value)) is not None:
                    self.init_called.setdefault(owner, []).append(position)
                continue
            called = _last_name(func)
            if called is not None:
                self.called.setdefault(called, []).append(position)
        for node, _ in module.classes:
            for base in dict.fromkeys(_last_name(base) for base in node.bases):
                if base is not None:
                    self.subclasses.setdefault(base, []).append(node)

    def candidates(self, name: str, subclasses: bool, inheriting: set[str]) -> list[tuple[ast.Call, Scope]]:
        """The calls that may run `name`'s `__init__` (or, when it is inherited, a subclass's), in
        module order: what a scan of every call would look at further. `super().__init__(...)`
        calls only matter when the module has `subclasses` of `name`."""
        positions = [*(self.super_inits if subclasses else ()), *self.init_called.get(name, ()), *self.called.get(name, ())]
        for subclass in inheriting:
            positions.extend(self.called.get(subclass, ()))
        return [self.calls[position] for position in sorted(set(positions))]


def _handed_classes(argument: ast.expr, scope: Scope) -> list[ast.expr]:
    """What an argument may hand a factory: itself, either arm of `LevitDistilled if distilled else
    Levit`, or what a local of the calling function is assigned (`model_cls = MobileNetV3`, then
    `model_cls = MobileNetV3Features` under `features_only`)."""
    if isinstance(argument, ast.IfExp):
        return [argument.body, argument.orelse]
    if isinstance(argument, ast.Name) and scope.kind != "module":
        assigned = [b.value for b in scope.bindings.get(argument.id, ()) if b.kind == ASSIGN and isinstance(b.value, (ast.Name, ast.Attribute))]
        return [argument, *assigned]
    return [argument]


def _last_name(expr: ast.expr) -> str | None:
    return expr.id if isinstance(expr, ast.Name) else expr.attr if isinstance(expr, ast.Attribute) else None


def _is_init_call(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Attribute) and call.func.attr == "__init__"


def _is_super(call: ast.Call) -> bool:
    """`super().__init__(...)` (the call whose func is `super().__init__`)."""
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Call)
        and isinstance(func.value.func, ast.Name)
        and func.value.func.id == "super"
    )


def _bind(init: Scope, call: ast.Call, passes_self: bool) -> dict[str, ast.expr]:
    """`__init__` parameter -> the argument expression a call passes it (without `self`)."""
    node = init.node
    if not isinstance(node, ast.FunctionDef):
        return {}
    parameters = [a.arg for a in positional_parameters(node.args)][1:]
    arguments = call.args[1:] if passes_self else call.args  # `Base.__init__(self, ...)` passes self itself
    bound: dict[str, ast.expr] = {}
    for name, argument in zip(parameters, arguments):
        if isinstance(argument, ast.Starred):
            break
        bound[name] = argument
    for keyword in call.keywords:
        if keyword.arg is not None:
            bound[keyword.arg] = keyword.value
    return bound


def _may_unpack(call: ast.Call) -> bool:
    """A `*args` or `**kwargs` in the call, which may carry any parameter."""
    return any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords)


def numeric_source(expr: ast.expr, module: ModuleSymbols, scope: Scope, hops: int = 3) -> bool:
    """Whether `expr` is a number constant, or a parameter of its function that has a number
    default and that every call of the function in the module passes a number source (or leaves out)."""
    if number_constant(expr) is not None:
        return True
    if hops <= 0 or not isinstance(expr, ast.Name):
        return False
    function = next((b.scope for b in module.lookup(scope, expr.id) if b.kind == PARAM), None)
    if function is None:
        return False
    default = _default(function, expr.id)
    if number_constant(default) is None:
        return False
    position = parameter_position(function, expr.id)
    for call, caller in calls_of(module, function):
        argument = passed_argument(call, expr.id, position)
        if argument is None and _may_unpack(call):
            return False
        if argument is not None and not numeric_source(argument, module, caller, hops - 1):
            return False
    return True


def _default(init: Scope, name: str) -> ast.expr | None:
    node = init.node
    if not isinstance(node, ast.FunctionDef):
        return None
    args = node.args
    positional = positional_parameters(args)
    names = [a.arg for a in positional]
    if name in names:
        index = names.index(name) - (len(positional) - len(args.defaults))
        return args.defaults[index] if index >= 0 else None
    for argument, default in zip(args.kwonlyargs, args.kw_defaults):
        if argument.arg == name:
            return default
    return None


def _names(expr: ast.AST, bound: dict[str, Types]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in bound for n in walk(expr))


def name_pattern(expr: ast.expr) -> Pattern:
    """`"norm"` for a literal, `("layer", "")` for `f"layer{i}"`, `("", "")` for a variable."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    if isinstance(expr, ast.JoinedStr):
        parts = expr.values
        prefix: list[str] = []
        for part in parts:
            if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                break
            prefix.append(part.value)
        suffix: list[str] = []
        for part in reversed(parts[len(prefix) :]):
            if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                break
            suffix.append(part.value)
        if len(prefix) == len(parts):
            return "".join(prefix)
        return "".join(prefix), "".join(reversed(suffix))
    return "", ""


def patterns_meet(first: Pattern, second: Pattern) -> bool:
    """Could a name matching `first` be one matching `second`?"""
    if isinstance(first, str) and isinstance(second, str):
        return first == second
    if isinstance(first, str) or isinstance(second, str):
        literal, pair = (first, second) if isinstance(first, str) else (second, first)
        assert isinstance(literal, str) and isinstance(pair, tuple)
        prefix, suffix = pair
        return len(literal) >= len(prefix) + len(suffix) and literal.startswith(prefix) and literal.endswith(suffix)
    (p1, s1), (p2, s2) = first, second
    return (p1.startswith(p2) or p2.startswith(p1)) and (s1.endswith(s2) or s2.endswith(s1))


def _base_init_calls(init: ast.AST) -> Iterator[tuple[ast.Call, list[ast.expr]]]:
    """Each call of a base's `__init__` in `init` (`super().__init__(*layers)`,
    `nn.ModuleList.__init__(self, modules)`), with the arguments it hands the base."""
    for node in walk(init):
        if isinstance(node, ast.Call) and _is_init_call(node):
            yield node, (node.args if _is_super(node) else node.args[1:])


def _handed_to_base_init(init: ast.AST) -> list[str]:
    """The parameters an `__init__` passes on to its torch container base's: what a container
    subclass's constructor arguments fill it with."""
    if not isinstance(init, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    parameters = {a.arg for a in positional_parameters(init.args)[1:]}
    found: list[str] = []
    for call, arguments in _base_init_calls(init):
        assert isinstance(call.func, ast.Attribute)  # `_is_init_call`
        if not _is_super(call) and _last_name(call.func.value) not in torch_api.TORCH_CONTAINERS:
            continue  # `BaseModule.__init__(self, init_cfg)`: not the container's contents
        for argument in arguments:
            value = argument.value if isinstance(argument, ast.Starred) else argument
            if isinstance(value, ast.Name) and value.id in parameters and value.id not in found:
                found.append(value.id)
    return found
