"""What a checkpoint call replays: the functions the region starts in, with their context.

A lambda, a nested or module-level function, a partial (with its bound arguments), a
bound method, the inner function a closure factory returns, a module's `forward`
(`self.block`, `block.__call__`, a loop variable over a ModuleList, the elements of a
Sequential, a wrapped `Block(...)`), the classes `check_fn` selects, a layer class.
Unresolvable regions (a parameter, a third-party callable) yield no entries.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace

from ckptlint.analysis.knowledge import torch_api
from ckptlint.analysis.regions.summary import Context, Facts, approximation_note
from ckptlint.analysis.regions.training_step import CHECKPOINT_KEYWORDS, false_arguments
from ckptlint.analysis.semantics.call_sites import ParameterArguments
from ckptlint.analysis.semantics.evaluator import TypeInference
from ckptlint.analysis.semantics.known_truth import false_value
from ckptlint.analysis.semantics.values import (
    INPUT,
    NONE_TYPE,
    OUTER,
    ClassType,
    ContainerType,
    FunctionType,
    Types,
    Value,
    element_types,
    ordered,
)
from ckptlint.calls import CheckpointCall
from ckptlint.catalogue import CALLABLE, LAYER_CLASS, MODEL, MODULES
from ckptlint.classes import ClassIndex, ClassInfo
from ckptlint.symbols import (
    MODULE,
    PARAM,
    ModuleSymbols,
    Scope,
    display_name,
    positional_parameters,
)
from ckptlint.syntax import walk


@dataclass(frozen=True, eq=False)
class RegionEntry:
    module: ModuleSymbols
    scope: Scope
    context: Context
    name: str  # for messages: `Block.forward`
    # facts every effect of the entry carries: its module's class came from an over-approximated builder
    note: Facts = ()
    # the entry is a norm module's own forward whose running statistics the region already reports
    statistics_reported: bool = False


@dataclass(frozen=True, eq=False)
class TorchModuleRegion:
    """The region is itself a torch module with no call line of its own that does something a
    replay repeats: a norm with running statistics (`checkpoint(self.bn, x)`), a dropout that
    draws (`checkpoint(self.drop, x)`), or one inside an `nn.Sequential` region."""

    node: ast.AST
    name: str
    random: bool = False  # a dropout module (its draw), not running statistics


def _torch_module_regions(item: ClassType, region: ast.expr) -> list[TorchModuleRegion]:
    if item.running_stats:
        return [TorchModuleRegion(region, item.short)]
    if item.name.startswith("torch.") and item.short in torch_api.TORCH_DROPOUT_MODULES:
        return [TorchModuleRegion(region, item.short, random=True)]
    return []


class RegionResolver:
    def __init__(self, classes: ClassIndex, inference: TypeInference):
        self.classes = classes
        self.inference = inference
        self.parameters = ParameterArguments(inference)

    def entries(self, call: CheckpointCall) -> list[RegionEntry | TorchModuleRegion]:
        region = call.region
        if region is None:
            return []
        kind = call.api.region_kind
        if kind == LAYER_CLASS and isinstance(region, ast.ClassDef):
            info = self.classes.info(call.module, call.module.scope_of[id(region)])
            return self._module_entries(ClassType(info.qualified_name), self._cleared(call, info))
        if isinstance(region, (ast.FunctionDef, ast.AsyncFunctionDef)):  # decorator form
            scope = call.module.scope_of[id(region)]
            return [self._function_entry(self.inference.function(call.module, scope), call)]
        assert isinstance(region, ast.expr)
        if kind == MODEL:
            return self._selected_classes(region, call)
        types = self._region_types(region, call)
        views = (self._container_view(t) for t in types if isinstance(t, ClassType))
        types = types | frozenset(v for v in views if v is not None)  # an nn.Sequential subclass runs what it registered
        if kind == MODULES:
            types = element_types(types) | frozenset(t for t in types if isinstance(t, ClassType))
        entries: list[RegionEntry | TorchModuleRegion] = []
        for item in ordered(types):
            if isinstance(item, FunctionType) and kind == CALLABLE:
                entries.append(self._function_entry(item, call))
            elif isinstance(item, ClassType):
                entries.extend(_torch_module_regions(item, region))
                entries.extend(_reported(_noted(self._module_entries(item, passed=_passed_arguments(call), false=false_arguments(call)), item, region), item))
            elif isinstance(item, ContainerType) and item.kind == torch_api.SEQUENTIAL:
                entries.extend(self._sequential_entries(item, region, set()))
        return entries

    def region_is_library_code(self, call: CheckpointCall) -> bool:
        """Whether a region with no project entry is a library's module or function (`self.wte`
        an `nn.Embedding`, `F.gelu`): what it does is the library tables', not unknown."""
        region = call.region
        if not isinstance(region, ast.expr):
            return False
        if any(isinstance(t, ClassType) and t != NONE_TYPE for t in self._region_types(region, call)):
            return True
        name = call.module.qualified_name(region, call.scope)
        return name is not None and self.inference.project.never_read(name)

    def _sequential_entries(self, container: ContainerType, region: ast.expr, seen: set[ContainerType]) -> list[RegionEntry | TorchModuleRegion]:
        """Every module a Sequential runs; a norm among them is reported at the call (it has no line of its own)."""
        if container in seen:
            return []
        seen.add(container)
        entries: list[RegionEntry | TorchModuleRegion] = []
        for element in ordered(container.elements):
            if isinstance(element, ClassType):
                entries.extend(_torch_module_regions(element, region))
                entries.extend(_reported(_noted(self._module_entries(element), element, region), element))
                view = self._container_view(element)
                if view is not None and view.kind == torch_api.SEQUENTIAL:
                    entries.extend(self._sequential_entries(view, region, seen))
            elif isinstance(element, ContainerType) and element.kind == torch_api.SEQUENTIAL:
                entries.extend(self._sequential_entries(element, region, seen))
        return entries

    def _container_view(self, item: ClassType) -> ContainerType | None:
        return self.inference.construction.container_view(self.inference, item, None, None, None, 0)

    def _region_types(self, region: ast.expr, call: CheckpointCall) -> Types:
        module, scope = call.module, call.scope
        if isinstance(region, ast.Attribute) and region.attr in ("__call__", "forward"):
            held = self.inference.types(region.value, module, scope) or self._passed_in(region.value, call)
            return frozenset(t for t in held if isinstance(t, ClassType))
        if isinstance(region, ast.Call) and region.args and self._is_partial(region, module, scope):
            bound = self._partial_arguments(region, module, scope)
            found = set()
            for item in ordered(self._region_types(region.args[0], call)):
                if isinstance(item, FunctionType):
                    item = replace(item, bound=item.bound + bound)
                found.add(item)
            return frozenset(found)
        return self.inference.types(region, module, scope) or self._passed_in(region, call)

    def _passed_in(self, region: ast.expr, call: CheckpointCall) -> Types:
        """A region that is a parameter of the function holding the call (`def apply_module(m, x):
        return checkpoint(m, x)`): whatever the module's calls of that function pass."""
        if not isinstance(region, ast.Name):
            return frozenset()
        binding = call.module.binding(call.scope, region.id, region.lineno)
        if binding is None or binding.kind != PARAM or binding.scope is not call.scope:
            return frozenset()
        return self.parameters.types(call.module, call.scope, region.id)

    def _is_partial(self, call: ast.Call, module: ModuleSymbols, scope: Scope) -> bool:
        return self.inference.qualified_name(call.func, module, scope) == "functools.partial"

    def _partial_arguments(self, partial: ast.Call, module: ModuleSymbols, scope: Scope) -> tuple[tuple[str, Value], ...]:
        """Arguments a partial binds: evaluated before the region runs, so they come from outside it."""
        target_types = self.inference.types(partial.args[0], module, scope)
        function = next((t for t in target_types if isinstance(t, FunctionType) and t.node is not None), None)
        if function is None:
            return ()
        definition = function.node
        params = [a.arg for a in positional_parameters(definition.args)]  # type: ignore[attr-defined]  # a FunctionType's node is a def or lambda
        if function.receiver is not None:
            params = params[1:]
        bound = []
        for name, argument in zip(params, partial.args[1:]):
            bound.append((name, Value(frozenset({INPUT}), self.inference.types(argument, module, scope), path=name)))
        for keyword in partial.keywords:
            if keyword.arg is not None:
                types = self.inference.types(keyword.value, module, scope)
                bound.append((keyword.arg, Value(frozenset({INPUT}), types, path=keyword.arg)))
        return tuple(bound)

    def _function_entry(self, function: FunctionType, call: CheckpointCall) -> RegionEntry:
        module: ModuleSymbols = function.module  # type: ignore[assignment]  # project functions carry the module that defines them
        scope = module.scope_of[id(function.node)]
        params = _parameters(scope)
        bound = dict(function.bound)
        arguments = tuple(sorted((name, value) for name, value in bound.items() if name in params))
        closure = tuple(sorted((name, value) for name, value in bound.items() if name not in params))
        positional, keywords = _passed_arguments(call)
        false_positions, false_keywords = false_arguments(call)
        context = Context(
            function.receiver,
            arguments,
            closure,
            entry=True,
            entry_positional=positional,
            entry_keywords=keywords,
            entry_false_positions=false_positions,
            entry_false_keywords=false_keywords,
        )
        return RegionEntry(module, scope, context, display_name(scope))

    def _cleared(self, call: CheckpointCall, info: ClassInfo) -> tuple[str, ...]:
        """The arguments the layer class's wrapper clears: it clears them only when they come as
        keywords, so one its module passes positionally (GIT's `layer(hidden, mask, cache)`)
        reaches the replay as it is."""
        if self._class_flag(info, call.api.cleared_unless):
            return ()
        cleared = call.api.cleared_arguments
        forward = self.classes.find_method(info, "forward")
        if forward is None or not isinstance(forward[1].node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return cleared
        order = [a.arg for a in positional_parameters(forward[1].node.args)][1:]  # after self
        positions = {index: name for index, name in enumerate(order) if name in cleared}
        if not positions:
            return cleared
        first = min(positions)
        positional: set[str] = set()
        for node, scope in call.module.calls:
            if len(node.args) <= first or any(isinstance(a, ast.Starred) for a in node.args):
                continue
            if not _may_hold_a_module(node.func, call.module, scope):
                continue  # `torch.cat(...)`, `apply_rotary(...)`: resolving them loads half the library
            if any(isinstance(t, ClassType) and t.name == info.qualified_name for t in self.inference.types(node.func, call.module, scope)):
                positional.update(name for index, name in positions.items() if index < len(node.args))
        return tuple(name for name in cleared if name not in positional)

    def _class_flag(self, info: ClassInfo, name: str | None) -> bool:
        """Whether the class (or a project base) sets `name = True` in its body."""
        if name is None:
            return False
        for cls in self.classes.mro(info):
            for statement in cls.node.body:
                if (
                    isinstance(statement, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == name for t in statement.targets)
                    and isinstance(statement.value, ast.Constant)
                ):
                    return bool(statement.value.value)
        return False

    def _module_entries(
        self,
        item: ClassType,
        cleared: tuple[str, ...] = (),
        passed: tuple[int | None, tuple[str, ...]] = (None, ()),
        false: tuple[tuple[int, ...], tuple[str, ...]] = ((), ()),
    ) -> list[RegionEntry | TorchModuleRegion]:
        info = self.classes.by_name(item.name)
        if info is None:
            return []
        forward = self.classes.find_method(info, "forward") or self.classes.find_method(info, "__call__")
        if forward is None:
            return []
        owner, scope = forward
        instance = replace(item, name=info.qualified_name, running_stats=False, built_by="")  # with the arguments its constructor was passed
        view = self._container_view(instance)
        receiver = Value(frozenset({OUTER}), frozenset({instance} if view is None else {instance, view}), path="self")
        # a cleared cache argument is None, `use_cache` is False
        arguments = tuple((name, false_value(name, none=name != "use_cache")) for name in sorted(cleared) if name in _parameters(scope))
        positional, keywords = passed
        context = Context(
            receiver,
            arguments,
            entry=True,
            entry_positional=positional,
            entry_keywords=keywords,
            entry_false_positions=false[0],
            entry_false_keywords=false[1],
        )
        return [RegionEntry(owner.module, scope, context, display_name(scope))]

    def _selected_classes(self, check_fn: ast.expr, call: CheckpointCall) -> list[RegionEntry | TorchModuleRegion]:
        """`check_fn=lambda m: isinstance(m, Block)`: every class it tests for."""
        function_types = [t for t in self.inference.types(check_fn, call.module, call.scope) if isinstance(t, FunctionType)]
        entries: list[RegionEntry | TorchModuleRegion] = []
        for function in function_types:
            module: ModuleSymbols = function.module  # type: ignore[assignment]  # project functions carry the module that defines them
            scope = module.scope_of[id(function.node)]
            for node in walk(function.node):
                for class_expr in _tested_classes(node, module, scope):
                    for item in ordered(self.inference.types(class_expr, module, scope)):
                        name = getattr(item, "name", None)
                        if name is not None:
                            entries.extend(self._module_entries(ClassType(name)))
        return entries




def _may_hold_a_module(func: ast.expr, module: ModuleSymbols, scope: Scope) -> bool:
    """A callee that can be a module instance: `self.layer(...)`, `self.layers[i](...)`, or a
    name the function binds (`for layer in self.layers: layer(...)`), not a module-level name."""
    root = func
    while isinstance(root, (ast.Attribute, ast.Subscript)):
        root = root.value
    if not isinstance(root, ast.Name):
        return False
    if root.id == "self":
        return True
    bindings = module.lookup(scope, root.id)
    return func is root and bool(bindings) and all(b.scope.kind != MODULE for b in bindings)


def _passed_arguments(call: CheckpointCall) -> tuple[int | None, tuple[str, ...]]:
    """(positional arguments the call passes to the region, keywords it passes); None: unknown."""
    start = call.api.arguments_from
    arguments = call.arguments
    if start is None or call.api.region_kind != CALLABLE or arguments.unknown_from is not None or arguments.star_keywords:
        return None, ()
    if len(arguments.positional) < start:  # curried or decorator form: the arguments come later
        return None, ()
    keywords = tuple(sorted(k for k in arguments.keywords if k not in CHECKPOINT_KEYWORDS))
    return max(0, len(arguments.positional) - start), keywords


def _noted(entries: list[RegionEntry | TorchModuleRegion], item: ClassType, region: ast.expr) -> list[RegionEntry | TorchModuleRegion]:
    """Entries of a module whose class an unknown builder key chose: their findings say so."""
    if not item.built_by:
        return entries
    note = approximation_note(ast.unparse(region), item.built_by)
    return [replace(e, note=note) if isinstance(e, RegionEntry) else e for e in entries]


def _reported(entries: list[RegionEntry | TorchModuleRegion], item: ClassType) -> list[RegionEntry | TorchModuleRegion]:
    """Entries of a norm module's own forward, when its running statistics are reported at the region."""
    if not item.running_stats:
        return entries
    return [replace(e, statistics_reported=True) if isinstance(e, RegionEntry) else e for e in entries]


def _tested_classes(node: ast.AST, module: ModuleSymbols, scope: Scope) -> list[ast.expr]:
    """The class expressions in `isinstance(m, X)`, `isinstance(m, (X, Y))`, `type(m) is X`."""
    if isinstance(node, ast.Call) and module.qualified_name(node.func, scope) == "builtins.isinstance" and len(node.args) == 2:
        target = node.args[1]
        return list(target.elts) if isinstance(target, ast.Tuple) else [target]
    if isinstance(node, ast.Compare) and isinstance(node.left, ast.Call):
        if module.qualified_name(node.left.func, scope) == "builtins.type":
            found: list[ast.expr] = []
            for comparator in node.comparators:
                found.extend(comparator.elts if isinstance(comparator, (ast.Tuple, ast.List, ast.Set)) else [comparator])
            return found
    return []


def _parameters(scope: Scope) -> set[str]:
    node = scope.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return set()
    args = node.args
    names = {a.arg for a in (*positional_parameters(args), *args.kwonlyargs)}
    names.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
    return names
