"""Can this value require grad? The gradient evaluator of one function's expressions, with a
reason attached (CKP301, CKP302).

- `no_grad`: the value *cannot* require grad (`.detach()`, computed under `torch.no_grad()`,
  created by `torch.zeros` without `requires_grad`, an integer tensor, token ids from a
  tokenizer, the output of an embedding frozen in the same class, a registered buffer);
- `needs_grad`: the value *can* require grad (the output of a trainable torch layer,
  `nn.Parameter`, `requires_grad=True`), and whether it is a leaf.

Anything else is unknown and never reported: precision first. Questions about other functions
and classes go to a `GradOracle` (`protocol.py`).
"""

from __future__ import annotations

import ast
import copy
from dataclasses import replace

from ckptlint.analysis.flow.statements import StatementIndex
from ckptlint.analysis.usage.facts import (
    BUFFER,
    CREATED,
    DETACHED,
    FROZEN_EMBEDDING,
    INTEGER,
    NO_GRAD_BLOCK,
    NOT_TENSOR,
    PARAMETER,
    REQUIRES_GRAD,
    TOKENS,
    TRAINABLE_OUTPUT,
    NoGradInput,
    Reason,
)
from ckptlint.analysis.usage.layer_calls import ReentrantCalls
from ckptlint.analysis.usage.protocol import GradOracle
from ckptlint.symbols import (
    ANNOTATION,
    ASSIGN,
    COMPREHENSION,
    FUNCTION,
    LAMBDA,
    LOOP,
    PARAM,
    UNPACK,
    Binding,
    ModuleSymbols,
    Scope,
    parameter_default,
)

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
_TOKENIZER_SUFFIXES = ("Tokenizer", "TokenizerFast")


class Evaluator:
    """Evaluates expressions of one function, as seen at one line (None: anywhere)."""

    def __init__(
        self,
        flow: GradOracle,
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
        self._statements = StatementIndex(scope.node) if scope.kind in (FUNCTION, LAMBDA) else None

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
            return computed(self.needs_grad(expr.left, active) or self.needs_grad(expr.right, active))
        if isinstance(expr, ast.Subscript) or (isinstance(expr, ast.Attribute) and expr.attr in _PASS_THROUGH_ATTRIBUTES):
            return computed(self.needs_grad(expr.value, active))  # `table[index]`, `w.T`: a new tensor, not the leaf
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
            return computed(self.needs_grad(expr.args[0], active))
        if name.startswith("torch.") and name.count(".") == 1 and _sets_requires_grad(expr, value=True):
            return Reason(REQUIRES_GRAD, name, expr.lineno, leaf=True)
        if isinstance(func, ast.Attribute):
            if func.attr in ("detach", "detach_") or func.attr in _INTEGER_METHODS:
                return None
            if func.attr == "requires_grad_" and not false_argument(expr):
                return Reason(REQUIRES_GRAD, ".requires_grad_()", expr.lineno, leaf=True)
            if func.attr in _PASS_THROUGH or func.attr in _ARITHMETIC:
                return computed(self.needs_grad(func.value, active))
            if isinstance(func.value, ast.Name) and func.value.id == self.scopereceiver():
                info = self.flow.classes.enclosing_class(self.module, self.scope)
                layer = self.flow.layer_class(info, func.attr) if info is not None else None
                trainable = layer in _TRAINABLE_LAYERS or (layer == "Sequential" and info is not None and bool(self.flow.sequential_layers(info, func.attr) & _TRAINABLE_LAYERS))
                if trainable and info is not None and self.flow.frozen_line(info, func.attr) is None:
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


def all_no_grad(inputs: list[ast.expr], evaluator: Evaluator, known: dict[int, Reason] | None = None) -> list[NoGradInput] | None:
    """Why each input cannot require grad, when none can; `known`: reasons by position that
    the region itself gives (what it embeds), for inputs the evaluator cannot judge."""
    found: list[NoGradInput] = []
    for position, argument in enumerate(inputs):
        if isinstance(argument, ast.Constant):
            continue  # not a tensor
        reason = evaluator.no_grad(argument) or (known or {}).get(position)
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


def computed(reason: Reason | None) -> Reason | None:
    """What a computation on a tensor that needs grad gives: it needs grad too, and is no leaf."""
    return replace(reason, leaf=False) if reason is not None and reason.leaf else reason


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


def false_argument(call: ast.Call) -> bool:
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
