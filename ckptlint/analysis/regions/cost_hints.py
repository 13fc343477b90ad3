"""Where what a checkpoint buys is known from the code: static cost hints for a checkpoint call.

Hints, not findings: no rule code, no effect on a lint's result. `ckptlint calls` shows them,
and `ckptlint confirm --cost --lint PATHS` puts them beside the hints the cost replays measure
(runtime/cost_hints.py). They are computed only when asked for (`Settings.want_hints`): a lint
pays nothing for them.

- `single-cheap-op`: the region is one elementwise op or norm: a torch function (`F.relu`,
  `torch.tanh`, `F.layer_norm`), a torch.nn module of that kind (`self.norm` built as
  `nn.LayerNorm`, `nn.RMSNorm`, `nn.GELU`, `nn.Dropout`...; what `self.<attr>` holds is the type
  inference's answer, semantics/evaluator.py), or a lambda, local function or `partial` whose body is one
  call of such a thing on its parameters. The op saves little beyond its input, which the
  checkpoint keeps anyway, and the checkpoint adds a call and a recompute.
- `embedding`: the region is an embedding lookup (`nn.Embedding`, `nn.EmbeddingBag`,
  `F.embedding`): its backward keeps only the indices, so checkpointing it frees nothing.
- `last-block`: the call checkpoints each element of a module container in a `for` loop over it
  (`for block in self.blocks`, `for i, layer in enumerate(self.layers)`, `for i in
  range(len(self.layers))` with `self.layers[i]`), the last element included: unconditionally
  in the loop body, or under tests of checkpointing or training flags only (`if
  self.gradient_checkpointing and self.training`). The last block's recompute runs first in
  backward, right after the head's forward: checkpointing it hardly lowers the peak while it
  still pays a whole recompute. Anything that can leave an element out keeps the hint away: a
  slice (`self.layers[:-1]`), another test (`if i < len(self.layers) - 1`), a `break`,
  `continue` or `return` in the loop body, another checkpoint call after the loop in the same
  function (then the loop's last block is not the last one checkpointed).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

from ckptlint.analysis.knowledge import torch_api
from ckptlint.analysis.semantics.evaluator import TypeInference
from ckptlint.analysis.semantics.values import (
    ClassType,
    ContainerType,
    FunctionType,
    Types,
)
from ckptlint.calls import CheckpointCall
from ckptlint.catalogue import CALLABLE, MODULE
from ckptlint.symbols import FUNCTION, ModuleSymbols, Scope

SINGLE_CHEAP_OP, EMBEDDING, LAST_BLOCK = "single-cheap-op", "embedding", "last-block"
HINT_KINDS = (SINGLE_CHEAP_OP, EMBEDDING, LAST_BLOCK)

_CHEAP, _LOOKUP = "cheap", "lookup"
# torch.nn modules whose forward is one elementwise op or norm
CHEAP_MODULES = frozenset(
    {"LayerNorm", "RMSNorm", "GroupNorm", "LocalResponseNorm", *torch_api.TORCH_BATCH_NORM_MODULES, *torch_api.TORCH_INSTANCE_NORM_MODULES,
     "ReLU", "ReLU6", "GELU", "SiLU", "Mish", "Tanh", "Sigmoid", "Hardtanh", "Hardswish", "Hardsigmoid", "LeakyReLU",
     "ELU", "SELU", "CELU", "PReLU", "Softplus", "Softsign", "Softshrink", "Hardshrink", "Tanhshrink", "Threshold",
     "GLU", "LogSigmoid", "Softmax", "Softmin", "LogSoftmax", "Softmax2d", *torch_api.TORCH_DROPOUT_MODULES}
)  # fmt: skip
EMBEDDING_MODULES = frozenset({"Embedding", "EmbeddingBag"})
# the same ops as functions of torch.nn.functional, of torch, and as tensor methods
CHEAP_FUNCTIONS = frozenset(
    {"relu", "relu6", "gelu", "silu", "mish", "tanh", "sigmoid", "hardtanh", "hardswish", "hardsigmoid", "leaky_relu",
     "elu", "selu", "celu", "prelu", "softplus", "softsign", "softshrink", "hardshrink", "tanhshrink", "threshold",
     "glu", "logsigmoid", "softmax", "softmin", "log_softmax", "layer_norm", "rms_norm", "group_norm", "batch_norm",
     "instance_norm", "local_response_norm", "normalize", "dropout", "dropout1d", "dropout2d", "dropout3d",
     "alpha_dropout", "feature_alpha_dropout", "exp", "log", "sqrt", "rsqrt", "abs", "neg", "square"}
)  # fmt: skip
_FUNCTION_MODULES = ("torch.nn.functional.", "torch.")
EMBEDDING_FUNCTIONS = frozenset({"torch.nn.functional.embedding", "torch.nn.functional.embedding_bag", "torch.embedding", "torch.embedding_bag"})
PARTIAL = frozenset({"functools.partial"})
_CALLING_ATTRIBUTES = frozenset({"__call__", "forward"})  # `block.__call__`, `block.forward`: the block itself
# a test that only says whether to checkpoint at all (`if self.gradient_checkpointing and self.training`)
FLAG_WORDS = re.compile(r"checkpoint|ckpt|training|recompute|remat", re.IGNORECASE)
GRAD_ENABLED = frozenset(torch_api.GRAD_MODE_FUNCTIONS)
_SEQUENCES = frozenset({torch_api.SEQUENCE, torch_api.SEQUENTIAL})
MAX_DEPTH = 4  # a lambda calling a local function calling a module...


@dataclass(frozen=True)
class CostHint:
    """One hint at a checkpoint call: `kind` (HINT_KINDS) and a sentence saying why and what to do."""

    kind: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "message": self.message}


@dataclass(frozen=True)
class _Op:
    """What a region is when it is one torch op: cheap or a lookup, and how to name it."""

    kind: str  # _CHEAP or _LOOKUP
    name: str  # `F.relu`, `nn.LayerNorm`


class RegionCost:
    """The static cost hints of the checkpoint calls of one module (`calls`, in source order)."""

    def __init__(self, inference: TypeInference, calls: Sequence[CheckpointCall]):
        self.inference = inference
        self.calls = calls

    def hints(self, call: CheckpointCall) -> list[CostHint]:
        if call.api.region_kind not in (CALLABLE, MODULE) or not isinstance(call.region, ast.expr):
            return []
        found: list[CostHint] = []
        op = self._op(call.region, call.module, call.scope, 0)
        if op is not None and op.kind == _LOOKUP:
            found.append(CostHint(
                EMBEDDING,
                f"the region is an embedding lookup ({op.name}): its backward keeps only the indices, which the "
                "checkpoint keeps as well, so checkpointing it frees nothing; leave it out of the region",
            ))
        elif op is not None:
            found.append(CostHint(
                SINGLE_CHEAP_OP,
                f"the region is one elementwise op or norm ({op.name}): it saves little beyond its input, which the "
                "checkpoint keeps anyway, while the checkpoint adds a call and a recompute; checkpoint it together "
                "with the layers around it, or not at all",
            ))
        container = self._last_block_container(call)
        if container is not None:
            found.append(CostHint(
                LAST_BLOCK,
                f"every block of `{container}` is checkpointed, the last one included: its recompute runs first in "
                "backward, right after the head's forward, so checkpointing it lowers no peak memory while it still "
                f"pays the recompute; skip the last block (`if i < len({container}) - 1`, or loop over "
                f"`{container}[:-1]` and call the last block plainly)",
            ))
        return found

    # -- single-cheap-op, embedding ---------------------------------------------------

    def _op(self, expr: ast.expr, module: ModuleSymbols, scope: Scope, depth: int) -> _Op | None:
        """The one torch op `expr`, called, runs; None when it runs anything else or is not known."""
        if depth > MAX_DEPTH:
            return None
        if isinstance(expr, ast.Attribute) and expr.attr in _CALLING_ATTRIBUTES:
            expr = expr.value
        if isinstance(expr, ast.Call):  # `partial(F.dropout, p=0.1)`: the function, its arguments bound
            name = self.inference.qualified_name(expr.func, module, scope)
            if name in PARTIAL and expr.args and not _calls_in(expr.args[1:], expr.keywords):
                return self._op(expr.args[0], module, scope, depth + 1)
            return None
        if isinstance(expr, (ast.Name, ast.Attribute)):
            found = _function_op(self.inference.qualified_name(expr, module, scope), expr)
            if found is not None:
                return found
        return self._op_of_types(self.inference.types(expr, module, scope), depth)

    def _op_of_types(self, types: Types, depth: int) -> _Op | None:
        """The op every type in `types` runs, when they all run the same kind of one op."""
        ops = [self._op_of_type(item, depth) for item in types]
        if not ops or any(op is None for op in ops):
            return None
        kinds = {op.kind for op in ops if op is not None}
        if len(kinds) != 1:
            return None
        return min((op for op in ops if op is not None), key=lambda op: op.name)

    def _op_of_type(self, item: object, depth: int) -> _Op | None:
        if isinstance(item, ClassType):
            return self._module_op(item.name)
        if isinstance(item, FunctionType) and not item.bound and isinstance(item.module, ModuleSymbols):
            return self._function_body_op(item.node, item.module, depth)
        return None

    def _module_op(self, class_name: str) -> _Op | None:
        """A torch.nn module running one op, or a project subclass of one without a forward of its own."""
        short = torch_api.torch_class(class_name)
        if short is None:
            info = self.inference.classes.by_name(class_name)
            if info is None or self.inference.classes.find_method(info, "forward") is not None:
                return None
            bases = [name for name in self.inference.classes.ancestors(info) if isinstance(name, str)]
            short = next((torch_api.torch_class(name) for name in bases if torch_api.torch_class(name)), None)
            if short is None:
                return None
        if short in CHEAP_MODULES:
            return _Op(_CHEAP, f"nn.{short}")
        if short in EMBEDDING_MODULES:
            return _Op(_LOOKUP, f"nn.{short}")
        return None

    def _function_body_op(self, node: ast.AST, module: ModuleSymbols, depth: int) -> _Op | None:
        """A lambda or def whose body is one call of one op on its own parameters: `lambda t: self.norm(t)`."""
        scope = module.scope_of.get(id(node))
        if scope is None:
            return None
        if isinstance(node, ast.Lambda):
            body: ast.expr | None = node.body
            arguments = node.args
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            statements = node.body[1:] if _is_docstring(node.body[0]) else node.body
            only = statements[0] if len(statements) == 1 else None
            body = only.value if isinstance(only, ast.Return) else None
            arguments = node.args
        else:
            return None
        if not isinstance(body, ast.Call) or _calls_in(body.args, body.keywords):
            return None
        func = body.func
        parameters = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in parameters:
            # a tensor method on a parameter: `lambda t: t.relu()`
            return _Op(_CHEAP, f"Tensor.{func.attr}") if func.attr in CHEAP_FUNCTIONS else None
        return self._op(func, module, scope, depth + 1)

    # -- last-block -------------------------------------------------------------------

    def _last_block_container(self, call: CheckpointCall) -> str | None:
        """The container (as written) whose every element, the last included, the call checkpoints in a loop."""
        node, scope = call.node, call.scope
        if not isinstance(node, ast.Call) or scope.kind != FUNCTION or not isinstance(call.region, ast.expr):
            return None
        function = scope.node
        path = _path_to(function, node)
        if path is None:
            return None
        loop_at = next((i for i in range(len(path) - 1, -1, -1) if isinstance(path[i], (ast.For, ast.AsyncFor))), None)
        if loop_at is None:
            return None
        loop = path[loop_at]
        assert isinstance(loop, (ast.For, ast.AsyncFor))
        if not any(statement is path[loop_at + 1] for statement in loop.body):
            return None  # in the loop's target, iterable or `else`
        if not all(self._unconditional(parent, child, call) for parent, child in zip(path[loop_at + 1 :], path[loop_at + 2 :])):
            return None
        if _leaves_early(loop.body):
            return None
        iterated = self._iterated(loop, call.module, scope)
        if iterated is None:
            return None
        container, element = iterated
        if not _denotes(call.region, element):
            return None
        end = loop.end_lineno or loop.lineno
        if any(other.scope is scope and other.line > end for other in self.calls):
            return None  # checkpointed after the loop: the loop's last block is not the last one
        return ast.unparse(container)

    def _unconditional(self, parent: ast.AST, child: ast.AST, call: CheckpointCall) -> bool:
        """Whether `child`, inside `parent` (between the loop and the call), runs whenever `parent` does,
        or is chosen only by checkpointing or training flags."""
        if isinstance(parent, (ast.If, ast.IfExp)):
            return child is not parent.test and self._is_flag(parent.test, call)
        if isinstance(parent, (ast.With, ast.AsyncWith)):
            return any(child is statement for statement in parent.body)
        if isinstance(parent, ast.Try):
            return any(child is statement for statement in (*parent.body, *parent.finalbody))
        return isinstance(parent, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Call, ast.keyword, ast.Subscript,
                                   ast.Attribute, ast.Tuple, ast.List, ast.Starred, ast.BinOp))  # fmt: skip

    def _is_flag(self, test: ast.expr, call: CheckpointCall) -> bool:
        if isinstance(test, ast.BoolOp):
            return all(self._is_flag(value, call) for value in test.values)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self._is_flag(test.operand, call)
        if isinstance(test, ast.Name):
            return FLAG_WORDS.search(test.id) is not None
        if isinstance(test, ast.Attribute):
            return FLAG_WORDS.search(test.attr) is not None
        if isinstance(test, ast.Call) and not test.args and not test.keywords:
            return self.inference.qualified_name(test.func, call.module, call.scope) in GRAD_ENABLED
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)):
            constant = test.comparators[0]
            return isinstance(constant, ast.Constant) and constant.value in (True, False, None) and self._is_flag(test.left, call)
        return False

    def _iterated(self, loop: ast.For | ast.AsyncFor, module: ModuleSymbols, scope: Scope) -> tuple[ast.expr, ast.expr] | None:
        """(the container, the expression naming its element in the body) of a loop over a module container."""
        iterable, target = loop.iter, loop.target
        container: ast.expr | None = None
        element: ast.expr | None = None
        if _is_attribute_chain(iterable) and isinstance(target, ast.Name):
            container, element = iterable, target
        elif isinstance(iterable, ast.Call) and not iterable.keywords and iterable.args:
            name = self.inference.qualified_name(iterable.func, module, scope)
            first = iterable.args[0]
            if name == "builtins.enumerate" and len(iterable.args) <= 2 and _is_attribute_chain(first):
                if isinstance(target, ast.Tuple) and len(target.elts) == 2 and isinstance(target.elts[1], ast.Name):
                    container, element = first, target.elts[1]
            elif name == "builtins.range" and len(iterable.args) == 1 and isinstance(target, ast.Name):
                if isinstance(first, ast.Call) and len(first.args) == 1 and not first.keywords and _is_attribute_chain(first.args[0]):
                    if self.inference.qualified_name(first.func, module, scope) == "builtins.len":
                        container = first.args[0]
                        element = ast.Subscript(value=container, slice=ast.Name(id=target.id, ctx=ast.Load()), ctx=ast.Load())
        if container is None or element is None or not self._is_module_container(container, module, scope):
            return None
        return container, element

    def _is_module_container(self, expr: ast.expr, module: ModuleSymbols, scope: Scope) -> bool:
        types = self.inference.types(expr, module, scope)
        if not types:
            return False
        for item in types:
            if isinstance(item, ContainerType):
                if item.kind not in _SEQUENCES:
                    return False
            elif isinstance(item, ClassType):
                if torch_api.TORCH_CONTAINERS.get(torch_api.torch_class(item.name) or "") not in _SEQUENCES:
                    info = self.inference.classes.by_name(item.name)
                    if info is None or not self.inference.classes.inherits_from(info, _SEQUENCE_BASES):
                        return False
            else:
                return False
        return True


_SEQUENCE_BASES = frozenset(name for name, kind in torch_api.TORCH_CONTAINER_BASES.items() if kind in _SEQUENCES)


def _function_op(name: str | None, expr: ast.expr) -> _Op | None:
    if name is None:
        return None
    written = ast.unparse(expr)
    if name in EMBEDDING_FUNCTIONS:
        return _Op(_LOOKUP, written)
    for prefix in _FUNCTION_MODULES:
        if name.startswith(prefix) and name[len(prefix) :] in CHEAP_FUNCTIONS:
            return _Op(_CHEAP, written)
    return None


def _denotes(region: ast.expr, element: ast.expr) -> bool:
    """Whether the region replays the loop's element: `block`, `block.__call__`, `block.forward`,
    `partial(block, ...)`, or a closure factory's `create_custom_forward(block)`."""
    if isinstance(region, ast.Attribute) and region.attr in _CALLING_ATTRIBUTES:
        region = region.value
    if isinstance(region, ast.Call) and region.args:
        region = region.args[0]
        if isinstance(region, ast.Attribute) and region.attr in _CALLING_ATTRIBUTES:
            region = region.value
    return _same(region, element)


def _same(a: ast.expr, b: ast.expr) -> bool:
    return ast.dump(a, annotate_fields=False, include_attributes=False).replace("Store()", "Load()") == ast.dump(
        b, annotate_fields=False, include_attributes=False
    ).replace("Store()", "Load()")


def _is_attribute_chain(expr: ast.expr) -> bool:
    """`self.layers`, `self.model.blocks`: an attribute of a name, not a slice or a call."""
    if not isinstance(expr, ast.Attribute):
        return False
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return isinstance(expr, ast.Name)


def _path_to(root: ast.AST, target: ast.AST) -> list[ast.AST] | None:
    """The nodes from `root` down to `target`, both included, without entering nested
    functions, lambdas or classes (another scope); only nodes whose lines hold the target's
    are looked into."""
    line = getattr(target, "lineno", 0)
    path: list[ast.AST] = [root]

    def search(node: ast.AST) -> bool:
        for child in ast.iter_child_nodes(node):
            if child is target:
                path.append(child)
                return True
            first, last = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
            if first is not None and last is not None and not first <= line <= last:
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            path.append(child)
            if search(child):
                return True
            path.pop()
        return False

    return path if search(root) else None


def _leaves_early(body: Iterable[ast.stmt]) -> bool:
    """Whether a loop body can end an iteration early or the loop itself: `break`, `continue`,
    `return` (a nested loop's own `break` and `continue` do not count)."""
    body = list(body)
    if any(isinstance(node, ast.Return) for node in _statements(body, into_loops=True)):
        return True
    return any(isinstance(node, (ast.Break, ast.Continue)) for node in _statements(body, into_loops=False))


def _statements(body: Iterable[ast.stmt], into_loops: bool) -> Iterator[ast.stmt]:
    """Statements of `body`, recursively, outside nested functions and classes; without
    `into_loops`, not in the bodies of nested loops either (their `else` is looked into)."""
    stack = list(body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if not into_loops and isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            stack.extend(node.orelse)
            continue
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                stack.append(child)
            elif isinstance(child, (ast.ExceptHandler, ast.match_case)):
                stack.extend(child.body)


def _calls_in(arguments: Iterable[ast.expr], keywords: Iterable[ast.keyword]) -> bool:
    """Whether any argument makes a call of its own (`F.relu(self.fc(x))` runs two ops)."""
    for argument in (*arguments, *(k.value for k in keywords)):
        if any(isinstance(node, ast.Call) for node in ast.walk(argument)):
            return True
    return False


def _is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) and isinstance(statement.value.value, str)
