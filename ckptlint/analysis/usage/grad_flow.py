"""Gradient flow into reentrant checkpoint regions (CKP301, CKP302), from the calling function.

Reentrant checkpoint (`CheckpointFunction`) is an autograd function of its *positional tensor
inputs* only: when none of them requires grad its output is detached (parameters inside get
no gradient), and a tensor that reaches the region any other way (keyword, closure, `partial`
argument, global) is not one of its inputs. This module answers, for argument expressions in
the calling function's scope, two small questions with a reason attached:

- `no_grad`: the value *cannot* require grad (`.detach()`, computed under `torch.no_grad()`,
  created by `torch.zeros` without `requires_grad`, an integer tensor, token ids from a
  tokenizer, the output of an embedding frozen in the same class, a registered buffer);
- `needs_grad`: the value *can* require grad (the output of a trainable torch layer,
  `nn.Parameter`, `requires_grad=True`), and whether it is a leaf.

Anything else is unknown and never reported: precision first. The rules word the reasons.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Iterator

from ckptlint.calls import CheckpointCall
from ckptlint.catalogue import CALLABLE, FROM_ARGUMENT, LAYER_CLASS, LIBRARY_DEFAULT, NONE, OMITTED, TRUE
from ckptlint.classes import ClassIndex, ClassInfo
from ckptlint.analysis.semantics.evaluator import TypeInference
from ckptlint.analysis.usage.layer_calls import LayerCalls, ReentrantCalls, checkpoint_inputs
from ckptlint.analysis.semantics.method_callers import MethodCallers, receiver
from ckptlint.analysis.usage.model_inputs import ModelInputs
from ckptlint.symbols import (
    ANNOTATION,
    ASSIGN,
    CLASS,
    COMPREHENSION,
    DEF,
    FUNCTION,
    LAMBDA,
    LOOP,
    MODULE,
    PARAM,
    UNPACK,
    Binding,
    ModuleSymbols,
    Scope,
    parameter_default,
)

# why a value cannot require grad (CKP301's wording keys)
DETACHED = "detached"
NO_GRAD_BLOCK = "no-grad-block"
CREATED = "created"
INTEGER = "integer"
TOKENS = "tokens"
FROZEN_EMBEDDING = "frozen-embedding"
BUFFER = "buffer"
MODEL_INPUT = "model-input"  # the data an entry model is trained on (analysis/usage/model_inputs.py)
NOT_TENSOR = "not-tensor"  # a parameter annotated or defaulted as a bool, int, float or str
# why a value can require grad (CKP302's wording keys)
TRAINABLE_OUTPUT = "trainable-output"
PARAMETER = "parameter"
REQUIRES_GRAD = "requires-grad"
# how a tensor reaches a region other than as a positional input
KEYWORD = "keyword"
PARTIAL = "partial"
CLOSURE = "closure"
GLOBAL = "global"
LAYER_KEYWORD = "layer-keyword"  # a checkpointing layer's keyword argument, bound into its partial
CONTAINER = "container"  # inside a list, tuple or dict passed positionally: not a tensor input
# what goes wrong (CKP302)
RAISES = "raises"  # torch's reentrant checkpoint rejects keyword arguments
DROPPED = "dropped"  # no positional input requires grad: the output is detached
GRAPH_REUSED = "graph-reused"  # the region's inner backward frees a graph used again

_CREATION = frozenset(
    {"tensor", "zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "rand", "randn", "eye",
     "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "from_numpy",
     "Tensor", "FloatTensor", "LongTensor", "BoolTensor", "IntTensor"}
)  # fmt: skip
_INTEGER_CREATION = frozenset({"randint", "randint_like", "randperm", "LongTensor", "IntTensor", "BoolTensor"})
_INTEGER_METHODS = frozenset({"long", "int", "short", "byte", "bool", "char", "argmax", "argmin", "argsort"})
_INTEGER_DTYPES = frozenset({"long", "int64", "int32", "int", "int16", "int8", "uint8", "bool", "short"})
# methods whose result requires grad exactly when the receiver does
_PASS_THROUGH = frozenset(
    {"view", "reshape", "transpose", "permute", "contiguous", "unsqueeze", "squeeze", "flatten", "float",
     "half", "double", "bfloat16", "to", "cuda", "cpu", "clone", "expand", "expand_as", "repeat", "t",
     "view_as", "reshape_as", "narrow", "select", "chunk", "split", "sum", "mean", "relu", "sigmoid", "tanh",
     "softmax", "exp", "log", "abs", "neg", "masked_fill", "type_as", "cos", "sin"}
)  # fmt: skip
_PASS_THROUGH_ATTRIBUTES = frozenset({"T", "mT", "data_ptr"})
# methods whose result requires grad exactly when the receiver or a tensor argument does
_ARITHMETIC = frozenset({"add", "sub", "mul", "div", "true_divide", "pow", "clamp", "clip", "add_", "sub_", "mul_", "div_", "clamp_", "round", "round_"})
# torch and torch.nn.functional functions without parameters of their own: the result requires
# grad exactly when a tensor argument does
_TORCH_PASS_THROUGH = frozenset(
    {"torch.tanh", "torch.sigmoid", "torch.relu", "torch.exp", "torch.log", "torch.abs", "torch.neg", "torch.clamp",
     "torch.cat", "torch.stack", "torch.concat", "torch.flatten", "torch.reshape", "torch.transpose", "torch.permute",
     "torch.squeeze", "torch.unsqueeze", "torch.round", "torch.nn.functional.interpolate", "torch.nn.functional.pad",
     "torch.nn.functional.relu", "torch.nn.functional.gelu", "torch.nn.functional.silu", "torch.nn.functional.avg_pool2d",
     "torch.nn.functional.max_pool2d", "torch.nn.functional.normalize", "torch.nn.functional.softmax"}
)  # fmt: skip
# torch.nn layers that hold trainable parameters (their output requires grad in grad mode)
_TRAINABLE_LAYERS = frozenset(
    {"Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
     "Embedding", "EmbeddingBag", "LayerNorm", "GroupNorm", "RMSNorm", "MultiheadAttention", "LSTM", "GRU", "RNN",
     "PReLU", "LazyLinear", "LazyConv1d", "LazyConv2d", "LazyConv3d"}
)  # fmt: skip
_GRAD_OFF = frozenset({"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad"})
_TOKENIZER_SUFFIXES = ("Tokenizer", "TokenizerFast")
# keywords torch's checkpoint consumes itself; any other raises in reentrant mode
_CHECKPOINT_OWN = frozenset({"use_reentrant", "context_fn", "determinism_check", "debug", "early_stop", "preserve_rng_state", "function"})
# APIs that hand keyword arguments to torch's checkpoint, whose reentrant mode rejects them (timm's `checkpoint(fn, *args, **kwargs)` forwards them)
_REJECTS_KEYWORDS = frozenset({"torch.utils.checkpoint.checkpoint", "._gradient_checkpointing_func", "timm.models._manipulate.checkpoint"})


@dataclass(frozen=True)
class Reason:
    """Why a value cannot (or can) require grad: a wording key and what the message quotes."""

    kind: str
    detail: str = ""  # `self.embed`, `torch.zeros`, `.detach()`
    line: int = 0  # where the decisive code is
    leaf: bool = False  # for needs_grad: a leaf tensor (a parameter, `requires_grad=True`)
    path: str = ""  # the file of `line` when it is not the checkpoint call's

    def at(self) -> str:
        """`line 12`, or `autoencoder_tiny.py:310` in another file."""
        return f"{self.path}:{self.line}" if self.path else f"line {self.line}"


@dataclass(frozen=True)
class NoGradInput:
    """A positional input of the region and why it cannot require grad; `first_pass` is the
    line of the loop around the call when that holds only on the loop's first pass (later
    passes feed the region the previous one's output)."""

    text: str
    reason: Reason
    first_pass: int | None = None
    called_at: ast.Call | None = None  # for a checkpointing layer: the call of the instance


@dataclass(frozen=True)
class UntrackedTensor:
    """A tensor that reaches a reentrant region other than as a positional input."""

    route: str  # KEYWORD, PARTIAL, CLOSURE, GLOBAL, LAYER_KEYWORD, CONTAINER
    name: str  # the keyword, the name, or the expression text
    consequence: str  # RAISES, DROPPED, GRAPH_REUSED
    reason: Reason | None = None  # why it can require grad (None for RAISES)
    called_at: ast.Call | None = None  # for a checkpointing layer: the call of the instance


def reentrant_because(call: CheckpointCall) -> str:
    """What decided the mode, for messages."""
    flag = call.use_reentrant
    if call.api.mode == FROM_ARGUMENT and flag in (OMITTED, NONE):
        return "use_reentrant not passed: torch 2.x falls back to reentrant"
    if flag == TRUE:
        return "use_reentrant=True"
    return call.mode.source  # the library and the version that decided it (modes.py)


def takes_use_reentrant(call: CheckpointCall) -> bool:
    """Whether passing `use_reentrant=False` at the call selects the non-reentrant implementation."""
    return call.api.mode in (FROM_ARGUMENT, LIBRARY_DEFAULT) and call.api.region_kind == CALLABLE


class GradFlow:
    def __init__(self, classes: ClassIndex, inference: TypeInference):
        self.classes = classes
        self.inference = inference
        self.model_inputs = ModelInputs(classes)
        self.layer_calls = LayerCalls(classes)
        self.callers = MethodCallers(classes, inference.project)
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
        return self._starved(call.module, call.scope, call.node, inputs, reentrant)

    def _starved(self, module: ModuleSymbols, scope: Scope, node: ast.AST, inputs: list[ast.expr], reentrant: ReentrantCalls) -> list[NoGradInput]:
        line = getattr(node, "lineno", None)
        found = _all_no_grad(inputs, Evaluator(self, module, scope, line, reentrant=reentrant))
        if found is None and _in_loop(scope.node, node):
            first_pass = Evaluator(self, module, scope, line, reentrant=reentrant, first_pass=True)
            found = _all_no_grad(inputs, first_pass)
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
                return _computed(reason)
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
            dropped = not positional or _all_no_grad(positional, evaluator) is not None
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
        if scope is call.scope and _in_loop(function, call.node):
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
        names: set[str] = set()
        for assignment in self.classes.attribute_assignments(info, attribute):
            value = assignment.value
            if assignment.augmented or not isinstance(value, ast.Call):
                return None
            name = info.module.qualified_name(value.func, assignment.method)
            if not name or not name.startswith("torch.nn."):
                return None
            names.add(name.rpartition(".")[2])
        return names.pop() if len(names) == 1 else None

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


class Evaluator:
    """Evaluates expressions of one function, as seen at one line (None: anywhere)."""

    def __init__(
        self,
        flow: GradFlow,
        module: ModuleSymbols,
        scope: Scope,
        line: int | None,
        depth: int = 0,
        active: frozenset[tuple[int, str]] = frozenset(),
        reentrant: ReentrantCalls | None = None,
        first_pass: bool = False,
    ):
        self.flow = flow
        self.module = module
        self.scope = scope
        self.line = line
        self.depth = depth
        self.active = active  # the parameters being asked about up the call chain (a recursion guard)
        self.reentrant = reentrant  # the module's reentrant checkpoint calls, seen through
        self.first_pass = first_pass  # what the use sees on the first pass of the loop around it
        self._statements = _StatementIndex(scope.node) if scope.kind in (FUNCTION, LAMBDA) else None

    def _at(self, line: int) -> Evaluator:
        """This evaluator as seen at another line of the same function (sharing its index)."""
        if line == self.line and not self.first_pass:
            return self
        twin = copy.copy(self)
        twin.line = line
        twin.first_pass = False  # only the use itself is judged on the loop's first pass
        return twin

    def enclosing_loop(self) -> int | None:
        """The line of the innermost loop around `self.line`, if any."""
        if self._statements is None or self.line is None:
            return None
        loops = self._statements.loops_around(self.line)
        return loops[-1].lineno if loops else None

    # -- cannot require grad --------------------------------------------------

    def no_grad(self, expr: ast.expr, active: frozenset[tuple[str, int]] = frozenset()) -> Reason | None:
        if self.depth > 6:
            return None
        if isinstance(expr, ast.Name):
            return self._name(expr, active, no_grad=True)
        if isinstance(expr, ast.Call):
            return self._call_no_grad(expr, active)
        if isinstance(expr, ast.Subscript):
            if self._token_batch(expr.value):
                return Reason(TOKENS, ast.unparse(expr.value), expr.lineno)
            return self.no_grad(expr.value, active)
        if isinstance(expr, ast.Attribute):
            if self._token_batch(expr.value):
                return Reason(TOKENS, ast.unparse(expr.value), expr.lineno)
            if expr.attr in _PASS_THROUGH_ATTRIBUTES:
                return self.no_grad(expr.value, active)
            line = self._buffer(expr)
            if line is not None:
                return Reason(BUFFER, ast.unparse(expr), line)
            line = self._configuration_attribute(expr)
            return Reason(NOT_TENSOR, ast.unparse(expr), line) if line is not None else None
        if isinstance(expr, ast.BinOp):
            return self._operands(expr.left, expr.right, active=active)
        if isinstance(expr, ast.UnaryOp):
            return self.no_grad(expr.operand, active)
        if isinstance(expr, ast.Compare):
            return Reason(INTEGER, "a comparison", expr.lineno)
        if isinstance(expr, (ast.List, ast.Tuple)) and expr.elts and not any(isinstance(e, ast.Starred) for e in expr.elts):
            return self._operands(*expr.elts, active=active)
        if isinstance(expr, ast.IfExp):
            body, orelse = self.no_grad(expr.body, active), self.no_grad(expr.orelse, active)
            return body if body is not None and orelse is not None else None
        return None

    def _operands(self, *operands: ast.expr, active: frozenset[tuple[str, int]]) -> Reason | None:
        first: Reason | None = None
        for operand in operands:
            if isinstance(operand, ast.Constant):
                continue
            reason = self.no_grad(operand, active)
            if reason is None:
                return None
            first = _better(first, reason)
        return first

    def _call_no_grad(self, call: ast.Call, active: frozenset[tuple[str, int]]) -> Reason | None:
        func = call.func
        name = self.module.qualified_name(func, self.scope)
        if name in _TORCH_PASS_THROUGH and not any(isinstance(a, ast.Starred) for a in call.args):
            return self._operands(*call.args[:1], active=active) if call.args else None  # the input; the rest are options
        if isinstance(func, ast.Attribute):
            method = func.attr
            if method in ("detach", "detach_"):
                return Reason(DETACHED, f".{method}()", call.lineno)
            if method in _INTEGER_METHODS:
                return Reason(INTEGER, f".{method}()", call.lineno)
            if method in ("to", "type") and any(_integer_dtype(a) for a in (*call.args, *(k.value for k in call.keywords))):
                return Reason(INTEGER, f".{method}({ast.unparse(call.args[0]) if call.args else '...'})", call.lineno)
            if method in _PASS_THROUGH and not _sets_requires_grad(call):
                if self._token_batch(func.value):
                    return Reason(TOKENS, ast.unparse(func.value), call.lineno)
                return self.no_grad(func.value, active)
            if method in _ARITHMETIC and not call.keywords and not any(isinstance(a, ast.Starred) for a in call.args):
                return self._operands(func.value, *call.args, active=active)
            if isinstance(func.value, ast.Name) and func.value.id == self.scopereceiver():
                return self._frozen_embedding(method) or self.flow.method_returns_no_grad(self.module, self.scope, call, self.depth, self.active)
        if self.reentrant is not None:
            inputs = self.reentrant.inputs_of(call, self.module, self.scope)
            if inputs is not None:  # a reentrant region's output requires grad only if one of its inputs does
                return self._operands(*inputs, active=active) if inputs else None
        if name == "torch.utils.checkpoint.checkpoint" and _literal_reentrant(call):
            # a reentrant region's output requires grad only if one of its positional inputs does
            return self._operands(*call.args[1:], active=active) if call.args[1:] and not any(isinstance(a, ast.Starred) for a in call.args) else None
        if name is not None and name.startswith("torch."):
            leaf = name.rpartition(".")[2]
            if name.count(".") == 1 and (leaf in _CREATION or leaf in _INTEGER_CREATION) and not _sets_requires_grad(call):
                kind = INTEGER if leaf in _INTEGER_CREATION or any(_integer_dtype(k.value) for k in call.keywords if k.arg == "dtype") else CREATED
                return Reason(kind, name, call.lineno)
        return None

    def _frozen_embedding(self, attribute: str) -> Reason | None:
        info = self.flow.classes.enclosing_class(self.module, self.scope)
        if info is None:
            return None
        line = self.flow.frozen_line(info, attribute)  # first: rarely anything, and cheaper than the attribute's class
        if line is None or self.flow.layer_class(info, attribute) not in ("Embedding", "EmbeddingBag"):
            return None
        return Reason(FROZEN_EMBEDDING, f"self.{attribute}", line)

    def scopereceiver(self) -> str | None:
        current: Scope | None = self.scope
        while current is not None and current.enclosing_class is None:
            current = current.parent
        return current.first_parameter() if current is not None else None

    def _buffer(self, expr: ast.Attribute) -> int | None:
        """The line registering `self.<attr>` as a buffer, when `expr` is one."""
        if not (isinstance(expr.value, ast.Name) and expr.value.id == self.scopereceiver()):
            return None
        info = self.flow.classes.enclosing_class(self.module, self.scope)
        if info is None:
            return None
        return self.flow.buffer_line(info, expr.attr)

    def container_needs_grad(self, expr: ast.expr, active: frozenset[tuple[int, str]] = frozenset()) -> Reason | None:
        """Why a list, tuple or dict display, or a name bound to one (here or by a caller of the
        function, for a parameter), holds a tensor that can require grad; None otherwise."""
        if self.depth > 6:
            return None
        if isinstance(expr, (ast.List, ast.Tuple)):
            return self.needs_grad(expr)
        if isinstance(expr, ast.Dict):
            return next((r for r in (self.needs_grad(v) for v in expr.values) if r is not None), None)
        if not isinstance(expr, ast.Name):
            return None
        for binding in self._reaching(expr.id):
            if binding.kind == ASSIGN and isinstance(binding.value, (ast.List, ast.Tuple, ast.Dict)) and binding.scope is self.scope:
                reason = self._at(binding.line).container_needs_grad(binding.value, active)
            elif binding.kind == PARAM and binding.scope is self.scope:
                reason = self.flow.parameter_container_needs_grad(self.module, self.scope, binding.name, self.depth, self.active | active)
            else:
                continue
            if reason is not None:
                return reason
        return None

    def _parameter_attribute(self, expr: ast.Attribute) -> int | None:
        """The line building `self.<attr>` as an `nn.Parameter`, when every assignment does, or
        `self.<layer>.weight`/`.bias` of a trainable torch layer that is not frozen."""
        if expr.attr in ("weight", "bias") and isinstance(expr.value, ast.Attribute) and isinstance(expr.value.value, ast.Name):
            if expr.value.value.id == self.scopereceiver():
                owner = self.flow.classes.enclosing_class(self.module, self.scope)
                if owner is not None and self.flow.layer_class(owner, expr.value.attr) in _TRAINABLE_LAYERS and self.flow.frozen_line(owner, expr.value.attr) is None:
                    return expr.lineno
        if not (isinstance(expr.value, ast.Name) and expr.value.id == self.scopereceiver()):
            return None
        info = self.flow.classes.enclosing_class(self.module, self.scope)
        assignments = self.flow.classes.attribute_assignments(info, expr.attr) if info is not None else []
        for assignment in assignments:
            value = assignment.value
            if assignment.augmented or not isinstance(value, ast.Call):
                return None
            if self.module.qualified_name(value.func, assignment.method) not in ("torch.nn.Parameter", "torch.nn.parameter.Parameter"):
                return None
        return assignments[0].node.lineno if assignments else None

    def _configuration_attribute(self, expr: ast.Attribute) -> int | None:
        """The line setting `self.<attr>` when every assignment of it stores a number, a string or
        a bool (a constant, or a parameter annotated or defaulted so): not a tensor."""
        if not (isinstance(expr.value, ast.Name) and expr.value.id == self.scopereceiver()):
            return None
        info = self.flow.classes.enclosing_class(self.module, self.scope)
        assignments = self.flow.classes.attribute_assignments(info, expr.attr) if info is not None else []
        if not assignments:
            return None
        for assignment in assignments:
            value = assignment.value
            if assignment.augmented or value is None:
                return None
            if isinstance(value, ast.Constant) and isinstance(value.value, (bool, int, float, str)):
                continue
            if isinstance(value, ast.Name):
                bindings = [b for b in self.module.lookup(assignment.method, value.id) if b.kind != ANNOTATION]
                if len(bindings) == 1 and bindings[0].kind == PARAM and _non_tensor_parameter(bindings[0]):
                    continue
            return None
        return assignments[0].node.lineno

    def _token_batch(self, expr: ast.expr, depth: int = 0) -> bool:
        """Whether `expr` is what a tokenizer returns (`tokenizer(texts, return_tensors="pt")`)."""
        if depth > 4:
            return False
        if isinstance(expr, ast.Call):
            if isinstance(expr.func, ast.Attribute) and expr.func.attr == "to":
                return self._token_batch(expr.func.value, depth + 1)
            return self._tokenizer(expr.func, depth + 1)
        if isinstance(expr, ast.Name):
            bindings = self._reaching(expr.id)
            return bool(bindings) and all(
                b.kind == ASSIGN and b.value is not None and self._token_batch(b.value, depth + 1) for b in bindings
            )
        return False

    def _tokenizer(self, expr: ast.expr, depth: int) -> bool:
        """A tokenizer object: `AutoTokenizer.from_pretrained(...)` or a name bound to one."""
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "from_pretrained":
            name = self.module.qualified_name(expr.func.value, self.scope) or ""
            return name.startswith("transformers.") and name.endswith(_TOKENIZER_SUFFIXES)
        if isinstance(expr, ast.Name) and depth <= 4:
            bindings = self._reaching(expr.id)
            return bool(bindings) and all(b.kind == ASSIGN and b.value is not None and self._tokenizer(b.value, depth + 1) for b in bindings)
        return False

    # -- can require grad -----------------------------------------------------

    def needs_grad(self, expr: ast.expr, active: frozenset[tuple[str, int]] = frozenset()) -> Reason | None:
        if self.depth > 6:
            return None
        if isinstance(expr, ast.Name):
            return self._name(expr, active, no_grad=False)
        if isinstance(expr, ast.BinOp):
            return _computed(self.needs_grad(expr.left, active) or self.needs_grad(expr.right, active))
        if isinstance(expr, ast.Subscript) or (isinstance(expr, ast.Attribute) and expr.attr in _PASS_THROUGH_ATTRIBUTES):
            return self.needs_grad(expr.value, active)
        if isinstance(expr, (ast.List, ast.Tuple)):
            return next((r for r in (self.needs_grad(e, active) for e in expr.elts if not isinstance(e, ast.Starred)) if r is not None), None)
        if isinstance(expr, ast.IfExp):
            return self.needs_grad(expr.body, active) or self.needs_grad(expr.orelse, active)
        if isinstance(expr, ast.Attribute):
            line = self._parameter_attribute(expr)
            return Reason(PARAMETER, ast.unparse(expr), line, leaf=True) if line is not None else None
        if not isinstance(expr, ast.Call):
            return None
        func = expr.func
        name = self.module.qualified_name(func, self.scope) or ""
        if name in ("torch.nn.Parameter", "torch.nn.parameter.Parameter"):
            return Reason(PARAMETER, "nn.Parameter", expr.lineno, leaf=True)
        if name in _TORCH_PASS_THROUGH and expr.args:
            return _computed(self.needs_grad(expr.args[0], active))
        if name.startswith("torch.") and name.count(".") == 1 and _sets_requires_grad(expr, value=True):
            return Reason(REQUIRES_GRAD, name, expr.lineno, leaf=True)
        if isinstance(func, ast.Attribute):
            if func.attr in ("detach", "detach_") or func.attr in _INTEGER_METHODS:
                return None
            if func.attr == "requires_grad_" and not _falseargument(expr):
                return Reason(REQUIRES_GRAD, ".requires_grad_()", expr.lineno, leaf=True)
            if func.attr in _PASS_THROUGH or func.attr in _ARITHMETIC:
                return _computed(self.needs_grad(func.value, active))
            if isinstance(func.value, ast.Name) and func.value.id == self.scopereceiver():
                info = self.flow.classes.enclosing_class(self.module, self.scope)
                layer = self.flow.layer_class(info, func.attr) if info is not None else None
                if layer in _TRAINABLE_LAYERS and info is not None and self.flow.frozen_line(info, func.attr) is None:
                    return Reason(TRAINABLE_OUTPUT, f"self.{func.attr}", expr.lineno)
                return self.flow.method_returns(self.module, self.scope, expr, self.depth, self.active, Evaluator.needs_grad)
        return None

    # -- names ----------------------------------------------------------------

    def _name(self, expr: ast.Name, active: frozenset[tuple[str, int]], no_grad: bool) -> Reason | None:
        """The reason holding for every binding of the name that can reach the use (no_grad), or
        for one of them (needs_grad)."""
        bindings = self._reaching(expr.id)
        if not bindings:
            return None
        if no_grad and self._grad_enabled_later(expr.id):
            return None
        found: Reason | None = None
        for binding in bindings:
            key = (binding.name, binding.line)
            if key in active:
                continue  # a loop carrying the value: by induction it keeps the other bindings' property
            reason = self._binding(binding, active | {key}, no_grad)
            if no_grad and reason is None:
                return None
            if not no_grad and reason is not None:
                return reason
            found = _better(found, reason)
        if found is None and no_grad:
            return CARRIED  # every binding is one being evaluated further up: what the others give
        return found

    def _binding(self, binding: Binding, active: frozenset[tuple[str, int]], no_grad: bool) -> Reason | None:
        if binding.kind == LOOP and no_grad and _splits(binding.value):
            # `for x_slice in x.split(1)`: each slice requires grad exactly when `x` does
            assert isinstance(binding.value, ast.Call) and isinstance(binding.value.func, ast.Attribute)
            scope = binding.scope.parent if binding.scope.kind == COMPREHENSION and binding.scope.parent is not None else binding.scope
            evaluator = self if scope is self.scope else Evaluator(self.flow, self.module, scope, None, self.depth + 1, self.active, self.reentrant)
            return evaluator.no_grad(binding.value.func.value, active)
        if binding.kind == PARAM and binding.scope is self.scope:
            if _non_tensor_parameter(binding):
                return Reason(NOT_TENSOR, binding.name, binding.line) if no_grad else None
            if no_grad:
                return self.flow.parameter_no_grad(self.module, self.scope, binding.name, self.depth, self.active, self.reentrant)
            return self.flow.parameter_needs_grad(self.module, self.scope, binding.name, self.depth, self.active)
        if binding.kind not in (ASSIGN, UNPACK) or binding.value is None:
            return None
        scope = binding.written_from or binding.scope
        # the value is read where the binding is: what reaches its line, not the use's
        evaluator = self._at(binding.line) if scope is self.scope else Evaluator(self.flow, self.module, scope, None, self.depth + 1, self.active, self.reentrant)
        in_no_grad = evaluator._statements.grad_off(binding.node) if evaluator._statements is not None else None
        if no_grad and in_no_grad is not None:
            return Reason(NO_GRAD_BLOCK, in_no_grad, binding.line)
        if not no_grad and in_no_grad is not None:
            return None
        value = binding.value
        if binding.kind == UNPACK:
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in ("chunk", "split", "unbind"):
                value = value.func.value
            elif not no_grad:
                return None  # an element of what a call returns: unknown
            # else: no element of a value that cannot require grad can (a reentrant region's outputs)
        return evaluator.no_grad(value, active) if no_grad else evaluator.needs_grad(value, active)

    def _reaching(self, name: str) -> list[Binding]:
        """The bindings of `name` that can be what the use at `self.line` sees."""
        bindings = [b for b in self.module.lookup(self.scope, name) if b.kind != ANNOTATION]
        if not bindings:
            return []
        if any(b.kind == PARAM for b in bindings) and bindings[0].scope is not self.scope:
            return []  # an enclosing function's parameter: unknown provenance
        if self.line is None or self._statements is None or bindings[0].scope is not self.scope:
            return bindings
        return self._statements.reaching([b for b in bindings if b.written_from is None], self.line, self.first_pass)

    def _grad_enabled_later(self, name: str) -> bool:
        """`x.requires_grad_()` or `x.requires_grad = True` anywhere in the function: not known."""
        return name in self.flow.grad_enabled_names(self.module, self.scope)


class _StatementIndex:
    """Statements of one function with their enclosing blocks, for reaching definitions."""

    def __init__(self, function: ast.AST):
        self.blocks: dict[int, tuple[tuple[int, str], ...]] = {}  # id(stmt) -> (id(owner), field) chain
        self.grad: dict[int, str | None] = {}  # id(stmt) -> the grad-disabling context around it
        self.loops: dict[int, tuple[ast.stmt, ...]] = {}
        self.statements: list[ast.stmt] = []
        body = getattr(function, "body", None)
        if isinstance(body, list):
            self._visit(body, (), None, ())

    def _visit(self, body: list[ast.stmt], chain: tuple[tuple[int, str], ...], grad: str | None, loops: tuple[ast.stmt, ...]) -> None:
        for statement in body:
            self.blocks[id(statement)] = chain
            self.grad[id(statement)] = grad
            self.loops[id(statement)] = loops
            self.statements.append(statement)
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            inner_grad = grad
            if isinstance(statement, (ast.With, ast.AsyncWith)):
                for item in statement.items:
                    text = grad_context(item.context_expr)
                    if text is not None:
                        inner_grad = text if text != "enable" else None
                self._visit(statement.body, chain, inner_grad, loops)  # a with body always runs
                continue
            inner_loops = (*loops, statement) if isinstance(statement, (ast.For, ast.AsyncFor, ast.While)) else loops
            for field in ("body", "orelse", "finalbody"):
                block = getattr(statement, field, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                    self._visit(block, (*chain, (id(statement), field)), grad, inner_loops)
            for index, handler in enumerate(getattr(statement, "handlers", [])):
                self._visit(handler.body, (*chain, (id(statement), f"handler{index}")), grad, inner_loops)
            for index, case in enumerate(getattr(statement, "cases", [])):
                self._visit(case.body, (*chain, (id(statement), f"case{index}")), grad, inner_loops)

    def statement_of(self, node: ast.AST) -> ast.stmt | None:
        if isinstance(node, ast.stmt) and id(node) in self.blocks:
            return node
        line, column = getattr(node, "lineno", 0), getattr(node, "col_offset", 0)
        best: ast.stmt | None = None
        for statement in self.statements:
            if (statement.lineno, statement.col_offset) <= (line, column) <= (statement.end_lineno or statement.lineno, statement.end_col_offset or 0):
                best = statement  # later statements in the list are nested deeper
        return best

    def grad_off(self, node: ast.AST) -> str | None:
        statement = self.statement_of(node)
        return self.grad.get(id(statement)) if statement is not None else None

    def loops_around(self, line: int) -> tuple[ast.stmt, ...]:
        use = next((s for s in reversed(self.statements) if s.lineno <= line <= (s.end_lineno or s.lineno)), None)
        return self.loops.get(id(use), ()) if use is not None else ()

    def reaching(self, bindings: list[Binding], line: int, first_pass: bool = False) -> list[Binding]:
        """The last binding before `line` that always runs on the way, and the conditional ones
        after it; bindings later in a loop around the use come round again (unless `first_pass`:
        what the use sees on the loop's first pass)."""
        use = next((s for s in reversed(self.statements) if s.lineno <= line <= (s.end_lineno or s.lineno)), None)
        if use is None:
            return bindings
        use_chain = self.blocks.get(id(use), ())
        use_loops = self.loops.get(id(use), ())
        before = sorted((b for b in bindings if b.line < line), key=lambda b: b.line)
        found: list[Binding] = []
        for binding in reversed(before):
            found.append(binding)
            statement = self.statement_of(binding.node)
            chain = self.blocks.get(id(statement), None) if statement is not None else None
            if chain is not None and use_chain[: len(chain)] == chain:
                break  # it always runs before the use: earlier ones are overwritten
        loop_lines = [(loop.lineno, loop.end_lineno or loop.lineno) for loop in use_loops]
        if first_pass:
            return found
        for binding in bindings:
            if binding.line >= line and any(start <= binding.line <= end for start, end in loop_lines):
                found.append(binding)
        return found


def _all_no_grad(inputs: list[ast.expr], evaluator: Evaluator) -> list[NoGradInput] | None:
    found: list[NoGradInput] = []
    for argument in inputs:
        if isinstance(argument, ast.Constant):
            continue  # not a tensor
        reason = evaluator.no_grad(argument)
        if reason is None:
            return None
        if reason.kind == NOT_TENSOR:
            continue  # `output_attentions: bool`: not one of the region's tensors
        found.append(NoGradInput(ast.unparse(argument), reason))
    return found or None


_NON_TENSOR_ANNOTATIONS = frozenset({"bool", "int", "float", "str"})


def _non_tensor_parameter(binding: Binding) -> bool:
    """A parameter annotated `bool`/`int`/`float`/`str` (or Optional of one), or defaulting to such a constant."""
    node = binding.node
    annotation = node.annotation if isinstance(node, ast.arg) else None
    if annotation is not None:
        names = {n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)} | {
            n.value for n in ast.walk(annotation) if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }
        names.discard("None")
        names.discard("Optional")
        return bool(names) and names <= _NON_TENSOR_ANNOTATIONS
    default = parameter_default(binding)
    return isinstance(default, ast.Constant) and isinstance(default.value, (bool, int, float, str))


def grad_off_at(scope: Scope, node: ast.AST) -> bool:
    """Whether `node` runs inside a `torch.no_grad()` (or `inference_mode`) block of its function."""
    if scope.kind not in (FUNCTION, LAMBDA):
        return False
    return _StatementIndex(scope.node).grad_off(node) is not None


def _computed(reason: Reason | None) -> Reason | None:
    """What a computation on a tensor that needs grad gives: it needs grad too, and is no leaf."""
    return replace(reason, leaf=False) if reason is not None and reason.leaf else reason


def _reused(scope: Scope, node: ast.AST, value: ast.expr) -> bool:
    """Whether the graph behind `value` serves more than this one call: the call runs in a loop
    (the next pass's region backs through it again), or a name in it is read elsewhere."""
    function = scope.node
    if _in_loop(function, node):
        return True
    names = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
    inside = {id(n) for n in ast.walk(node)}
    return any(isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load) and id(n) not in inside for n in ast.walk(function))


CARRIED = Reason("carried")  # a loop-carried value, judged by the bindings around it: says nothing itself
_SAYS_LITTLE = frozenset({CARRIED.kind, NOT_TENSOR})


def _better(found: Reason | None, reason: Reason | None) -> Reason | None:
    """Of two reasons that both hold, the one worth quoting: a carried or non-tensor reason
    says least."""
    if reason is None:
        return found
    if found is None or (found.kind in _SAYS_LITTLE and reason.kind not in _SAYS_LITTLE):
        return reason
    return found


def _splits(value: ast.expr | None) -> bool:
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in ("split", "chunk", "unbind")


def grad_context(expr: ast.expr) -> str | None:
    """`torch.no_grad()` / `torch.inference_mode()` (their text), `torch.enable_grad()` ("enable")."""
    if not isinstance(expr, ast.Call):
        return None
    text = ast.unparse(expr.func)
    leaf = text.rpartition(".")[2]
    if leaf in ("no_grad", "inference_mode") and (text.startswith("torch.") or text == leaf):
        if leaf == "inference_mode" and expr.args and isinstance(expr.args[0], ast.Constant) and expr.args[0].value is False:
            return None
        return f"{text}()"
    if leaf == "set_grad_enabled" and expr.args and isinstance(expr.args[0], ast.Constant) and expr.args[0].value is False:
        return f"{text}(False)"
    if leaf in ("enable_grad", "set_grad_enabled"):
        return "enable"
    return None


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
            return _falseargument(node)
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
                    return _falseargument(statement.value)
    return None


def _names_attribute(expr: ast.expr, receiver: str, attribute: str, exact: bool = False) -> bool:
    """`self.<attribute>` (or, unless exact, `self.<attribute>.weight`)."""
    if not exact and isinstance(expr, ast.Attribute) and expr.attr == "weight":
        expr = expr.value
    return isinstance(expr, ast.Attribute) and expr.attr == attribute and isinstance(expr.value, ast.Name) and expr.value.id == receiver


def _falseargument(call: ast.Call) -> bool:
    """`requires_grad_(False)` (or `requires_grad=False`)."""
    values = [*call.args[:1], *(k.value for k in call.keywords if k.arg == "requires_grad")]
    return any(isinstance(v, ast.Constant) and v.value is False for v in values)


def _sets_requires_grad(call: ast.Call, value: bool | None = None) -> bool:
    """Whether the call passes `requires_grad=` (with `value`, when given; any non-False otherwise)."""
    for keyword in call.keywords:
        if keyword.arg == "requires_grad":
            constant = keyword.value.value if isinstance(keyword.value, ast.Constant) else None
            if value is True:
                return constant is True
            return constant is not False
        if keyword.arg is None:
            return value is None  # **kwargs may carry it
    return False


def _literal_reentrant(call: ast.Call) -> bool:
    """`checkpoint(...)` with `use_reentrant=True` (or omitted, which torch 2.x treats as True)."""
    for keyword in call.keywords:
        if keyword.arg is None:
            return False
        if keyword.arg == "use_reentrant":
            return isinstance(keyword.value, ast.Constant) and keyword.value.value in (True, None)
    return True


def _integer_dtype(expr: ast.expr) -> bool:
    text = ast.unparse(expr)
    return text.startswith("torch.") and text.rpartition(".")[2] in _INTEGER_DTYPES


def _in_loop(function: ast.AST, node: ast.AST) -> bool:
    index = _StatementIndex(function)
    statement = index.statement_of(node)
    return statement is not None and bool(index.loops.get(id(statement)))


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
