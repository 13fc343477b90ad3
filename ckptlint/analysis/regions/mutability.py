"""Which state can change between forward and replay: for CKP206 and for CKP204's buffers.

A module-level name is mutable when some function rebinds it (`global`) or mutates it;
an attribute when some method other than `__init__` (or a helper only `__init__` calls)
assigns or mutates it. `self.training` is set by torch's `Module.train()`, outside the
project, and never counts. Buffers and parameters are the attributes registered with
`register_buffer`/`register_parameter` or assigned an `nn.Parameter`.
"""

from __future__ import annotations

import ast
import bisect
from typing import Iterator

from ckptlint.analysis.knowledge import torch_api
from ckptlint.classes import ClassIndex, ClassInfo
from ckptlint.passed_arguments import calls_of, parameter_position, passed_argument
from ckptlint.symbols import (
    ASSIGN,
    MODULE,
    OTHER,
    UNPACK,
    ModuleSymbols,
    Scope,
    positional_parameters,
)
from ckptlint.syntax import walk, walk_branches

_MUTATING_METHODS = torch_api.CONTAINER_MUTATORS | torch_api.CONTAINER_ONLY_MUTATORS
_PARAMETER_CLASSES = ("torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer", "torch.nn.parameter.Buffer")


def _is_inplace(method: str) -> bool:
    return method.endswith("_") and not method.startswith("_") and method not in torch_api.NOT_INPLACE


def _written_roots(node: ast.AST) -> Iterator[tuple[ast.expr, str]]:
    """(the expression whose object is changed, how) for a statement or call."""
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    elif isinstance(node, ast.Delete):
        targets = list(node.targets)
    for target in targets:
        elements = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
        for element in elements:
            if isinstance(element, ast.Subscript):
                yield element.value, "item assignment"
            elif isinstance(element, ast.Attribute):
                yield element, "assignment"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        method = node.func.attr
        if method in _MUTATING_METHODS or _is_inplace(method):
            yield node.func.value, f".{method}()"


class FunctionFacts:
    """What one walk over a function finds, kept on the node: every analysis asks again.

    `writes`: (statement or call, changed expression, how); `lazy`: names and paths whose
    writes leave no trace a replay could repeat: tested before being set (lazy
    initialisation, memos), everything an initialiser guarded by a "done" flag sets, and
    what the function saves and restores (`old = self.mode; ...; self.mode = old`);
    `calls_on`: (receiver name, method) called; `called_names`: plain calls; `registered`:
    names given to `register_buffer`/`register_parameter`.
    """

    __slots__ = ("writes", "lazy", "once", "calls_on", "called_names", "registered")

    def __init__(self, function: ast.AST):
        self.writes: list[tuple[ast.AST, ast.expr, str]] = []
        self.calls_on: set[tuple[str, str]] = set()
        self.called_names: set[str] = set()
        self.registered: set[str] = set()
        lazy: set[str] = set()
        truth_tested: set[str] = set()  # names and paths tested for None or truth
        exit_tested: set[str] = set()  # ... by a guard that returns early
        set_true: set[str] = set()  # names and paths assigned a true constant (a "done" flag)
        assigned_paths: set[str] = set()  # names and paths assigned
        copies: list[tuple[str, str]] = []  # (target, source) of `a = b.c` and `b.c = a`
        converted: set[str] = set()  # `self.router = self.router.to(self.dtype)`: converted into itself
        bindings_of: dict[str, int] = {}  # how often each local name is bound
        for node in walk_branches(function):  # no name or constant is a statement, call or test
            for root, how in _written_roots(node):
                self.writes.append((node, root, how))
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.With)):
                for bound in _bound_names(node):
                    bindings_of[bound] = bindings_of.get(bound, 0) + 1
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = dotted_path(node.targets[0]), dotted_path(node.value)
                if target is not None:
                    assigned_paths.add(target)
                    if isinstance(node.value, ast.Constant) and node.value.value:
                        set_true.add(target)
                    if converts_into_itself(node.value, node.targets[0]) or _set_unless_set(node.value, target):
                        converted.add(target)
                    if value is not None and value != target:
                        copies.append((target, value))
            if isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Name):
                    self.called_names.add(func.id)
                elif isinstance(func, ast.Attribute):
                    if isinstance(func.value, ast.Name):
                        self.calls_on.add((func.value.id, func.attr))
                    if func.attr in ("register_buffer", "register_parameter") and node.args:
                        first = node.args[0]
                        if isinstance(first, ast.Constant) and isinstance(first.value, str):
                            self.registered.add(first.value)
            elif isinstance(node, (ast.If, ast.IfExp, ast.While)):
                tested_here = set(_tested_for_none_or_truth(node.test))
                truth_tested |= tested_here
                lazy |= tested_here
                if isinstance(node, ast.If) and not node.orelse and isinstance(node.body[-1], ast.Return):
                    exit_tested |= _tested_as_set(node.test)  # `if _cache is not None: return _cache`: what follows runs once
                if isinstance(node, ast.If):
                    # a guard its body closes sets everything under it once: memoisation (`if key !=
                    # _loaded: _fn = load(key); _loaded = key`), lazy initialisation with its siblings
                    # (`if self.pad is None: self.pad = ...; self.pad_size = n`), `if n > self.cached: ...`
                    tested = {path for n in walk(node.test) if isinstance(n, ast.expr) for path in [dotted_path(n)] if path}
                    if tested:
                        assigned = _assigned_in(node.body)
                        if tested & assigned:
                            lazy.update(assigned)
        once: set[str] = set()
        if truth_tested & set_true:  # `if _READY: return; _TRACKER = make(); _READY = True`
            once.update(assigned_paths)
        # `if _cache is not None: return _cache` ... `_cache = load()`: set on the first call, and a
        # replay returns early (transformers' mamba kernel loader)
        once.update(exit_tested & assigned_paths)
        # `old = self.mode` (old bound once) ... `self.mode = old`: the function leaves it as it found it
        saved = {target: source for target, source in copies if bindings_of.get(target) == 1}
        restored = {target for target, source in copies if saved.get(source) == target}
        self.once = frozenset(once | restored | converted)
        self.lazy = frozenset(lazy | self.once)


def function_facts(function: ast.AST) -> FunctionFacts:
    facts = getattr(function, "_ckptlint_facts", None)
    if facts is None:
        facts = FunctionFacts(function)
        function._ckptlint_facts = facts  # type: ignore[attr-defined]  # a memo kept on the node, freed with its tree
    return facts


def lazy_initialised_names(function: ast.AST) -> frozenset[str]:
    """Names a function tests for None or truth before setting them: `if _cache is None: _cache = ...`.

    Writing such a global is lazy initialisation or memoisation: the first call sets it and
    every later one (a replay included) sees the same value.
    """
    return function_facts(function).lazy


def set_once_or_restored(function: ast.AST) -> frozenset[str]:
    """Names and paths a function sets behind a "done" flag it sets itself, saves and puts
    back, or converts into itself (`self.router = self.router.to(self.dtype)`): the replay
    leaves them as the forward did. (Guards that test the state they set are
    followed where they stand, by the interpreter; `lazy_initialised_names` is wider.)"""
    return function_facts(function).once


# methods whose result, applied again to their own result, is the same: module and tensor
# conversions (`.to(dtype)`, `.float()`, `.train()` return the module itself)
IDEMPOTENT_CONVERSIONS = frozenset({"to", "float", "half", "bfloat16", "double", "type", "contiguous", "cpu", "cuda", "train", "eval", "requires_grad_"})


def converts_into_itself(value: ast.expr, target: ast.expr) -> bool:
    """`x.a = x.a.to(...)`, `x[i] = x[i].to(device)`: the target converted into itself (the
    same contents), which a replay repeats to no effect and a later read sees unchanged."""
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in IDEMPOTENT_CONVERSIONS
        and ast.dump(value.func.value) == ast.dump(target).replace("ctx=Store()", "ctx=Load()")
    )


def _set_unless_set(value: ast.expr, target: str) -> bool:
    """`x.a = v if x.a is None else x.a`, `x.a = x.a or v`: set the first time, kept after,
    so the replay keeps what the forward set."""
    if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.Or):
        return dotted_path(value.values[0]) == target
    if not isinstance(value, ast.IfExp) or target not in _tested_for_none_or_truth(value.test):
        return False
    return target in (dotted_path(value.body), dotted_path(value.orelse))


def _assigned_in(body: list[ast.stmt]) -> set[str]:
    """The paths (`x`, `self.x`) and names (`a, b = ...`) that the statements' assignments,
    nested ones included, write: one walk, without leaves (an `If` inside an `If` is walked
    again for each enclosing one)."""
    assigned: set[str] = set()
    for statement in body:
        for node in walk_branches(statement):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    path = dotted_path(target)
                    if path:
                        assigned.add(path)
                assigned.update(name.id for name in _names(node.targets))
    return assigned


def _names(targets: list[ast.expr]) -> Iterator[ast.Name]:
    for target in targets:
        if isinstance(target, ast.Name):
            yield target
        elif isinstance(target, (ast.Tuple, ast.List)):
            yield from _names(list(target.elts))


def _bound_names(node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)):
        targets = [node.target]
    else:
        targets = [item.optional_vars for item in node.items if item.optional_vars is not None]  # type: ignore[attr-defined]  # the remaining binding statements are `with`
    for name in _names(targets):
        yield name.id


def dotted_path(expr: ast.expr) -> str | None:
    """`name` or `name.attribute`: the forms lazy, memoised and restored state is named in."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        return f"{expr.value.id}.{expr.attr}"
    return None


def _tested_as_set(test: ast.expr) -> set[str]:
    """The state a test finds already set: `x.a is not None`, `x.a` (not `x.a is None`, whose
    early return leaves the unset case to the code after it)."""
    path = dotted_path(test)
    if path is not None:
        return {path}
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.IsNot, ast.NotEq)):
        other = test.comparators[0]
        left = dotted_path(test.left)
        if isinstance(other, ast.Constant) and other.value is None and left is not None:
            return {left}
    return set()


def _tested_for_none_or_truth(test: ast.expr) -> Iterator[str]:
    """Names (`_cache`) and attribute paths (`self._ready`) a condition tests for None or truth."""
    path = dotted_path(test)
    if path is not None:
        yield path
    elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        yield from _tested_for_none_or_truth(test.operand)
    elif isinstance(test, ast.BoolOp):
        for value in test.values:
            yield from _tested_for_none_or_truth(value)
    elif isinstance(test, ast.Compare) and len(test.comparators) == 1:
        other = test.comparators[0]
        if isinstance(other, ast.Constant) and other.value in (None, False, True):
            yield from _tested_for_none_or_truth(test.left)
        elif isinstance(test.ops[0], (ast.In, ast.NotIn)):
            # `if key not in cache: cache[key] = ...`: a memo the replay finds filled
            yield from _tested_for_none_or_truth(other)


class Mutability:
    def __init__(self, classes: ClassIndex):
        self.classes = classes
        self._globals: dict[int, dict[str, str]] = {}
        self._attributes: dict[int, dict[str, str]] = {}
        self._tensors: dict[int, frozenset[str]] = {}

    def mutable_globals(self, module: ModuleSymbols) -> dict[str, str]:
        """Module-level names changed at run time, each with where (for messages)."""
        cached = self._globals.get(id(module))
        if cached is not None:
            return cached
        found: dict[str, str] = {}
        construction_only = _called_only_at_construction(module)
        for name, bindings in module.scope.bindings.items():
            for binding in bindings:
                writer = binding.written_from
                if writer is None or writer.qualname in construction_only or _is_configuration_setter(writer.node):
                    continue
                if getattr(writer.node, "name", "") in torch_api.INIT_LIKE_METHODS:
                    continue  # `global ATTENTION_MODE` set by a model's `__init__`: configuration fixed at construction
                if name not in lazy_initialised_names(writer.node):
                    where = writer.qualname or "<module>"
                    found.setdefault(name, f"reassigned in {where} (line {binding.line})")
        for function, _ in module.functions:
            scope = module.scope_of[id(function)]
            if scope.qualname in construction_only:
                continue
            facts = function_facts(function)
            for node, root, how in facts.writes:
                while isinstance(root, (ast.Attribute, ast.Subscript)):
                    root = root.value
                if not isinstance(root, ast.Name) or root.id in found:
                    continue
                if root.id in facts.lazy and not isinstance(node, ast.AugAssign):
                    continue
                bindings = module.lookup(scope, root.id)
                if bindings and all(b.scope.kind == MODULE and b.kind in (ASSIGN, OTHER, UNPACK) for b in bindings):
                    found[root.id] = f"mutated by {how} in {scope.qualname} (line {node.lineno})"  # type: ignore[attr-defined]  # writes are statements or expressions, which have positions
        self._globals[id(module)] = found
        return found

    def mutable_attributes(self, info: ClassInfo) -> dict[str, str]:
        """`self.<attr>` written outside `__init__` by the class or its project bases."""
        cached = self._attributes.get(id(info.scope))
        if cached is not None:
            return cached
        found: dict[str, str] = {}
        for cls in self.classes.mro(info):
            for attribute, where in _own_mutable_attributes(cls).items():
                found.setdefault(attribute, where)
            for attribute, where in walked_attributes(cls.module).items():
                found.setdefault(attribute, where)
        self._attributes[id(info.scope)] = found
        return found

    def tensor_attributes(self, info: ClassInfo) -> frozenset[str]:
        """Buffers and parameters of the class (and its project bases)."""
        cached = self._tensors.get(id(info.scope))
        if cached is not None:
            return cached
        found: set[str] = set()
        for cls in self.classes.mro(info):
            found |= _own_tensor_attributes(cls)
        result = frozenset(found)
        self._tensors[id(info.scope)] = result
        return result


def _own_mutable_attributes(cls: ClassInfo) -> dict[str, str]:
    """What `mutable_attributes` finds in one class's own methods (kept on the class node)."""
    cached: dict[str, str] | None = getattr(cls.node, "_ckptlint_mutable", None)
    if cached is not None:
        return cached
    found: dict[str, str] = {}
    init_only = _init_only_methods(cls)
    called_in_a_step = _called_from_forwards(cls.module)
    for method in cls.methods():
        name = method.node.name  # type: ignore[attr-defined]  # a method scope's node is a def
        receiver = method.first_parameter()
        if name in init_only or receiver is None:
            continue
        setter = _is_configuration_setter(method.node)
        configures = not _is_forward_like(name) and name not in called_in_a_step
        facts = function_facts(method.node)  # lazy: `if not self._ready: ...; self._ready = True`
        for node, root, how in facts.writes:
            if setter and not _stores_a_tensor(node, method.node):
                continue
            if configures and _stores_a_constant(node):
                continue  # `prune_to_tap(): self.no_skip = True`: set between steps, never between a forward and its backward
            attribute = _self_attribute(root, receiver)
            if attribute is not None and f"{receiver}.{attribute}" in facts.lazy and not isinstance(node, ast.AugAssign):
                continue  # lazy initialisation or a keyed memo
            if attribute is not None and attribute not in found:
                found[attribute] = f"written by {how} in {cls.name}.{name} (line {node.lineno})"  # type: ignore[attr-defined]  # writes are statements or expressions, which have positions
    cls.node._ckptlint_mutable = found  # type: ignore[attr-defined]  # a memo kept on the node, freed with its tree
    return found


MODULE_WALKS = frozenset({"modules", "named_modules", "children", "named_children"})


def walked_attributes(module: ModuleSymbols) -> dict[str, str]:
    """Attributes a function of `module` writes on the submodules a walk reaches, by name:
    `for m in self.modules(): if hasattr(m, "is_first_chunk"): m.is_first_chunk = flag`
    (diffusers' VidTok flips its causal convolutions' chunk flag between chunks that way).
    Any class of the module that holds such an attribute may see it change between a
    forward and its replay when the writer runs between forwards: it is a forward, or it is
    called inside a loop with a value that may change (`for idx, chunk in ...:
    self._set_first_chunk(idx == 0)`). A writer called once before the forwards, or given the
    same constant each time (VidTok's `_set_cache_offset([self.decoder], 1)`), configures."""
    cached: dict[str, str] | None = getattr(module.tree, "_ckptlint_walked", None)
    if cached is not None:
        return cached
    found: dict[str, str] = {}
    # a walk's loop iterates over one of the module's calls: only functions holding such a
    # call are walked for the loop (walking every function was 8% of a cold run on transformers)
    walk_calls = [call for call, _ in module.calls if _walks_modules(call)]
    lines = sorted(call.lineno for call in walk_calls)
    iterated = {id(call) for call in walk_calls}
    walks = [
        (f, loop)
        for f, _ in (module.functions if walk_calls else ())
        if _any_line_between(lines, f.lineno, f.end_lineno or f.lineno)
        for loop in walk(f)
        if isinstance(loop, (ast.For, ast.AsyncFor)) and id(loop.iter) in iterated
    ]
    looped = _calls_in_loops(module) if walks else frozenset()
    for function, loop in walks:
        scope = module.scope_of[id(function)]
        forward = _is_forward_like(getattr(function, "name", ""))
        calls = [call for call, _ in calls_of(module, scope) if id(call) in looped]
        if not calls and not forward:
            continue
        for node, attribute in _writes_on_walked(loop):
            if forward or not _always_a_constant(node.value, scope, calls):
                found.setdefault(attribute, f"written on every module a walk reaches in {scope.qualname} (line {node.lineno})")
    module.tree._ckptlint_walked = found  # type: ignore[attr-defined]  # a memo kept on the tree, freed with it
    return found


def _any_line_between(lines: list[int], first: int, last: int) -> bool:
    """Whether a number in `lines` (ascending) lies in `first..last`."""
    index = bisect.bisect_left(lines, first)
    return index < len(lines) and lines[index] <= last


def _writes_on_walked(loop: ast.For | ast.AsyncFor) -> Iterator[tuple[ast.Assign | ast.AugAssign, str]]:
    """(the statement, the attribute) for each `m.attr = v` / `m.attr += v` on the loop's target."""
    targets = {n.id for n in walk(loop.target) if isinstance(n, ast.Name)}
    for statement in loop.body:
        for node in walk(statement):
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id in targets:
                        yield node, target.attr


def _calls_in_loops(module: ModuleSymbols) -> frozenset[int]:
    """The calls `module` makes inside a loop body (by node id)."""
    return frozenset(
        id(node)
        for loop in walk(module.tree)
        if isinstance(loop, (ast.For, ast.AsyncFor, ast.While))
        for statement in loop.body
        for node in walk(statement)
        if isinstance(node, ast.Call)
    )


def _always_a_constant(value: ast.expr | None, scope: Scope, calls: list[ast.Call]) -> bool:
    """The written value is a constant, or a parameter each of `calls` passes a constant."""
    if isinstance(value, ast.Constant):
        return True
    if not isinstance(value, ast.Name):
        return False
    position = parameter_position(scope, value.id)
    if position is None:
        return False
    passed = [passed_argument(call, value.id, position) for call in calls]
    return all(argument is None or isinstance(argument, ast.Constant) for argument in passed)  # None: the default


def _walks_modules(iterable: ast.expr) -> bool:
    """`self.modules()`, `parent.named_modules()`, `module.children()`."""
    return isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) and iterable.func.attr in MODULE_WALKS


def _own_tensor_attributes(cls: ClassInfo) -> frozenset[str]:
    cached: frozenset[str] | None = getattr(cls.node, "_ckptlint_tensors", None)
    if cached is not None:
        return cached
    found: set[str] = set()
    for method in cls.methods():
        found |= function_facts(method.node).registered
    for attribute, assignments in cls.attribute_assignments.items():
        for assignment in assignments:
            value = assignment.value
            if isinstance(value, ast.Call):
                name = cls.module.qualified_name(value.func, assignment.method)
                if name in _PARAMETER_CLASSES:
                    found.add(attribute)
    result = frozenset(found)
    cls.node._ckptlint_tensors = result  # type: ignore[attr-defined]  # a memo kept on the node, freed with its tree
    return result


CONFIGURATION_PREFIXES = (
    "set_",
    "_set_",
    "enable_",
    "disable_",
    "prepare_for_",
    "configure",
    "reparameterize",
    "reparameterise",
    "fuse",
    "switch_to_deploy",
    "initialize",  # process set-up and tear-down (`initialize_model_parallel`) do not run
    "initialise",  # between a micro-batch's forward and its backward
    "destroy",
)


def _is_configuration_setter(function: ast.AST) -> bool:
    """`@x.setter` properties and `set_*`/`enable_*`/`prepare_for_*` methods configure a model between runs."""
    name = getattr(function, "name", "")
    decorators = getattr(function, "decorator_list", ())
    is_property_setter = any(isinstance(d, ast.Attribute) and d.attr == "setter" for d in decorators)
    return is_property_setter or name.startswith(CONFIGURATION_PREFIXES)


def _called_only_at_construction(module: ModuleSymbols) -> set[str]:
    """Module-level functions whose every call in the module is inside an `__init__`:
    what they set (a kernel loaded into a global) is fixed before any forward runs."""
    callers: dict[str, set[str]] = {}
    for function, _ in module.functions:
        for called in function_facts(function).called_names:
            callers.setdefault(called, set()).add(function.name)
    return {
        name
        for name, called_from in callers.items()
        if called_from <= torch_api.INIT_LIKE_METHODS and name in module.scope.bindings
    }


def _is_forward_like(name: str) -> bool:
    return name in ("forward", "__call__") or name.startswith(("forward", "_forward"))


def _inside_forward(scope: Scope | None) -> bool:
    """Whether a scope is a forward-like function or lies inside one (a nested helper)."""
    while scope is not None:
        if isinstance(scope.node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_forward_like(scope.node.name):
            return True
        scope = scope.parent
    return False


def _called_from_forwards(module: ModuleSymbols) -> frozenset[str]:
    """Methods the module's forward-like functions call (`self.adapter.freeze()` inside a
    forward): what they write can change between a forward and its replay."""
    cached: frozenset[str] | None = getattr(module, "_ckptlint_step_calls", None)
    if cached is not None:
        return cached
    names = frozenset(call.func.attr for call, scope in module.calls if isinstance(call.func, ast.Attribute) and _inside_forward(scope))
    module._ckptlint_step_calls = names  # type: ignore[attr-defined]  # a memo kept on the module's symbols
    return names


def _stores_a_constant(node: ast.AST) -> bool:
    """`self.flag = True`, `self.cache[i] = None`, `self.stack[-1] = nn.Identity()`: a value
    the write cannot take from the state it changes."""
    if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
        return False
    value = node.value
    if isinstance(value, ast.Call):
        arguments = [*value.args, *(k.value for k in value.keywords)]
        return dotted_path(value.func) is not None and all(isinstance(a, ast.Constant) for a in arguments)
    return isinstance(value, ast.Constant)


def _stores_a_tensor(node: ast.AST, function: ast.AST) -> bool:
    """A setter that stores a tensor still counts: pipeline schedules call `set_input_tensor`
    between a micro-batch's forward and its backward."""
    if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
        return False
    value = node.value
    if isinstance(value, ast.Name):
        args = getattr(function, "args", None)
        for parameter in [*positional_parameters(args), *args.kwonlyargs] if args else []:
            if parameter.arg == value.id and parameter.annotation is not None:
                return "Tensor" in ast.unparse(parameter.annotation)
    return False


def _self_attribute(expr: ast.expr, receiver: str) -> str | None:
    """`attr` for `self.attr`, `self.attr[k]`, `self.attr.x` (the first attribute off self)."""
    while isinstance(expr, (ast.Attribute, ast.Subscript)):
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == receiver:
            return expr.attr
        expr = expr.value
    return None


def _init_only_methods(cls: ClassInfo) -> set[str]:
    """`__init__` and the helpers that only `__init__`-like methods call (`self._build()`)."""
    callers: dict[str, set[str]] = {}
    for method in cls.methods():
        name = method.node.name  # type: ignore[attr-defined]  # a method scope's node is a def
        receiver = method.first_parameter()
        for called_on, attribute in function_facts(method.node).calls_on:
            if called_on == receiver:
                callers.setdefault(attribute, set()).add(name)
    init_like = set(torch_api.INIT_LIKE_METHODS)
    for name, called_from in callers.items():
        if called_from and called_from <= torch_api.INIT_LIKE_METHODS:
            init_like.add(name)
    return init_like
