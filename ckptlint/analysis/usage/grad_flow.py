"""Gradient flow into reentrant checkpoint regions (CKP301, CKP302), from the calling function.

Reentrant checkpoint (`CheckpointFunction`) is an autograd function of its *positional tensor
inputs* only: when none of them requires grad its output is detached (parameters inside get
no gradient), and a tensor that reaches the region any other way (keyword, closure, `partial`
argument, global) is not one of its inputs. `GradFlow` finds, per reentrant checkpoint call,
the positional inputs that cannot require grad and the tensors that reach the region another
way, asking `gradients.Evaluator` about each expression; it answers the evaluator's questions
about parameters (across callers), method returns and class attributes (`protocol.GradOracle`).
The rules word the reasons (`facts.py`).
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Callable, Iterable, Iterator

from ckptlint.analysis.flow.statements import grad_off_at, in_loop
from ckptlint.analysis.semantics.evaluator import TypeInference
from ckptlint.analysis.semantics.method_callers import MethodCallers, receiver
from ckptlint.analysis.usage.embedded_inputs import embedding_indices
from ckptlint.analysis.usage.facts import (
    CLOSURE,
    CONTAINER,
    DROPPED,
    GLOBAL,
    GRAPH_REUSED,
    KEYWORD,
    LAYER_KEYWORD,
    MODEL_INPUT,
    PARTIAL,
    RAISES,
    NoGradInput,
    Reason,
    UntrackedTensor,
)
from ckptlint.analysis.usage.gradients import (
    Evaluator,
    all_no_grad,
    computed,
    false_argument,
)
from ckptlint.analysis.usage.layer_calls import (
    LayerCalls,
    ReentrantCalls,
    checkpoint_inputs,
)
from ckptlint.analysis.usage.model_inputs import ModelInputs
from ckptlint.calls import CheckpointCall
from ckptlint.catalogue import CALLABLE, LAYER_CLASS
from ckptlint.classes import ClassIndex, ClassInfo
from ckptlint.symbols import (
    ASSIGN,
    CLASS,
    DEF,
    FUNCTION,
    LAMBDA,
    MODULE,
    UNPACK,
    ModuleSymbols,
    Scope,
)

# keywords torch's checkpoint consumes itself; any other raises in reentrant mode
_CHECKPOINT_OWN = frozenset({"use_reentrant", "context_fn", "determinism_check", "debug", "early_stop", "preserve_rng_state", "function"})
# APIs that hand keyword arguments to torch's checkpoint, whose reentrant mode rejects them (timm's `checkpoint(fn, *args, **kwargs)` forwards them)
_REJECTS_KEYWORDS = frozenset({"torch.utils.checkpoint.checkpoint", "._gradient_checkpointing_func", "timm.models._manipulate.checkpoint"})


class GradFlow:
    def __init__(self, classes: ClassIndex, inference: TypeInference):
        self.classes = classes
        self.inference = inference
        self.model_inputs = ModelInputs(classes)
        self.layer_calls = LayerCalls(classes)
        self.callers = MethodCallers(classes, inference.construction.beside)
        # class facts by (id of the class scope, attribute), as ClassIndex keeps its own: they live as long as the analysis state
        self._layer_classes: dict[tuple[int, str], str | None] = {}
        self._frozen_lines: dict[tuple[int, str], int | None] = {}
        self._freezing_memo: dict[int, list[tuple[ast.AST, str]]] = {}  # by id of the class scope
        self._grad_enabled: dict[int, frozenset[str]] = {}  # by id of the function scope

    # -- CKP301 ---------------------------------------------------------------

    def no_grad_inputs(self, call: CheckpointCall, module_calls: Iterable[CheckpointCall] = ()) -> list[NoGradInput]:
        """The positional tensor inputs, each with why it cannot require grad, when *all* are known
        not to (and at least one is a tensor); otherwise empty. `module_calls` are the module's
        other checkpoint calls, whose outputs are seen through (a reentrant region's output
        requires grad only when one of its inputs does). A call in a loop whose inputs are a
        previous pass's output is judged on the loop's first pass too. A checkpointing layer is
        judged at each call of an instance of it in its module (the first that starves)."""
        if call.reentrant is not True or not self._may_hold_parameters(call):
            return []
        reentrant = ReentrantCalls.of(module_calls if module_calls else (call,), self.layer_calls)
        if call.api.region_kind == LAYER_CLASS:
            for instance_call, scope in reentrant.instance_calls(call, call.module):
                if grad_off_at(scope, instance_call):
                    continue  # the layer checkpoints only with grad enabled (and nothing runs backward here)
                found = self._starved(call.module, scope, instance_call, list(instance_call.args), reentrant)
                if found:
                    return [replace(i, called_at=instance_call) for i in found]
            return []
        inputs = checkpoint_inputs(call)
        if not inputs or grad_off_at(call.scope, call.node):
            return []  # under no_grad nothing runs backward through the region
        embedded = embedding_indices(call, self.classes, self.inference, self.layer_class)
        return self._starved(call.module, call.scope, call.node, inputs, reentrant, embedded)

    def _starved(
        self, module: ModuleSymbols, scope: Scope, node: ast.AST, inputs: list[ast.expr], reentrant: ReentrantCalls, embedded: dict[int, Reason] | None = None
    ) -> list[NoGradInput]:
        line = getattr(node, "lineno", None)
        found = all_no_grad(inputs, Evaluator(self, module, scope, line, reentrant=reentrant), embedded)
        if found is None and in_loop(scope.node, node):
            first_pass = Evaluator(self, module, scope, line, reentrant=reentrant, first_pass=True)
            found = all_no_grad(inputs, first_pass, embedded)
            loop = first_pass.enclosing_loop()
            found = [replace(i, first_pass=loop) for i in found] if found is not None and loop is not None else None
        return found or []

    def grad_enabled_names(self, module: ModuleSymbols, scope: Scope) -> frozenset[str]:
        """The names a function turns `requires_grad` on for (`x.requires_grad_()`, `x.requires_grad = ...`), once per function."""
        found = self._grad_enabled.get(id(scope))
        if found is None:
            names: set[str] = set()
            for child in ast.walk(scope.node) if module.source.mentions("requires_grad", scope.node) else ():
                if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and child.func.attr == "requires_grad_":
                    if isinstance(child.func.value, ast.Name):
                        names.add(child.func.value.id)
                if isinstance(child, ast.Assign):
                    for target in child.targets:
                        if isinstance(target, ast.Attribute) and target.attr == "requires_grad" and isinstance(target.value, ast.Name):
                            names.add(target.value.id)
            found = self._grad_enabled[id(scope)] = frozenset(names)
        return found

    # -- parameters: what every caller passes ---------------------------------

    def parameter_no_grad(
        self, module: ModuleSymbols, scope: Scope, name: str, depth: int, active: frozenset[tuple[int, str]], reentrant: ReentrantCalls | None
    ) -> Reason | None:
        """Why parameter `name` of the method `scope` cannot require grad: it is the data an
        entry model is trained on (model_inputs.py), or every call of the method in its module
        passes a value that cannot. None when unknown (no caller, one passes something else,
        a `*args`/`**kwargs` call, a recursion)."""
        key = (id(scope.node), name)
        parent = scope.parent
        node = scope.node
        if key in active or parent is None or parent.kind != CLASS or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        info = self.classes.info(module, parent)
        if node.name == "forward":
            data = self.model_inputs.data_parameter(info)
            if data is not None and data.name == name and self.classes.find_method(info, "forward") == (info, scope):
                return Reason(MODEL_INPUT, f"`{name}` of `{data.model}.forward`, the data the model is trained on ({data.convention})", data.line)
        first: Reason | None = None
        for argument, caller_module, caller, line in self.callers.arguments(info, scope, name):
            if argument is None:
                return None
            reentrant_there = reentrant if caller_module is module else None
            reason = Evaluator(self, caller_module, caller, line, depth + 1, active | {key}, reentrant_there).no_grad(argument)
            if reason is None:
                return None
            if caller_module is not module and not reason.path:
                reason = replace(reason, path=caller_module.source.display_path)
            first = first or reason
        return first

    def parameter_needs_grad(self, module: ModuleSymbols, scope: Scope, name: str, depth: int, active: frozenset[tuple[int, str]]) -> Reason | None:
        """Why parameter `name` of the method `scope` can require grad: some call of the method
        (as `parameter_no_grad` finds them) passes a value that can. None when none is known to."""
        return self._some_caller(module, scope, name, depth, active, Evaluator.needs_grad)

    def parameter_container_needs_grad(self, module: ModuleSymbols, scope: Scope, name: str, depth: int, active: frozenset[tuple[int, str]]) -> Reason | None:
        """`parameter_needs_grad` for a container some caller passes (`position_embeddings=[cos, sin]`)."""
        return self._some_caller(module, scope, name, depth, active, Evaluator.container_needs_grad)

    def _some_caller(
        self, module: ModuleSymbols, scope: Scope, name: str, depth: int, active: frozenset[tuple[int, str]], ask: Callable[[Evaluator, ast.expr], Reason | None]
    ) -> Reason | None:
        key = (id(scope.node), name)
        parent = scope.parent
        if key in active or parent is None or parent.kind != CLASS or not isinstance(scope.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        info = self.classes.info(module, parent)
        for argument, caller_module, caller, line in self.callers.arguments(info, scope, name):
            if argument is None:
                continue
            reason = ask(Evaluator(self, caller_module, caller, line, depth + 1, active | {key}), argument)
            if reason is not None:
                return replace(reason, path=caller_module.source.display_path) if caller_module is not module and not reason.path else reason
        return None

    def method_returns(
        self, module: ModuleSymbols, scope: Scope, call: ast.Call, depth: int, active: frozenset[tuple[int, str]], ask: Callable[[Evaluator, ast.expr], Reason | None]
    ) -> Reason | None:
        """`self.method(...)` of the enclosing class, one of whose returns can require grad (`ask`
        is `needs_grad`): `self.get_rel_embedding()`."""
        method = self._own_method(module, scope, call, active)
        if method is None:
            return None
        for expr in self.inference.return_expressions(method):
            reason = ask(Evaluator(self, module, method, None, depth + 1, active | {(id(method.node), "")}), expr)
            if reason is not None:
                return computed(reason)
        return None

    def _own_method(self, module: ModuleSymbols, scope: Scope, call: ast.Call, active: frozenset[tuple[int, str]]) -> Scope | None:
        """The method of the enclosing class (in this module) that `self.method(...)` calls, unless it is being evaluated."""
        func = call.func
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == receiver(scope)):
            return None
        info = self.classes.enclosing_class(module, scope)
        found = self.classes.find_method(info, func.attr) if info is not None else None
        if found is None or found[0].module is not module or id(found[1].node) in {key[0] for key in active}:
            return None
        return found[1]

    def method_returns_no_grad(self, module: ModuleSymbols, scope: Scope, call: ast.Call, depth: int, active: frozenset[tuple[int, str]]) -> Reason | None:
        """`self.method(...)` of the enclosing class whose every return cannot require grad
        (its parameters judged by all their callers: `self.unscale_latents(x.byte() / 255)`)."""
        method = self._own_method(module, scope, call, active)
        if method is None:
            return None
        returns = self.inference.return_expressions(method)
        if not returns:
            return None
        first: Reason | None = None
        for expr in returns:
            reason = Evaluator(self, module, method, None, depth + 1, active | {(id(method.node), "")}).no_grad(expr)
            if reason is None:
                return None
            first = first or reason
        return first

    def _may_hold_parameters(self, call: CheckpointCall) -> bool:
        """A lambda or local function that calls nothing and reads no attribute has no parameters to starve."""
        node = self._region_function(call)
        if node is None:
            return True
        return any(isinstance(n, (ast.Call, ast.Attribute)) for n in ast.walk(node))

    # -- CKP302 ---------------------------------------------------------------

    def untracked_tensors(self, call: CheckpointCall, module_calls: Iterable[CheckpointCall] = ()) -> list[UntrackedTensor]:
        """Tensors that reach a reentrant region other than as positional tensor inputs, with
        what goes wrong; a checkpointing layer's at the first call of an instance that has some."""
        if call.reentrant is not True:
            return []
        if call.api.region_kind == LAYER_CLASS:
            return self._layer_untracked(call, ReentrantCalls.of(module_calls if module_calls else (call,), self.layer_calls))
        if grad_off_at(call.scope, call.node) and call.api.name not in _REJECTS_KEYWORDS:
            return []
        found: list[UntrackedTensor] = []
        if call.api.name in _REJECTS_KEYWORDS:
            for name in sorted(call.arguments.keywords):
                if name not in _CHECKPOINT_OWN:
                    found.append(UntrackedTensor(KEYWORD, name, RAISES))
        if call.api.region_kind != CALLABLE:
            return found
        dropped = bool(checkpoint_inputs(call)) and self._all_inputs_no_grad(call)
        for route, name, expr, module, scope, line in self._captured(call):
            reason = Evaluator(self, module, scope, line).needs_grad(expr)
            if reason is None:
                continue
            if dropped:
                found.append(UntrackedTensor(route, name, DROPPED, reason))
            elif not reason.leaf and isinstance(expr, ast.Name) and self._used_again(call, expr.id, scope, module):
                found.append(UntrackedTensor(route, name, GRAPH_REUSED, reason))
        evaluator = Evaluator(self, call.module, call.scope, call.line)
        found.extend(self._in_containers(checkpoint_inputs(call), evaluator, call.node, dropped))
        return found

    def _layer_untracked(self, call: CheckpointCall, reentrant: ReentrantCalls) -> list[UntrackedTensor]:
        """A checkpointing layer binds an instance call's keywords into `partial(forward, self,
        **kwargs)` and checkpoints its positional arguments: keyword tensors and tensors inside
        positional containers are not inputs."""
        cleared = set(call.api.cleared_arguments)
        for instance_call, scope in reentrant.instance_calls(call, call.module):
            if any(isinstance(a, ast.Starred) for a in instance_call.args) or grad_off_at(scope, instance_call):
                continue
            evaluator = Evaluator(self, call.module, scope, instance_call.lineno, reentrant=reentrant)
            positional = list(instance_call.args)
            # no positional argument at all: the checkpoint has no input, so its output is detached
            dropped = not positional or all_no_grad(positional, evaluator) is not None
            found: list[UntrackedTensor] = []
            for keyword in instance_call.keywords:
                if keyword.arg is None or keyword.arg in cleared:
                    continue
                reason = evaluator.needs_grad(keyword.value)
                if reason is None:
                    continue
                if dropped:
                    found.append(UntrackedTensor(LAYER_KEYWORD, keyword.arg, DROPPED, reason, instance_call))
                elif not reason.leaf and _reused(scope, instance_call, keyword.value):
                    found.append(UntrackedTensor(LAYER_KEYWORD, keyword.arg, GRAPH_REUSED, reason, instance_call))
            found.extend(replace(t, called_at=instance_call) for t in self._in_containers(positional, evaluator, instance_call, dropped))
            if found:
                return found
        return []

    @staticmethod
    def _in_containers(arguments: list[ast.expr], evaluator: Evaluator, node: ast.AST, dropped: bool) -> list[UntrackedTensor]:
        """Positional arguments that are lists, tuples or dicts holding a tensor that needs grad:
        reentrant checkpoint tracks only the top-level tensors."""
        found: list[UntrackedTensor] = []
        for argument in arguments:
            reason = evaluator.container_needs_grad(argument)
            if reason is None:
                continue
            if dropped:
                found.append(UntrackedTensor(CONTAINER, ast.unparse(argument), DROPPED, reason))
            elif not reason.leaf and _reused(evaluator.scope, node, argument):
                found.append(UntrackedTensor(CONTAINER, ast.unparse(argument), GRAPH_REUSED, reason))
        return found

    def _all_inputs_no_grad(self, call: CheckpointCall) -> bool:
        evaluator = Evaluator(self, call.module, call.scope, call.line)
        inputs = [a for a in checkpoint_inputs(call) if not isinstance(a, ast.Constant)]
        return bool(inputs) and all(evaluator.no_grad(a) is not None for a in inputs)

    def _captured(self, call: CheckpointCall) -> Iterator[tuple[str, str, ast.expr, ModuleSymbols, Scope, int | None]]:
        """(route, name, expression, module, scope, line) of each tensor-candidate the region
        captures: `partial` arguments, closure variables, module-level names it reads."""
        module, scope = call.module, call.scope
        region = call.region
        partial = self._partial_call(region, module, scope) if isinstance(region, ast.expr) else None
        if partial is not None:
            for argument in partial.args[1:]:
                if not isinstance(argument, ast.Starred):
                    yield PARTIAL, ast.unparse(argument), argument, module, scope, call.line
            for keyword in partial.keywords:
                if keyword.arg is not None:
                    yield PARTIAL, keyword.arg, keyword.value, module, scope, call.line
            return
        function = self._region_function(call)
        if function is None:
            return
        inner = module.scope_of.get(id(function))
        if inner is None:
            return
        seen: set[str] = set()
        for node in ast.walk(function):
            if not isinstance(node, ast.Name) or not isinstance(node.ctx, ast.Load) or node.id in seen:
                continue
            seen.add(node.id)
            binding = module.binding(module.scope_of.get(id(_enclosing_function(function, node, module)), inner), node.id)
            if binding is None or binding.kind not in (ASSIGN, UNPACK) or _inside_scope(binding.scope, inner):
                continue
            if binding.scope.kind == MODULE:
                origin = binding.written_from or binding.scope
                yield GLOBAL, node.id, node, module, origin, None
            elif binding.scope.kind in (FUNCTION, LAMBDA):
                line = call.line if binding.scope is scope else None
                yield CLOSURE, node.id, node, module, binding.scope, line

    def _partial_call(self, region: ast.expr, module: ModuleSymbols, scope: Scope) -> ast.Call | None:
        if isinstance(region, ast.Name):
            binding = module.binding(scope, region.id, region.lineno)
            if binding is None or binding.kind != ASSIGN or not isinstance(binding.value, ast.Call):
                return None
            region = binding.value
        if isinstance(region, ast.Call) and region.args and module.qualified_name(region.func, scope) == "functools.partial":
            return region
        return None

    def _region_function(self, call: CheckpointCall) -> ast.Lambda | ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The region when it is a lambda, a function defined inside the calling function, or a
        method of the calling class (`self._run`: only module-level names can be captured)."""
        region = call.region
        if isinstance(region, ast.Lambda):
            return region
        if isinstance(region, ast.Attribute) and isinstance(region.value, ast.Name):
            info = self.classes.enclosing_class(call.module, call.scope)
            receiver = Evaluator(self, call.module, call.scope, None).scopereceiver()
            found = self.classes.find_method(info, region.attr) if info is not None and region.value.id == receiver else None
            if found is not None and found[0].module is call.module:
                node = found[1].node
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    return node
            return None
        if isinstance(region, ast.Name):
            binding = call.module.binding(call.scope, region.id, region.lineno)
            if binding is not None and binding.kind == DEF and binding.scope.kind in (FUNCTION, LAMBDA):
                node = binding.node
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    return node
        return None

    def _used_again(self, call: CheckpointCall, name: str, scope: Scope, module: ModuleSymbols) -> bool:
        """Whether the graph behind `name` is used by more than this one region: the call runs in a
        loop, or the name is read in `scope` outside the region and outside the call."""
        function = scope.node
        if scope is call.scope and in_loop(function, call.node):
            return True
        region = call.region
        excluded: list[ast.AST] = [call.node]
        definition = self._region_function(call)
        if definition is not None:
            excluded.append(definition)
        if isinstance(region, ast.Name):
            binding = module.binding(call.scope, region.id, region.lineno)
            if binding is not None and binding.kind == ASSIGN:
                excluded.append(binding.node)
        skip = {id(n) for root in excluded for n in ast.walk(root)}
        for node in ast.walk(function):
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load) and id(node) not in skip:
                return True
        return False

    # -- class facts ----------------------------------------------------------

    def layer_class(self, info: ClassInfo, attribute: str) -> str | None:
        """The torch.nn class `self.<attribute>` is built from (`Embedding`), when that is all it is."""
        key = (id(info.scope), attribute)
        if key not in self._layer_classes:
            self._layer_classes[key] = self._layer_class(info, attribute)
        return self._layer_classes[key]

    def _layer_class(self, info: ClassInfo, attribute: str) -> str | None:
        constructions = self._torch_nn_constructions(info, attribute)
        names = {name.rpartition(".")[2] for name, _, _ in constructions or ()}
        return names.pop() if constructions and len(names) == 1 else None

    def sequential_layers(self, info: ClassInfo, attribute: str) -> frozenset[str]:
        """The torch.nn classes an `nn.Sequential(...)` stored as `self.<attribute>` is built of,
        when it is only ever that (`nn.Sequential(nn.Linear(...), nn.Tanh())`: Linear, Tanh)."""
        constructions = self._torch_nn_constructions(info, attribute)
        if not constructions or any(name != "torch.nn.Sequential" for name, _, _ in constructions):
            return frozenset()
        layers = (
            info.module.qualified_name(element.func, scope) if isinstance(element, ast.Call) else None
            for _, call, scope in constructions
            for element in call.args
        )
        return frozenset(name.rpartition(".")[2] for name in layers if name is not None and name.startswith("torch.nn."))

    def _torch_nn_constructions(self, info: ClassInfo, attribute: str) -> list[tuple[str, ast.Call, Scope]] | None:
        """Each `self.<attribute> = torch.nn.X(...)` of the class, as (qualified name, call, the
        method it is in); None when one of its assignments is anything else (a builder, `+=`)."""
        found: list[tuple[str, ast.Call, Scope]] = []
        for assignment in self.classes.attribute_assignments(info, attribute):
            value = assignment.value
            if assignment.augmented or not isinstance(value, ast.Call):
                return None
            name = info.module.qualified_name(value.func, assignment.method)
            if not name or not name.startswith("torch.nn."):
                return None
            found.append((name, value, assignment.method))
        return found

    def frozen_line(self, info: ClassInfo, attribute: str) -> int | None:
        """The line freezing `self.<attribute>`'s parameters in the class, when nothing in it
        unfreezes them or hooks the module (a hook may make its output require grad)."""
        key = (id(info.scope), attribute)
        if key not in self._frozen_lines:
            self._frozen_lines[key] = self._frozen_line(info, attribute)
        return self._frozen_lines[key]

    def _frozen_line(self, info: ClassInfo, attribute: str) -> int | None:
        frozen: int | None = None
        for node, receiver in self._grad_state_nodes(info):
            verdict = _freezing(node, receiver, attribute)
            if verdict is False:
                return None
            if verdict is True and frozen is None:
                frozen = node.lineno  # type: ignore[attr-defined]  # statements and calls have positions
        return frozen

    def _grad_state_nodes(self, info: ClassInfo) -> list[tuple[ast.AST, str]]:
        """The nodes of the class's and its bases' methods that can freeze, unfreeze, hook or
        register an attribute (`_freezing` and `buffer_line` read them), with their method's receiver."""
        return [item for cls in self.classes.mro(info) for item in self._own_grad_state_nodes(cls)]

    def _own_grad_state_nodes(self, info: ClassInfo) -> list[tuple[ast.AST, str]]:
        """`_grad_state_nodes` of the class's own methods, once per class (a base such as
        `PreTrainedModel` is walked once, not once per model)."""
        found = self._freezing_memo.get(id(info.scope))
        if found is None:
            found = self._freezing_memo[id(info.scope)] = []
            if not info.mentions(_GRAD_STATE_WORDS):
                return found  # no line can freeze, hook or register anything: nothing to walk
            for method in info.methods():
                receiver = method.first_parameter()
                if receiver is None:
                    continue
                for node in ast.walk(method.node):
                    if _touches_grad_state(node):
                        found.append((node, receiver))
        return found

    def buffer_line(self, info: ClassInfo, attribute: str) -> int | None:
        """The line registering `self.<attribute>` as a buffer (buffers never require grad)."""
        for node, receiver in self._grad_state_nodes(info):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "register_buffer"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == receiver
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == attribute
            ):
                if self.classes.attribute_assignments(info, attribute):
                    return None  # reassigned: maybe no longer the buffer
                return node.lineno
        return None


def _reused(scope: Scope, node: ast.AST, value: ast.expr) -> bool:
    """Whether the graph behind `value` serves more than this one call: the call runs in a loop
    (the next pass's region backs through it again), or a name in it is read elsewhere."""
    function = scope.node
    if in_loop(function, node):
        return True
    names = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
    inside = {id(n) for n in ast.walk(node)}
    return any(isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load) and id(n) not in inside for n in ast.walk(function))


_GRAD_STATE_WORDS = ("requires_grad", "register_", ".parameters(")  # what each shape `_touches_grad_state` accepts spells (not the word "parameters" of every docstring)


def _touches_grad_state(node: ast.AST) -> bool:
    """A node of the shapes `_freezing` and `buffer_line` tell apart: `.requires_grad_(...)`,
    `.register_*(...)` (hooks, buffers), `x.requires_grad = ...`, a loop over `.parameters()`."""
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Attribute) and (node.func.attr == "requires_grad_" or node.func.attr.startswith("register_"))
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Attribute) and t.attr == "requires_grad" for t in node.targets)
    return isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and isinstance(node.iter.func, ast.Attribute) and node.iter.func.attr == "parameters"


def _freezing(node: ast.AST, receiver: str, attribute: str) -> bool | None:
    """True: `node` freezes `self.<attribute>` (`requires_grad_(False)` on it or its weight,
    `weight.requires_grad = False`, a loop over its parameters doing so); False: it unfreezes
    or hooks it; None: unrelated."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        target = node.func.value
        if node.func.attr == "requires_grad_" and _names_attribute(target, receiver, attribute):
            return false_argument(node)
        if node.func.attr.startswith("register_") and node.func.attr.endswith("hook") and _names_attribute(target, receiver, attribute):
            return False
    if isinstance(node, ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Attribute) and target.attr == "requires_grad" and _names_attribute(target.value, receiver, attribute):
                return isinstance(node.value, ast.Constant) and node.value.value is False
    if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and isinstance(node.iter, ast.Call):
        iterated = node.iter.func
        if isinstance(iterated, ast.Attribute) and iterated.attr == "parameters" and _names_attribute(iterated.value, receiver, attribute, exact=True):
            loop_variable = node.target.id
            for statement in node.body:
                if isinstance(statement, ast.Assign) and any(
                    isinstance(t, ast.Attribute) and t.attr == "requires_grad" and isinstance(t.value, ast.Name) and t.value.id == loop_variable
                    for t in statement.targets
                ):
                    return isinstance(statement.value, ast.Constant) and statement.value.value is False
                if (
                    isinstance(statement, ast.Expr)
                    and isinstance(statement.value, ast.Call)
                    and isinstance(statement.value.func, ast.Attribute)
                    and statement.value.func.attr == "requires_grad_"
                    and isinstance(statement.value.func.value, ast.Name)
                    and statement.value.func.value.id == loop_variable
                ):
                    return false_argument(statement.value)
    return None


def _names_attribute(expr: ast.expr, receiver: str, attribute: str, exact: bool = False) -> bool:
    """`self.<attribute>` (or, unless exact, `self.<attribute>.weight`)."""
    if not exact and isinstance(expr, ast.Attribute) and expr.attr == "weight":
        expr = expr.value
    return isinstance(expr, ast.Attribute) and expr.attr == attribute and isinstance(expr.value, ast.Name) and expr.value.id == receiver


def _inside_scope(scope: Scope, ancestor: Scope) -> bool:
    current: Scope | None = scope
    while current is not None:
        if current is ancestor:
            return True
        current = current.parent
    return False


def _enclosing_function(function: ast.AST, name: ast.Name, module: ModuleSymbols) -> ast.AST:
    """The innermost function node inside `function` (itself included) that contains `name`."""
    best = function
    for node in ast.walk(function):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and node is not function:
            if (node.lineno, node.col_offset) <= (name.lineno, name.col_offset) <= (node.end_lineno or 0, node.end_col_offset or 0):
                if id(node) in module.scope_of:
                    best = node
    return best
