"""Find every checkpoint call in a module, whatever its spelling.

Recognised by the callee's qualified name (imports, aliases and re-exports
resolved), through `functools.partial` layers bound to names or to `self.<attr>`,
in the curried form `checkpoint(use_reentrant=False)(fn)(x)` and its decorator
form, and as classes inheriting from a layer class that checkpoints itself.
"""

from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Iterator

from ckptlint.catalogue import CALLABLE, LAYER_CLASS, MODEL, Catalogue, CheckpointAPI
from ckptlint.classes import ClassIndex, ClassInfo
from ckptlint.modes import CallMode, call_mode, use_reentrant_flag
from ckptlint.passed_arguments import passed_arguments
from ckptlint.prefilter import Names, leaf
from ckptlint.project import Project
from ckptlint.sac_policy import saved_ops
from ckptlint.source import SourceFile
from ckptlint.symbols import (
    ASSIGN,
    DEF,
    IMPORT,
    PARAM,
    Binding,
    ModuleSymbols,
    Scope,
    parameter_default,
    positional_parameters,
)
from ckptlint.versions import NO_VERSIONS, Versions

PARTIAL = frozenset({"functools.partial"})


@dataclass(frozen=True, eq=False)
class BoundKeyword:
    """A keyword argument and the module it is written in (partials live elsewhere)."""

    node: ast.keyword
    module: ModuleSymbols
    literal: ast.Constant | None = None  # the constant a name passed here always holds

    @property
    def value(self) -> ast.expr:
        return self.node.value

    @property
    def constant(self) -> ast.Constant | None:
        """The value as a literal, when it is one or a name bound only to one."""
        value = self.node.value
        return value if isinstance(value, ast.Constant) else self.literal


@dataclass(eq=False)
class BoundArguments:
    """The arguments a checkpoint API receives once partial layers are applied."""

    positional: list[ast.expr] = field(default_factory=list)
    keywords: dict[str, BoundKeyword] = field(default_factory=dict)
    unknown_from: int | None = None  # a `*args` makes positions from here on unknown
    star_keywords: bool = False  # a `**kwargs` may carry any keyword
    literals: dict[int, ast.Constant] = field(default_factory=dict)  # positions whose name holds one constant

    def add_call(self, call: ast.Call, module: ModuleSymbols, skip: int = 0, scope: Scope | None = None) -> None:
        """Add what `call` passes; with the `scope` it is made in, a name bound only to a
        constant passes that constant (`preserve_rng_state=flag` after `flag = False`)."""
        for argument in call.args[skip:]:
            if isinstance(argument, ast.Starred):
                if self.unknown_from is None:
                    self.unknown_from = len(self.positional)
                continue
            literal = module.constant(argument, scope) if scope is not None and isinstance(argument, ast.Name) else None
            if literal is not None:
                self.literals[len(self.positional)] = literal
            self.positional.append(argument)
        for keyword in call.keywords:
            if keyword.arg is not None:
                literal = module.constant(keyword.value, scope) if scope is not None and isinstance(keyword.value, ast.Name) else None
                self.keywords[keyword.arg] = BoundKeyword(keyword, module, literal)
            elif isinstance(keyword.value, ast.Dict) and all(
                isinstance(k, ast.Constant) and isinstance(k.value, str) for k in keyword.value.keys
            ):
                for key, value in zip(keyword.value.keys, keyword.value.values):
                    synthetic = ast.keyword(arg=key.value, value=value)  # type: ignore[union-attr]  # all() above: every key is a str Constant
                    ast.copy_location(synthetic, key)  # type: ignore[arg-type]  # all() above: every key is a str Constant
                    synthetic.end_lineno, synthetic.end_col_offset = value.end_lineno, value.end_col_offset
                    self.keywords[key.value] = BoundKeyword(synthetic, module)  # type: ignore[union-attr]  # all() above: every key is a str Constant
            else:
                self.star_keywords = True

    def get(self, position: int | None, keyword: str | None) -> ast.expr | None:
        if keyword is not None and keyword in self.keywords:
            return self.keywords[keyword].value
        if position is not None and position < len(self.positional):
            if self.unknown_from is None or position < self.unknown_from:
                return self.positional[position]
        return None

    def constant(self, position: int | None, keyword: str | None) -> ast.Constant | None:
        """The argument as a literal (what `get` finds, or the constant its name holds)."""
        if keyword is not None and keyword in self.keywords:
            return self.keywords[keyword].constant
        value = self.get(position, keyword)
        if isinstance(value, ast.Constant):
            return value
        return None if position is None or value is None else self.literals.get(position)

    def may_carry(self, position: int | None, keyword: str) -> bool:
        """Could an argument we cannot see (`*args`, `**kwargs`) supply this parameter?"""
        if self.star_keywords:
            return True
        return position is not None and self.unknown_from is not None and position >= self.unknown_from


@dataclass(eq=False)
class CheckpointCall:
    """One place that runs a region under activation checkpointing."""

    api: CheckpointAPI
    module: ModuleSymbols
    scope: Scope  # where the call (and its region expression) is evaluated
    node: ast.expr | ast.stmt  # what is reported: the call, the decorator, or the class
    arguments: BoundArguments
    region: ast.AST | None  # an expression, a decorated def, or a layer class
    wrapper_arguments: BoundArguments | None = None  # apply_activation_checkpointing's wrapper partial
    owner: str | None = None  # the library a shared helper belongs to here (diffusers, transformers), if known
    versions: Versions = NO_VERSIONS  # the library versions the code runs with (versions.py)

    @property
    def line(self) -> int:
        return self.node.lineno

    @property
    def column(self) -> int:
        return self.module.source.column(self.node.lineno, self.node.col_offset)

    @property
    def path(self) -> str:
        return self.module.source.display_path

    def keyword(self, name: str) -> BoundKeyword | None:
        for arguments in (self.wrapper_arguments, self.arguments):
            if arguments is not None and name in arguments.keywords:
                return arguments.keywords[name]
        return None

    @cached_property
    def saved_ops(self) -> frozenset[str]:
        """The ops whose outputs a selective-checkpoint `context_fn` saves (sac_policy.py):
        the replay does not run them again."""
        context_fn = self.keyword("context_fn")
        return saved_ops(context_fn.value, context_fn.module) if context_fn is not None else frozenset()

    @property
    def applied_to(self) -> ast.AST | None:
        """What the call puts under checkpointing: the model `apply_activation_checkpointing`
        walks, else the region (the module a wrapper wraps, the callable)."""
        return self.arguments.get(0, "model") if self.api.region_kind == MODEL else self.region

    def false_preserve_rng_state(self) -> tuple[ModuleSymbols, ast.AST, str] | None:
        """Where the call passes `preserve_rng_state=False` (by keyword, or at the API's position
        as `CheckpointFunction.apply(fn, False, *args)` does), and the words for the name that
        holds it (`` (`flag` is False)``), if a name does; None when it does not."""
        keyword = self.keyword("preserve_rng_state")
        if keyword is not None:
            literal = keyword.constant
            if literal is None or literal.value is not False:
                return None
            return keyword.module, keyword.node, _named_false(keyword.value)
        position = self.api.preserve_rng_state_position
        literal = self.arguments.constant(position, None)
        if literal is None or literal.value is not False:
            return None
        node = self.arguments.get(position, None)
        return self.module, node if node is not None else self.node, _named_false(node)

    @property
    def use_reentrant(self) -> str:
        """How `use_reentrant` is given: omitted, none, true, false or dynamic."""
        return use_reentrant_flag(self.api, self.arguments)

    @property
    def mode(self) -> CallMode:
        """Whether the replay is reentrant and what decided it (modes.py)."""
        return call_mode(self)

    @property
    def reentrant(self) -> bool | None:
        """Whether the replay is reentrant; None when it depends on run-time values."""
        return self.mode.reentrant

    @property
    def reentrant_by_default(self) -> bool:
        return self.mode.by_default


@dataclass
class _Target:
    """What a callee expression resolves to: an API, through partial layers (innermost first)."""

    api: CheckpointAPI
    partials: list[tuple[ast.Call, ModuleSymbols]] = field(default_factory=list)


_ALIASABLE = (ast.Call, ast.Name, ast.Attribute)
_WORD_CHAR = re.compile(r"\w")


class CallFinder:
    """Resolves callees of one project's modules to checkpoint APIs."""

    def __init__(
        self,
        project: Project,
        catalogue: Catalogue,
        classes: ClassIndex | None = None,
        names: Names | None = None,
        versions: Versions = NO_VERSIONS,
    ):
        self.project = project
        self.catalogue = catalogue
        self.versions = versions
        self.classes = classes or ClassIndex(project)
        self._layer_names = catalogue.layer_classes()
        # names a callee or base must mention to be resolved at all (see prefilter.py)
        self._api_names = Names.of(catalogue)
        self.names = names if names is not None else self._api_names.copy()

    # -- public ---------------------------------------------------------------

    def checkpoint_calls(self, module: ModuleSymbols) -> list[CheckpointCall]:
        """Every checkpoint call in the module, in source order. The module's own names
        (`own`) are found to a fixpoint first, so its result does not depend on whether
        they were already known (`a = partial(checkpoint)` before `b = a`)."""
        own = Names()
        while own.update(self.derived_names(module)):
            self.names.update(own)
        found: list[CheckpointCall] = []
        applied: dict[int, tuple[ast.Call | ast.FunctionDef | ast.AsyncFunctionDef, Scope]] = {}
        for function, scope in module.functions:
            for decorator in function.decorator_list:
                if isinstance(decorator, ast.Call):
                    applied[id(decorator)] = (function, scope)
        for call, scope in module.calls:
            if isinstance(call.func, ast.Call):
                applied[id(call.func)] = (call, scope)
        mentioned = self.names.mentioned_in_callee
        for call, scope in module.calls:
            if not mentioned(call.func):
                continue
            checkpoint_call = self._recognise(call, module, scope, applied)
            if checkpoint_call is not None:
                found.append(checkpoint_call)
        layers: list[CheckpointCall] = []
        while True:  # `class Leaf(Mid)` before `class Mid(GradientCheckpointingLayer)`
            found_now = [call for call in self._layer_classes(module) if _class_name(call) not in own.classes]
            if not found_now:
                break
            layers.extend(found_now)
            own.classes.update(_class_name(call) for call in found_now)
            self.names.update(own)
        module.checkpoint_names = own  # what this module adds, for the prefilter and the cache
        found.extend(layers)
        found.sort(key=lambda c: (c.line, c.node.col_offset))
        return found

    def derived_names(self, module: ModuleSymbols) -> Names:
        """The module's own names for checkpoint APIs and layer classes: aliases, partials
        and `self.<attr>` bound to an API, imports of a layer class under another name."""
        names = self.names
        found = Names()
        pattern = names.function_pattern()
        # the lines that spell a function name: a value on none of them cannot mention one
        # (walking every assigned value was 4% of a cold run on transformers)
        hits = _lines_matching(module.source, pattern, names.functions) if pattern is not None else []
        for scope in module.iter_scopes():
            for name, bindings in scope.bindings.items():
                if name in self._api_names.functions:
                    continue
                for binding in bindings:
                    value = binding.value
                    # the spelling only (`target` notes a read of the import: engine/edges.py)
                    if binding.kind == IMPORT and binding.spelled_target:
                        imported = leaf(binding.spelled_target)
                        if imported in names.classes and name != imported:
                            found.classes.add(name)
                        elif imported in names.functions and self._denotes_api(ast.Name(id=name, lineno=binding.line), module, scope):
                            found.functions.add(name)
                    elif binding.kind == ASSIGN and value is not None and _spelled_within(hits, value) and names.mentioned_in_callee(value):
                        if self.resolve(value, module, binding.written_from or binding.scope) is not None:
                            found.functions.add(name)
        for node, _ in module.classes:
            if not _any_between(hits, node.lineno, node.end_lineno or node.lineno):
                continue
            info = self.classes.info(module, module.scope_of[id(node)])
            for attribute, assignments in info.attribute_assignments.items():
                if attribute in self._api_names.functions:
                    continue
                for assignment in assignments:
                    value = assignment.value
                    if value is not None and names.mentioned_in_callee(value) and self.resolve(value, module, assignment.method):
                        found.functions.add(attribute)
                        break
        if hits:
            self._derived_from_functions(module, hits, found)
        return found

    def _derived_from_functions(self, module: ModuleSymbols, hits: list[int], found: Names) -> None:
        """Names that hold an API without an assignment: a factory that returns one
        (`def get_checkpoint_fn(): return partial(checkpoint, ...)`), a parameter defaulting to
        one (`ckpt_fn=checkpoint`) or passed one by keyword (`Block(activation_checkpoint_func=checkpoint)`).
        Only lines that mention a known name (`hits`, ascending line numbers) are looked at."""
        names = self.names

        def mentions(node: ast.AST) -> bool:
            start = node.lineno  # type: ignore[attr-defined]  # statements and expressions have positions
            return _any_between(hits, start, getattr(node, "end_lineno", None) or start)

        for function, scope in module.functions:
            if function.name in names.functions or not mentions(function):
                continue
            function_scope = module.scope_of[id(function)]
            returned = [r for r in _returned(function) if mentions(r) and names.mentioned_in_callee(r)]
            if any(self.resolve(r, module, function_scope) is not None for r in returned):
                found.functions.add(function.name)
            args = function.args
            for parameter, default in [*zip(reversed(positional_parameters(args)), reversed(args.defaults)), *zip(args.kwonlyargs, args.kw_defaults)]:
                if default is not None and names.mentioned_in_callee(default) and self.resolve(default, module, scope) is not None:
                    found.functions.add(parameter.arg)
        for call, scope in module.calls:
            for keyword in call.keywords:
                value = keyword.value
                if keyword.arg is None or keyword.arg in names.functions or not isinstance(value, _ALIASABLE):
                    continue
                if mentions(value) and names.mentioned_in_callee(value) and self._denotes_api(value, module, scope):
                    found.functions.add(keyword.arg)

    def _denotes_api(self, expr: ast.expr, module: ModuleSymbols, scope: Scope) -> bool:
        target = self.resolve(expr, module, scope)
        return target is not None and target.api.region_kind != LAYER_CLASS

    def resolve(self, expr: ast.expr, module: ModuleSymbols, scope: Scope, depth: int = 0) -> _Target | None:
        """The checkpoint API a callee expression denotes, if any."""
        if depth > 8:
            return None
        if isinstance(expr, ast.Call):
            if expr.args and self._is_partial(expr.func, module, scope):
                inner = self.resolve(expr.args[0], module, scope, depth + 1)
                if inner is not None:
                    inner.partials.append((expr, module))
                return inner
            return self._resolve_factory(expr, module, scope, depth)
        if isinstance(expr, (ast.Name, ast.Attribute)):
            name = module.qualified_name(expr, scope)
            if name is not None:
                api = self.api_named(name)
                if api is not None:
                    return _Target(api)
        if isinstance(expr, ast.Name):
            return self._resolve_name(expr, module, scope, depth)
        if isinstance(expr, ast.Attribute):
            return self._resolve_attribute(expr, module, scope, depth)
        return None

    def api_named(self, qualified_name: str) -> CheckpointAPI | None:
        api = self.catalogue.by_qualified_name(qualified_name)
        if api is None:
            canonical = self.project.canonical_name(qualified_name)
            if canonical != qualified_name:
                api = self.catalogue.by_qualified_name(canonical)
        return api

    # -- recognition ----------------------------------------------------------

    def _recognise(self, call: ast.Call, module: ModuleSymbols, scope: Scope, applied: dict[int, tuple[ast.Call | ast.FunctionDef | ast.AsyncFunctionDef, Scope]]) -> CheckpointCall | None:
        target = self.resolve(call.func, module, scope)
        if target is None or target.api.region_kind == LAYER_CLASS:
            return None
        arguments = BoundArguments()
        for partial, partial_module in target.partials:
            arguments.add_call(partial, partial_module, skip=1)
        arguments.add_call(call, module, scope=scope)
        api = target.api
        region: ast.AST | None = arguments.get(api.region_argument, api.region_keyword)
        if region is None and api.region_kind == CALLABLE and not arguments.positional and arguments.unknown_from is None:
            # curried `checkpoint(use_reentrant=False)(fn)` or decorator `@checkpoint(use_reentrant=False)`
            application = applied.get(id(call))
            if application is not None:
                applied_to, _ = application
                region = (applied_to.args[0] if applied_to.args else None) if isinstance(applied_to, ast.Call) else applied_to
        if api.region_kind == MODEL:
            region = arguments.get(2, "check_fn")
        wrapper_arguments = None
        if api.region_kind == MODEL:
            wrapper_fn = arguments.get(1, "checkpoint_wrapper_fn")
            if wrapper_fn is not None:
                wrapper = self.resolve(wrapper_fn, module, scope)
                if wrapper is not None:
                    wrapper_arguments = BoundArguments()
                    for partial, partial_module in wrapper.partials:
                        wrapper_arguments.add_call(partial, partial_module, skip=1)
        owner = self._owner(api, module, scope)
        return CheckpointCall(api, module, scope, call, arguments, region, wrapper_arguments, owner, self.versions)

    def _layer_classes(self, module: ModuleSymbols) -> Iterator[CheckpointCall]:
        if not self._layer_names:
            return
        for node, scope in module.classes:
            if not node.bases or not self.names.mentioned_in_bases(node.bases):
                continue
            info = self.classes.info(module, module.scope_of[id(node)])
            for ancestor in self.classes.ancestors(info):
                name = ancestor if isinstance(ancestor, str) else ancestor.qualified_name
                api = self.catalogue.by_qualified_name(name) if name in self._layer_names else None
                if api is not None:
                    owner = self._owner(api, module, module.scope_of[id(node)])
                    yield CheckpointCall(api, module, scope, node, BoundArguments(), node, owner=owner, versions=self.versions)
                    break

    def _owner(self, api: CheckpointAPI, module: ModuleSymbols, scope: Scope) -> str | None:
        """Which library a helper several libraries share (`_gradient_checkpointing_func`:
        transformers and diffusers) belongs to at this call: the one the enclosing class
        derives from, else the package the module is in, else the only one it imports."""
        candidates = api.versioned_libraries
        if len(candidates) < 2:
            return candidates[0] if candidates else None
        info = self.classes.enclosing_class(module, scope)
        if info is not None:
            for ancestor in self.classes.ancestors(info):
                name = ancestor if isinstance(ancestor, str) else ancestor.qualified_name
                head = _head(name)
                if head in candidates:
                    return head
        own = _head(module.name)
        if own in candidates:
            return own
        imported = {_head(name) for name in (*module.imported, *module.bound_imports)} & set(candidates)
        return imported.pop() if len(imported) == 1 else None

    # -- resolution helpers ---------------------------------------------------

    def _is_partial(self, func: ast.expr, module: ModuleSymbols, scope: Scope) -> bool:
        name = module.qualified_name(func, scope)
        return name is not None and (name in PARTIAL or self.project.canonical_name(name) in PARTIAL)

    def _resolve_factory(self, call: ast.Call, module: ModuleSymbols, scope: Scope, depth: int) -> _Target | None:
        """`get_checkpoint_fn()`: a project function that returns a checkpoint API (or a partial of one)."""
        found = self._project_function(call.func, module, scope)
        if found is None:
            return None
        function_module, function_scope = found
        for returned in _returned(function_scope.node):
            target = self.resolve(returned, function_module, function_scope, depth + 1)
            if target is not None:
                return target
        return None

    def _project_function(self, func: ast.expr, module: ModuleSymbols, scope: Scope) -> tuple[ModuleSymbols, Scope] | None:
        """The project function a callee names: a def in scope, an imported one, or `self.<method>`."""
        if isinstance(func, ast.Name):
            binding = module.binding(scope, func.id, func.lineno)
            if binding is not None and binding.kind == DEF:
                function_scope = module.scope_of.get(id(binding.node))
                return (module, function_scope) if function_scope is not None else None
            if binding is not None and binding.kind == IMPORT and binding.target:
                found = self.project.global_binding(binding.target)
                if found is not None and found[1].kind == DEF:
                    other, other_binding = found
                    function_scope = other.scope_of.get(id(other_binding.node))
                    return (other, function_scope) if function_scope is not None else None
            return None
        if isinstance(func, ast.Attribute):
            owner = self._self_class(func.value, module, scope)
            method = self.classes.find_method(owner, func.attr) if owner is not None else None
            if method is not None:
                return method[0].module, method[1]
        return None

    def _resolve_name(self, expr: ast.Name, module: ModuleSymbols, scope: Scope, depth: int) -> _Target | None:
        binding = module.binding(scope, expr.id, expr.lineno)
        if binding is None:
            return None
        if binding.kind == PARAM:
            return self._resolve_parameter(binding, module, depth)
        if binding.kind == ASSIGN and isinstance(binding.value, _ALIASABLE):  # a partial, or `b = a`
            return self.resolve(binding.value, module, binding.written_from or binding.scope, depth + 1)
        if binding.kind == IMPORT and binding.target:
            found = self.project.global_binding(binding.target)
            if found is not None:
                other, other_binding = found
                if other_binding.kind == ASSIGN and isinstance(other_binding.value, _ALIASABLE):
                    return self.resolve(other_binding.value, other, other.scope, depth + 1)
        return None

    def _resolve_parameter(self, binding: Binding, module: ModuleSymbols, depth: int) -> _Target | None:
        """A parameter holding a checkpoint API: its default (`ckpt_fn=checkpoint`), or what the
        module's calls pass (`Block(activation_checkpoint_func=checkpoint)`)."""
        default = parameter_default(binding)
        outer = binding.scope.parent or binding.scope
        if default is not None:
            target = self.resolve(default, module, outer, depth + 1)
            if target is not None:
                return target
        for argument, call_scope in passed_arguments(module, binding.scope, binding.name):
            if self.names.mentioned_in_callee(argument):
                target = self.resolve(argument, module, call_scope, depth + 1)
                if target is not None:
                    return target
        return None

    def _resolve_attribute(self, expr: ast.Attribute, module: ModuleSymbols, scope: Scope, depth: int) -> _Target | None:
        api = self.catalogue.by_attribute(expr.attr)
        if api is not None:
            return _Target(api)
        owner = self._self_class(expr.value, module, scope)
        if owner is not None:
            for assignment in self.classes.attribute_assignments(owner, expr.attr):
                if assignment.value is not None and not assignment.augmented:
                    found = self.resolve(assignment.value, owner.module, assignment.method, depth + 1)
                    if found is not None:
                        return found
        instance_class = self._instance_class_name(expr.value, module, scope)
        if instance_class is not None:
            api = self.api_named(f"{instance_class}.{expr.attr}")
            if api is not None:
                return _Target(api)
        return None

    def _self_class(self, expr: ast.expr, module: ModuleSymbols, scope: Scope) -> ClassInfo | None:
        """The class of `self` when `expr` is the method's first parameter."""
        if not isinstance(expr, ast.Name):
            return None
        info = self.classes.enclosing_class(module, scope)
        if info is None:
            return None
        current: Scope | None = scope
        while current is not None and current.enclosing_class is None:
            current = current.parent
        if current is None or current.first_parameter() != expr.id:
            return None
        return info

    def _instance_class_name(self, expr: ast.expr, module: ModuleSymbols, scope: Scope) -> str | None:
        """`Cls` when `expr` is `Cls(...)`, a name bound to it, or `self.x` assigned it."""
        value: ast.expr | None = expr
        value_module, value_scope = module, scope
        if isinstance(expr, ast.Name):
            binding = module.binding(scope, expr.id, expr.lineno)
            value = binding.value if binding is not None and binding.kind == ASSIGN else None
            if binding is not None:
                value_scope = binding.written_from or binding.scope
        elif isinstance(expr, ast.Attribute):
            owner = self._self_class(expr.value, module, scope)
            value = None
            if owner is not None:
                for assignment in self.classes.attribute_assignments(owner, expr.attr):
                    if isinstance(assignment.value, ast.Call):
                        value, value_module, value_scope = assignment.value, owner.module, assignment.method
                        break
        if not isinstance(value, ast.Call):
            return None
        name = value_module.qualified_name(value.func, value_scope)
        return None if name is None else self.project.canonical_name(name)


def _head(name: str) -> str:
    """The top-level package of a project-internal module name (`diffusers@1.models` -> `diffusers`)."""
    return name.partition(".")[0].partition("@")[0]


def _class_name(call: CheckpointCall) -> str:
    """The layer class a `LAYER_CLASS` call stands for (its node is the class definition)."""
    assert isinstance(call.node, ast.ClassDef)
    return call.node.name


def _lines_matching(source: SourceFile, pattern: re.Pattern[str], words: Iterable[str]) -> list[int]:
    """The numbers of the lines where `pattern` (any of `words` as a whole word) matches, ascending.

    Found with `str.find` for each word the text holds at all, keeping the occurrences with a word
    boundary on both sides: a regex alternation tried at every position of a large module cost
    more than the rest of `derived_names`. A match never spans a line break, so a line holds a
    match exactly when it holds such an occurrence. A word that does not begin and end with a
    word character (which no identifier does) falls back to the pattern itself."""
    text = source.parse_text  # line breaks as `\n`, same line numbers as `source.lines`
    present = [word for word in words if word in text]
    if not present:
        return []
    if not all(_WORD_CHAR.match(word[0]) and _WORD_CHAR.match(word[-1]) for word in present):
        starts = [match.start() for match in pattern.finditer(text)]
    else:
        starts = sorted({start for word in present for start in _whole_word_starts(text, word)})
    hits: list[int] = []
    line, position = 1, 0
    for start in starts:
        line += text.count("\n", position, start)
        position = start
        if not hits or hits[-1] != line:
            hits.append(line)
    return hits


def _whole_word_starts(text: str, word: str) -> Iterator[int]:
    """Where `word` (beginning and ending with a word character) occurs as a whole word, as `\\b` sees it."""
    start = text.find(word)
    while start >= 0:
        end = start + len(word)
        if (start == 0 or not _WORD_CHAR.match(text, start - 1)) and (end == len(text) or not _WORD_CHAR.match(text, end)):
            yield start
        start = text.find(word, start + 1)


def _any_between(hits: list[int], first: int, last: int) -> bool:
    """Whether a line number in `hits` (ascending) lies in `first..last`."""
    index = bisect.bisect_left(hits, first)
    return index < len(hits) and hits[index] <= last


def _spelled_within(hits: list[int], node: ast.expr) -> bool:
    """Whether a line of `node` is in `hits` (ascending)."""
    return _any_between(hits, node.lineno, node.end_lineno or node.lineno)


def _returned(node: ast.AST) -> list[ast.expr]:
    """The expressions a function returns (not those of functions nested in it)."""
    found: list[ast.expr] = []
    stack = list(getattr(node, "body", []))
    while stack:
        current = stack.pop()
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(current, ast.Return) and current.value is not None:
            found.append(current.value)
        stack.extend(c for c in ast.iter_child_nodes(current) if isinstance(c, ast.stmt | ast.excepthandler | ast.match_case))
    return found


def _named_false(value: ast.expr | None) -> str:
    return f" (`{value.id}` is False)" if isinstance(value, ast.Name) else ""
