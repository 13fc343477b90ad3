"""Effect summaries: what running a function does that a replay would do differently or twice.

`FunctionInterpreter` walks one function's statements in order, tracking for each local
name where its object comes from (`values.Value`): created in the region, an input,
outer state, a module-level global. It records an `Effect` for every random draw,
mutation of state that outlives the region, in-place op on a tensor that outlives it,
running-statistics update, device move and branch on unstable state. Calls into project
code are followed: `Summaries.summary` computes each (function, calling context)
once and the caller adds the callee's effects with the call chain. Rules read effects;
they never walk trees.

This module holds the walk: statements, expressions, calls, and the log of effects. What a
library call does is library_calls.py's; which effect a write is (CKP202, 203 or 204, a
read-before-write or a volatile store, or none) is replay_writes.py's. Both take the
interpreter as an argument (protocol.py) rather than holding it: the analysis runs with the
cyclic garbage collector off.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import replace
from typing import Callable, Iterable, Sequence

from ckptlint.analysis.flow.grad_mode import eval_only, grad_off_only
from ckptlint.analysis.knowledge import torch_api
from ckptlint.analysis.regions import binding, replay_writes
from ckptlint.analysis.regions.checkpoint_choice import only_chooses_checkpointing
from ckptlint.analysis.regions.coverage import CallLog
from ckptlint.analysis.regions.dispatch import CallDispatch
from ckptlint.analysis.regions.library_calls import LibraryCalls
from ckptlint.analysis.regions.mutability import (
    Mutability,
    converts_into_itself,
    dotted_path,
)
from ckptlint.analysis.regions.replay_writes import (
    WRITE_KINDS,
    WriteTracker,
    body_rebinds,
    drop_effects,
    input_tensor,
    state_keys,
)
from ckptlint.analysis.regions.summary import (
    EMPTY_SUMMARY,
    GRAD_MODE_BRANCH,
    UNSTABLE_BRANCH,
    Context,
    Effect,
    HandedIndices,
    ReturnedSelection,
    StateKey,
    Summary,
    under_condition,
)
from ckptlint.analysis.semantics.evaluator import TypeInference
from ckptlint.analysis.semantics.known_truth import (
    TRUTH_TYPES,
    argument_guard,
    constant_value,
    known_truth,
    none_default_parameters,
)
from ckptlint.analysis.semantics.run_arguments import mode_condition
from ckptlint.analysis.semantics.values import (
    CHECKPOINT_PHASE,
    CONST,
    CONST_VALUE,
    GLOBAL,
    GRAD_MODE,
    LOCAL,
    LOCAL_VALUE,
    NONE_TYPE,
    OUTER,
    ClassType,
    ContainerType,
    FunctionType,
    TupleType,
    Type,
    Types,
    Value,
    Volatility,
    element_types,
    merge,
    number_of,
    ordered,
    unpacked_types,
)
from ckptlint.analysis.semantics.version_tests import version_truth
from ckptlint.classes import ClassIndex
from ckptlint.project import Project
from ckptlint.symbols import (
    ASSIGN,
    CLASSDEF,
    COMPREHENSION,
    DEF,
    IMPORT,
    LOOP,
    MODULE,
    OTHER,
    UNPACK,
    Binding,
    ModuleSymbols,
    Scope,
)
from ckptlint.syntax import child_nodes, walk

MAX_CALL_DEPTH = 12


class Summaries:
    """Summaries of project functions, each computed once per calling context."""

    def __init__(self, project: Project, classes: ClassIndex, inference: TypeInference, mutability: Mutability, record_calls: bool = False):
        self.project = project
        self.record_calls = record_calls  # log each call's resolution in the summaries (coverage.py)
        self.classes = classes
        self.inference = inference
        self.mutability = mutability
        self._memo: dict[tuple[int, Context], Summary] = {}
        self._active: set[tuple[int, Context]] = set()

    def summary(self, module: ModuleSymbols, scope: Scope, context: Context) -> Summary:
        key = (id(scope.node), context)
        cached = self._memo.get(key)
        if cached is not None:
            return cached
        if key in self._active or len(self._active) >= MAX_CALL_DEPTH:
            return EMPTY_SUMMARY  # recursion, or too deep to matter
        self._active.add(key)
        try:
            result = FunctionInterpreter(self, module, scope, context).run()
        finally:
            self._active.discard(key)
        self._memo[key] = result
        return result


class FunctionInterpreter(CallDispatch):
    library = LibraryCalls()  # torch, NumPy, random and builtins calls
    analysis: Summaries  # more than the plugins' view of it (protocol.SummariesView)

    def __init__(self, analysis: Summaries, module: ModuleSymbols, scope: Scope, context: Context):
        self.analysis = analysis
        self.inference = analysis.inference
        self.module = module
        self.scope = scope
        self.context = context
        self.env: dict[str, Value] = {}
        self.closure = dict(context.closure)
        self.effects: list[Effect] = []
        self.returned_selections: list[ReturnedSelection] = []
        self.handed_indices: list[HandedIndices] = []
        self._seen: set[tuple[str, int]] = set()
        self.conditions: list[str] = []  # what the branches being run need of the call (argument_guard)
        self.optional_parameters = none_default_parameters(scope.node)
        self.returns: list[Value] = []
        self.tracker = WriteTracker()  # what this execution has read and written of outliving state
        self.calls = CallLog() if analysis.record_calls else None
        self.imported: set[str] = set()  # locals bound by an import statement in this function

    # -- driver ---------------------------------------------------------------

    def run(self) -> Summary:
        self.bind_parameters()
        node = self.scope.node
        if isinstance(node, ast.Lambda):
            self.returns.append(self.eval(node.body))
        else:
            self.block(node.body)  # type: ignore[attr-defined]  # not a lambda: a def or a module, whose body is statements
        tracker = self.tracker
        return Summary(
            tuple(self.effects),
            merge(self.returns) if self.returns else LOCAL_VALUE,
            writes=frozenset(tracker.written),
            reads=frozenset(tracker.read_first | tracker.exit_reads),
            settled=frozenset(tracker.settled),
            accumulated=frozenset(tracker.accumulated),
            pending=tuple(tracker.pending),
            calls=tuple(self.calls.edges.values()) if self.calls is not None else (),
            stored_attributes=self._stored_attributes(),
            returned_selections=tuple(self.returned_selections),
        )

    def _stored_attributes(self) -> tuple[tuple[str, Value], ...]:
        """The receiver's attributes this method assigned (or a method it called on `self` did)."""
        receiver = self.scope.first_parameter() if self.context.receiver is not None else None
        if receiver is None:
            return ()
        prefix = receiver + "."
        return tuple(sorted((key[len(prefix) :], value) for key, value in self.env.items() if key.startswith(prefix)))

    def bind_parameters(self) -> None:
        annotation_types = functools.partial(binding.annotation_types, self.inference, self.module, self.scope.parent or self.scope)
        self.env.update(binding.parameter_values(self.scope.node, self.context, annotation_types))

    # -- effects (which one a write is: replay_writes.py) ---------------------

    def add(self, kind: str, node: ast.AST, variant: str, depends_on: frozenset[tuple[str, str]] = frozenset(), **facts: str) -> None:
        """Record an effect of this function; `facts` are what the rule's message quotes."""
        self.record(Effect(kind, self.module, node, variant, tuple(facts.items()), depends_on=depends_on))

    def record(self, effect: Effect) -> None:
        if effect.depends_on and effect.depends_on <= self.tracker.settled:
            return  # the region stored that state itself earlier in this run: the replay reads the same
        if self.conditions:
            effect = under_condition(effect, self.conditions[-1])
        if effect.key not in self._seen:
            self._seen.add(effect.key)
            self.effects.append(effect)

    def inference_only(self, node: ast.AST, names: Callable[[], set[str]] | None = None) -> bool:
        """Whether what `node` computes reaches no differentiated computation, read from this
        function (flow/grad_mode.py): it runs only in eval mode, or with grad off and neither
        it nor `names()` (the names computed from it) leave the grad-off code (CKP504)."""
        return eval_only(self.scope, node) or (names is not None and grad_off_only(self.scope, node, names))

    def mutate(self, target: Value, node: ast.AST, action: str, tensor: bool = False) -> None:
        replay_writes.mutate(self, target, node, action, tensor)  # LibraryCalls' entry into the write policy

    def overwrite(self, target: Value, node: ast.AST, action: str, value: Value) -> None:
        replay_writes.overwrite(self, target, node, action, value)  # `.copy_(v)`, `.fill_(v)`, `.zero_()`

    def store_attribute(self, base: Value, attribute: str, node: ast.AST, action: str, value: Value) -> None:
        replay_writes.store_attribute(self, base, attribute, node, action, value)  # for `setattr()`

    def read_state(self, keys: Iterable[StateKey]) -> None:
        self.tracker.read(keys)

    def branch(self, test: ast.AST, value: Value) -> None:
        others = sorted(value.volatile - {GRAD_MODE, CHECKPOINT_PHASE})
        reasons = [reason.text for reason in others]
        states = [r.state for r in others if r.state is not None]
        depends_on = frozenset(states) if others and len(states) == len(others) else frozenset()
        if GRAD_MODE in value.volatile:
            self.add(GRAD_MODE_BRANCH, test, "grad-mode")
        if reasons:
            self.add(UNSTABLE_BRANCH, test, "unstable", depends_on=depends_on, reasons="; ".join(reasons))

    # -- statements -----------------------------------------------------------

    def block(self, statements: Sequence[ast.stmt]) -> None:
        for statement in statements:
            self.statement(statement)

    def branches(self, *bodies: Sequence[ast.stmt], conditions: Sequence[str] = ()) -> None:
        """Run alternative bodies from the same state and merge what names may hold after;
        `conditions`: what each body needs of the call (`the caller passes `cache``), for messages."""
        start = dict(self.env)
        outcomes = []
        before = self.tracker.before_alternatives()
        arms = []
        for number, body in enumerate(bodies):
            self.env = dict(start)
            if number:
                arms.append(self.tracker.enter_alternative(before))
            mark = self.tracker.mark(0)
            condition = conditions[number] if number < len(conditions) else ""
            if condition:
                self.conditions.append(condition)
            self.block(body)
            if condition:
                self.conditions.pop()
            if body and isinstance(body[-1], (ast.Return, ast.Raise)):
                self.tracker.leave_reads(mark)  # `if _READY: return _REGISTRY`: no later statement follows that read
            outcomes.append(self.env)
        self.tracker.after_alternatives(arms)
        self.env = _merge_envs(outcomes)

    def loop(self, body: Sequence[ast.stmt], orelse: Sequence[ast.stmt]) -> None:
        start = dict(self.env)
        self.block(body)
        self.env = _merge_envs([start, self.env])
        self.block(body)  # second pass sees what the first iteration rebound
        self.env = _merge_envs([start, self.env])
        self.block(orelse)

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Expr):
            self.eval(node.value)
        elif isinstance(node, ast.Assign):
            value = self.eval(node.value)
            for target in node.targets:
                self.assign(target, value, node)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self.assign(node.target, self.eval(node.value), node)
        elif isinstance(node, ast.AugAssign):
            self.augmented_assign(node)
        elif isinstance(node, ast.Return):
            if node.value is not None:
                self.returns.append(self.eval(node.value))
        elif isinstance(node, ast.If):
            self.if_statement(node)
        elif isinstance(node, ast.While):
            self.branch(node.test, self.eval(node.test))
            self.loop(node.body, node.orelse)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            iterable = self.eval(node.iter)
            self.branch(node.iter, iterable)
            self.assign(node.target, self.element(iterable, node.iter), node)
            self.loop(node.body, node.orelse)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                self.eval(item.context_expr)
                if item.optional_vars is not None:
                    self.assign(item.optional_vars, LOCAL_VALUE, node)
            self.block(node.body)
        elif isinstance(node, (ast.Try, ast.TryStar)):
            self.block(node.body)
            handlers = []
            for handler in node.handlers:
                if handler.name:
                    self.env[handler.name] = LOCAL_VALUE
                handlers.append(handler.body)
            self.branches(node.orelse, *handlers)
            self.block(node.finalbody)
        elif isinstance(node, ast.Match):
            self.eval(node.subject)
            self.branches(*(case.body for case in node.cases))
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                if isinstance(target, ast.Subscript):
                    self.mutate(self.eval(target.value), target, "`del` on an item of")
                elif isinstance(target, ast.Attribute):
                    self.mutate(self.eval(target.value), target, f"`del .{target.attr}` on")
        elif isinstance(node, (ast.Raise, ast.Assert)):
            for child in child_nodes(node):
                if isinstance(child, ast.expr):
                    self.eval(child)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                self.eval(decorator)
            self.env[node.name] = Value(frozenset({LOCAL}), frozenset({self.local_function(node)}), path=node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                name = alias.asname or alias.name.partition(".")[0]
                self.env[name] = Value(frozenset({CONST}), self._imported_types(name, node), path=name)
                self.imported.add(name)  # `import random` in a function: `random.random()` is still a draw

    def _imported_types(self, name: str, statement: ast.Import | ast.ImportFrom) -> Types:
        """What an import in the function binds (`from .blocks import helper`: the function,
        whose body a call then runs), as a module-level import of it would."""
        bound = next((b for b in self.scope.bindings.get(name, ()) if b.node is statement), None)
        return self.inference.binding_types(self.module, bound, 1) if bound is not None else frozenset()

    def test_truth(self, test: ast.expr) -> bool | None:
        """A test known in this context, or a version test the code's library versions decide."""
        truth = known_truth(test, self.eval_name_quietly)
        if truth is None:
            truth = version_truth(test, self.module, self.scope, self.inference.versions)
        if truth is None and not self.inference.versions.all_configurations:
            truth = self.default_configuration_truth(test)
        return truth

    def default_configuration_truth(self, test: ast.expr) -> bool | None:
        """`if self.transformer_impl == 'transformer_engine':` with the attribute set from the command
        line, decided by its argparse default (run_arguments.py): the other arm is a non-default mode."""
        receivers = {node.value.id for node in ast.walk(test) if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)}
        if len(receivers) != 1:
            return None
        receiver = receivers.pop()
        value = self.eval_name_quietly(receiver)
        classes = [t for t in value.types if isinstance(t, ClassType)] if value is not None else []
        info = self.inference.classes.by_name(classes[0].name) if len(classes) == 1 else None
        return self.inference.configuration_truth(info, test, receiver) if info is not None else None

    def if_statement(self, node: ast.If) -> None:
        """Both branches, unless the test is known in this context (`if use_cache:` with
        `use_cache=False`); a guard that closes itself sets what its body writes once."""
        mark = self.tracker.mark(len(self.effects))
        test = self.eval(node.test)
        tested = self.tracker.tested_since(mark)
        truth = self.test_truth(node.test)
        if truth is not None:
            self.block(node.body if truth else node.orelse)
            return
        bound_before = [name for name in self.env if "." not in name]
        conditions = argument_guard(node.test, self.maybe_none_parameters())
        if not any(conditions) and self.inference.versions.all_configurations:
            conditions = mode_conditions(node.test, self.default_configuration_truth(node.test))
        self.branches(node.body, node.orelse, conditions=conditions)
        if CHECKPOINT_PHASE in test.volatile:  # `if is_recomputing(): saved.pop(0)`: each arm runs in one pass only
            self._drop_effects(mark.effects, writes_only=False)
            return
        if not node.orelse and tested and self.tracker.closes(tested, mark) and not body_rebinds(node.body, bound_before):
            # `if self.pad is None: self.pad = ...; self.pad_size = n`: the forward sets it once, the replay skips it
            self._drop_effects(mark.effects, writes_only=True)
            self.tracker.excuse_guarded(tested, mark)
            return
        if only_chooses_checkpointing(node):  # `if torch.is_grad_enabled(): ckpt(block, x) else: block(x)`
            test = replace(test, volatile=test.volatile - {GRAD_MODE})
        if not _is_memo_check(node):
            self.branch(node.test, test)

    def _drop_effects(self, start: int, writes_only: bool) -> None:
        """Forget the effects recorded since `start` (only the writes, with `writes_only`): the
        replay does not repeat them."""
        for effect in drop_effects(self.effects, start, WRITE_KINDS if writes_only else None):
            self._seen.discard(effect.key)

    def maybe_none_parameters(self) -> set[str]:
        """The parameters defaulting to None that may hold None here (not known to be given a value)."""
        found = set()
        for name in self.optional_parameters:
            types = self.env[name].types if name in self.env else frozenset()
            if not types or NONE_TYPE in types:
                found.add(name)
        return found

    def is_local_value(self, name: str) -> bool:
        """Whether the name holds a value of this run (a local or a closure variable), not a
        module that a function-level import bound (whose qualified name says what it is)."""
        return (name in self.env and name not in self.imported) or name in self.closure

    def eval_name_quietly(self, name: str) -> Value | None:
        """A local's value, or an attribute's of one (`self.inplace`: what the instance's
        constructor chose), for deciding a test: no reads logged, no effects."""
        if name in self.env or "." not in name:
            found = self.env.get(name, self.closure.get(name))
            return found if found is not None else self._enclosing_receiver(name)
        base_name, _, attribute = name.rpartition(".")
        base = self.eval_name_quietly(base_name)
        if base is None or not base.types:
            return None
        types: set[Type] = set()
        for item in base.types:
            known = self.inference.flag_types(item, attribute) if isinstance(item, ClassType) else None
            if known is None:
                return None  # set outside `__init__`, to a value not known, or a library object's
            if any(number_of(t) is not None for t in known) and not self.inference.construction.set_from_parameters(self.inference, item, attribute):  # type: ignore[arg-type]  # flag_types answered: a ClassType
                return None  # a number read from a configuration object, which a run may load with others
            types.update(known)
        return Value(types=frozenset(types))

    def _enclosing_receiver(self, name: str) -> Value | None:
        """The `self` of the method a nested function (`def _inner_forward(x):`, checkpointed) is
        defined in, as `free_name` gives it: so `if self.with_plugin:` there is decided as in the method."""
        binding = self.module.binding(self.scope, name)
        if binding is None or binding.kind != "param" or binding.scope is self.scope or binding.scope.kind == MODULE:
            return None
        owner = self.inference.self_class(self.module, binding.scope, name)
        return Value(frozenset({OUTER}), frozenset({ClassType(owner.qualified_name)}), path=name) if owner is not None else None

    def assign(self, target: ast.expr, value: Value, node: ast.AST, accumulating: bool = False) -> None:
        if isinstance(target, ast.Name):
            name = target.id
            if name in self.scope.globals:
                replay_writes.rebind(self, target, ("global", name), value, "global-rebind", accumulating)
                return
            if name in self.scope.nonlocals:
                if self.context.closure_in_region and name in self.closure:
                    self.closure[name] = value  # the enclosing function's frame is inside the region too
                    return
                replay_writes.rebind(self, target, ("nonlocal", name), value, "nonlocal-rebind", accumulating)
                return
            self.env[name] = replace(value, path=name)
            self.imported.discard(name)
        elif isinstance(target, (ast.Tuple, ast.List)):
            element = self.element(value, None)
            positional = any(isinstance(t, TupleType) for t in value.types) and not any(isinstance(e, ast.Starred) for e in target.elts)
            for index, item in enumerate(target.elts):
                if positional:  # `resnet, attn = pair` of a `zip(...)`: each position its own types
                    self.assign(item, replace(element, types=unpacked_types(value.types, index)), node)
                else:
                    self.assign(item, element if element.types or not value.types else replace(value, types=frozenset()), node)
        elif isinstance(target, ast.Starred):
            self.assign(target.value, value, node)
        elif isinstance(target, ast.Attribute):
            base = self.eval(target.value)
            replay_writes.assign_attribute(self, target, base, value)
            if isinstance(target.value, ast.Name):  # later reads in this function see this value
                self.env[f"{target.value.id}.{target.attr}"] = replace(value, path=f"{target.value.id}.{target.attr}")
        elif isinstance(target, ast.Subscript):
            if isinstance(node, ast.Assign) and converts_into_itself(node.value, target):
                return  # `self.states[i] = self.states[i].to(device)`: the contents stay what they were
            mark = self.tracker.mark(0)
            base = self.eval(target.value)
            self.tracker.forget_reads(mark)  # loading the container to store into it is not reading its contents
            replay_writes.store_item(self, target, base, self.eval(target.slice), value)

    def augmented_assign(self, node: ast.AugAssign) -> None:
        value = self.eval(node.value)
        target = node.target
        symbol = _OPERATOR_SYMBOLS.get(type(node.op), "op") + "="
        if isinstance(target, ast.Name):
            name = target.id
            if name in self.scope.globals or name in self.scope.nonlocals:
                self.assign(target, value, node, accumulating=True)
                return
            current = self.eval(target)
            self.library.augmented_tensor(self, target, node, symbol)  # CKP501: `h += b` on a saved output
            if current.outlives_region and input_tensor(current):
                self.mutate(current, target, f"in-place `{symbol}` on", tensor=True)
                return
            self.env[name] = current if input_tensor(current) else Value(volatile=current.volatile | value.volatile, path=name)
        elif isinstance(target, ast.Attribute):
            base = self.eval(target.value)
            self.mutate(replay_writes.attribute_target(self, base, target.attr), target, f"`{symbol}` on")
        elif isinstance(target, ast.Subscript):
            base = self.eval(target.value)
            self.eval(target.slice)
            self.mutate(base, target, f"in-place `{symbol}` on an item of", tensor=input_tensor(base))

    # -- expressions ----------------------------------------------------------

    def eval(self, node: ast.AST | None) -> Value:
        if node is None:
            return CONST_VALUE
        method = getattr(self, "eval_" + type(node).__name__, None)
        if method is not None:
            value: Value = method(node)
            return value
        volatile: set[Volatility] = set()
        for child in child_nodes(node):
            if isinstance(child, ast.expr):
                volatile |= self.eval(child).volatile
        return Value(volatile=frozenset(volatile))

    def eval_Constant(self, node: ast.Constant) -> Value:
        return constant_value(node.value) or CONST_VALUE

    def eval_Name(self, node: ast.Name) -> Value:
        value = self._name_value(node)
        if value.outlives_region and value.attribute is None and not value.global_names and value.path:
            self.read_state(state_keys(value))  # a container passed in or closed over (`stats.get(k)`)
        return value

    def _name_value(self, node: ast.Name) -> Value:
        name = node.id
        if name in self.env:
            return self.env[name]
        if name in self.scope.nonlocals:
            self.read_state([("nonlocal", name)])
        if name in self.closure:
            return self.closure[name]
        return self.free_name(name, node)

    def free_name(self, name: str, node: ast.Name) -> Value:
        module = self.module
        binding = module.binding(self.scope, name, node.lineno)
        if binding is None:
            star = module.star_target(name)
            found = self.analysis.project.global_binding(star) if star else None
            if found is not None:
                other, other_binding = found
                if other_binding.kind in (DEF, CLASSDEF):
                    return Value(frozenset({CONST}), self.inference.binding_types(other, other_binding), path=name)
                return self._global_object(other, other_binding.name, self.inference.binding_types(other, other_binding))
            return Value(frozenset({CONST}), path=name)
        if binding.scope is self.scope or binding.scope.kind == COMPREHENSION:
            return Value(types=self.inference.binding_types(module, binding, 1), path=name)
        if binding.scope.kind == MODULE:
            return self.global_value(name, binding)
        owner = self.inference.self_class(module, binding.scope, name) if binding.kind == "param" else None
        types = frozenset({ClassType(owner.qualified_name)}) if owner else self.inference.binding_types(module, binding, 1)
        return Value(frozenset({OUTER}), types, path=name)

    def global_value(self, name: str, binding: Binding) -> Value:
        module = self.module
        types = self.inference.binding_types(module, binding, 1)
        if binding.kind in (DEF, CLASSDEF):
            return Value(frozenset({CONST}), types, path=name)
        if binding.kind == IMPORT:
            found = self.analysis.project.global_binding(binding.target) if binding.target else None
            if found is not None and found[1].kind in (ASSIGN, OTHER, LOOP, UNPACK):
                other, other_binding = found
                return self._global_object(other, other_binding.name, types)
            return Value(frozenset({CONST}), types, path=name)
        return self._global_object(module, name, types)

    def _global_object(self, module: ModuleSymbols, name: str, types: Types) -> Value:
        self.read_state([("global", name)])
        reason = self.analysis.mutability.mutable_globals(module).get(name)
        volatile = frozenset({Volatility(f"global `{name}` ({reason})", ("global", name))}) if reason else frozenset()
        return Value(frozenset({GLOBAL + name}), types, volatile, path=name)

    def eval_Attribute(self, node: ast.Attribute) -> Value:
        if isinstance(node.value, ast.Name):
            stored = self.env.get(f"{node.value.id}.{node.attr}")
            if stored is not None:
                return stored
        qualified = self.module.qualified_name(node, self.scope)
        if qualified is not None and self._names_a_module_attribute(node):
            found = self.analysis.project.global_binding(qualified)
            if found is not None and found[1].kind in (ASSIGN, OTHER, LOOP, UNPACK):
                types = self.inference.binding_types(found[0], found[1], 1)
                return self._global_object(found[0], found[1].name, types)
            return Value(frozenset({CONST}), self.inference.types(node, self.module, self.scope), path=ast.unparse(node))
        return self.attribute_of(self.eval(node.value), node.attr)

    def _names_a_module_attribute(self, node: ast.Attribute) -> bool:
        """`np.random`, `config.FLAG`: the chain starts at an imported module, not at a value."""
        base = node.value
        while isinstance(base, ast.Attribute):
            base = base.value
        if not isinstance(base, ast.Name) or self.is_local_value(base.id):
            return False
        binding = self.module.binding(self.scope, base.id, base.lineno)
        return binding is not None and binding.kind == IMPORT

    def attribute_of(self, base: Value, attribute: str) -> Value:
        path = f"{base.path}.{attribute}" if base.path else attribute
        if attribute == "device":
            own = self.library.own_device(self, base, path)
            if own is not None:
                return own
        if attribute in ("shape", "dtype", "ndim", "is_cuda", "requires_grad", "training"):
            return Value(frozenset({CONST}), path=path)
        if not base.outlives_region:
            return Value(base.origins, volatile=base.volatile, path=path)
        owners = [(t.name, attribute) for t in ordered(base.types) if isinstance(t, ClassType) and self.analysis.classes.by_name(t.name)]
        self.read_state(owners or [("path", path)])
        types: set[Type] = set()
        # which object `base` is may change; what a branch reads is the attribute's own value,
        # so only the attribute's mutability counts (`self.dispatcher.routing_map`)
        volatile: set[Volatility] = set()
        owner: tuple[str, str] | None = None
        for item in ordered(base.types):
            if isinstance(item, ClassType):
                held = self.inference.instance_attribute_types(item, attribute)
                if held & TRUTH_TYPES and self.inference.flag_types(item, attribute) is None:
                    held = held - TRUTH_TYPES  # `None`/`False` it may hold, but not only: its truth is not known
                types.update(held)
                info = self.analysis.classes.by_name(item.name)
                if info is None:
                    continue
                owner = (info.qualified_name, attribute)
                reason = self.analysis.mutability.mutable_attributes(info).get(attribute)
                if reason is not None:
                    volatile.add(Volatility(f"`{path}` ({reason})", (info.qualified_name, attribute)))
        return Value(base.origins, frozenset(types), frozenset(volatile), path, owner)

    def eval_Subscript(self, node: ast.Subscript) -> Value:
        base = self.eval(node.value)
        index = self.eval(node.slice)
        types = base.types if isinstance(node.slice, ast.Slice) else element_types(base.types)
        return Value(base.origins, types, base.volatile | index.volatile, f"{base.path}[...]", base.attribute)

    def eval_BinOp(self, node: ast.BinOp) -> Value:
        left, right = self.eval(node.left), self.eval(node.right)
        return Value(volatile=left.volatile | right.volatile)

    def eval_UnaryOp(self, node: ast.UnaryOp) -> Value:
        return Value(volatile=self.eval(node.operand).volatile)

    def eval_Compare(self, node: ast.Compare) -> Value:
        volatile = self.eval(node.left).volatile
        for comparator in node.comparators:
            volatile |= self.eval(comparator).volatile
        return Value(volatile=volatile)

    def eval_BoolOp(self, node: ast.BoolOp) -> Value:
        return merge([self.eval(value) for value in node.values])

    def eval_IfExp(self, node: ast.IfExp) -> Value:
        test = self.eval(node.test)
        truth = self.test_truth(node.test)  # `x.mul_(y) if inplace else x.mul(y)`, `inplace=False`
        if truth is not None:
            return self.eval(node.body if truth else node.orelse)
        self.branch(node.test, test)
        return merge([self.eval(node.body), self.eval(node.orelse)])

    def eval_NamedExpr(self, node: ast.NamedExpr) -> Value:
        value = self.eval(node.value)
        self.assign(node.target, value, node)
        return value

    def eval_Lambda(self, node: ast.Lambda) -> Value:
        return Value(frozenset({LOCAL}), frozenset({self.local_function(node)}), path="<lambda>")

    def eval_Starred(self, node: ast.Starred) -> Value:
        return self.eval(node.value)

    def _literal(self, elements: Iterable[ast.AST | None], kind: str) -> Value:
        types: set[Type] = set()
        volatile: set[Volatility] = set()
        for element in elements:
            value = self.eval(element)
            volatile |= value.volatile
            types.update(element_types(value.types) if isinstance(element, ast.Starred) else value.types)
        return Value(types=frozenset({ContainerType(kind, frozenset(types))}), volatile=frozenset(volatile))

    def eval_List(self, node: ast.List) -> Value:
        return self._literal(node.elts, torch_api.SEQUENCE)

    def eval_Tuple(self, node: ast.Tuple) -> Value:
        return self._literal(node.elts, torch_api.SEQUENCE)

    def eval_Set(self, node: ast.Set) -> Value:
        return self._literal(node.elts, torch_api.SEQUENCE)

    def eval_Dict(self, node: ast.Dict) -> Value:
        for key in node.keys:
            self.eval(key)
        return self._literal(node.values, torch_api.MAPPING)

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp, elements: list[ast.expr], kind: str) -> Value:
        saved = dict(self.env)
        for generator in node.generators:
            iterable = self.eval(generator.iter)
            self.assign(generator.target, self.element(iterable, generator.iter), node)
            for condition in generator.ifs:
                self.eval(condition)
        types: set[Type] = set()
        for element in elements:
            types.update(self.eval(element).types)
        self.env = saved
        return Value(types=frozenset({ContainerType(kind, frozenset(types))}))

    def eval_ListComp(self, node: ast.ListComp) -> Value:
        return self._comprehension(node, [node.elt], torch_api.SEQUENCE)

    def eval_SetComp(self, node: ast.SetComp) -> Value:
        return self._comprehension(node, [node.elt], torch_api.SEQUENCE)

    def eval_GeneratorExp(self, node: ast.GeneratorExp) -> Value:
        return self._comprehension(node, [node.elt], torch_api.SEQUENCE)

    def eval_DictComp(self, node: ast.DictComp) -> Value:
        return self._comprehension(node, [node.key, node.value], torch_api.MAPPING)

    def element(self, iterable: Value, node: ast.AST | None) -> Value:
        """What iterating over or unpacking `iterable` gives: the same ownership, element types."""
        if isinstance(node, ast.Call):
            name = self.module.qualified_name(node.func, self.scope)
            if name in ("builtins.range", "builtins.len"):
                return Value(volatile=iterable.volatile)
        return Value(iterable.origins, element_types(iterable.types), iterable.volatile, f"{iterable.path}[...]", iterable.attribute)

    def local_function(self, node: ast.AST) -> FunctionType:
        """A function defined in the region: it sees the current values of the names it uses."""
        scope = self.module.scope_of[id(node)]
        used = {n.id for n in walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} | scope.nonlocals
        free = {name: value for name, value in self.closure.items() if name in used and name not in scope.bindings}
        free.update((name, value) for name, value in self.env.items() if name in used and name not in scope.bindings)
        function = self.inference.function(self.module, scope, bound=sorted(free.items(), key=lambda item: item[0]))
        return replace(function, defined_in_region=True)


_OPERATOR_SYMBOLS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
    ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>",
}  # fmt: skip


def _is_memo_check(node: ast.If) -> bool:
    """`if key not in cache: cache[key] = ...`: either way the code after reads the same value."""
    test = node.test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.In, ast.NotIn))):
        return False
    container = dotted_path(test.comparators[0])
    return container is not None and any(
        isinstance(target, ast.Subscript) and dotted_path(target.value) == container
        for statement in node.body
        for child in walk(statement)
        if isinstance(child, ast.Assign)
        for target in child.targets
    )


def _merge_envs(envs: list[dict[str, Value]]) -> dict[str, Value]:
    names: dict[str, list[Value]] = {}
    for env in envs:
        for name, value in env.items():
            names.setdefault(name, []).append(value)
    return {name: merge(values) for name, values in names.items()}


def mode_conditions(test: ast.expr, default: bool | None) -> tuple[str, str]:
    """Under `--all-configurations`, what the arm the command line's default does not take needs
    (the body's condition, the `else`'s), for messages and `condition`."""
    if default is None:
        return "", ""
    return ("", mode_condition(test, False)) if default else (mode_condition(test, True), "")
