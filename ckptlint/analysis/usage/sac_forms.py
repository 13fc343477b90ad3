"""How a module writes its selective-checkpoint policies and context functions (CKP502, CKP503).

- **Op packets** (CKP502): `torch.ops.aten.mm` (an `OpOverloadPacket`) where an overload
  (`torch.ops.aten.mm.default`) belongs. In a list given to
  `create_selective_checkpoint_contexts` (directly, through `functools.partial`, through a
  name bound to the list in the module or the function) torch 2.13 raises `ValueError:
  Expected op in `op_list` to be an OpOverload` when the checkpointed forward enters the
  policy; in a collection a policy function tests `func in OPS` (or `func == OP`) against,
  the test is never true (the dispatcher passes overloads) and the op is silently not saved.
- **Context functions compile rejects** (CKP503): a lambda or def made inside a function, or a
  bound method (`self.context_fn`), passed as `context_fn`: Dynamo cannot trace it
  (`NotImplementedError: checkpoint not implemented for NestedUserFunctionVariable
  context_fn`, or a backend failure for a bound method) with either `fullgraph`. The rule
  asks analysis/contexts/execution.py whether the call runs under `torch.compile`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable, Iterator

from ckptlint.calls import CheckpointCall
from ckptlint.analysis.contexts.execution import COMPILED, ExecutionContext
from ckptlint.sac_policy import CREATE_CONTEXTS, PARTIAL, enclosing_scope, policy_saved_ops
from ckptlint.symbols import ASSIGN, DEF, ModuleSymbols, Scope

_OPS_PREFIX = "torch.ops."
_CREATE_CONTEXTS_WORD = CREATE_CONTEXTS.rpartition(".")[2]
_MAX_DEPTH = 4

IN_LIST = "list"  # the op list itself: torch raises
IN_PREDICATE = "predicate"  # a collection a policy function tests against: never matches

NESTED_LAMBDA = "nested-lambda"
NESTED_DEF = "nested-def"
BOUND_METHOD = "bound-method"


@dataclass(frozen=True)
class PacketEntry:
    node: ast.expr  # the element
    packet: str  # "aten.mm"
    variant: str  # IN_LIST or IN_PREDICATE


def op_packets(module: ModuleSymbols) -> Iterator[PacketEntry]:
    """Every op packet in a policy list or a policy function's collection of the module."""
    if _CREATE_CONTEXTS_WORD not in module.source.code:
        return  # any spelling of the policy constructor names it, at least in an import
    seen: set[int] = set()
    for node, scope in module.calls:
        policy: ast.expr | None = None
        if node.args and module.qualified_name(node.func, scope) == CREATE_CONTEXTS:
            policy = node.args[0]
        elif len(node.args) >= 2 and module.qualified_name(node.func, scope) == PARTIAL and module.qualified_name(node.args[0], scope) == CREATE_CONTEXTS:
            policy = node.args[1]
        if policy is None:
            continue
        for entry in _Reader(module).policy(policy, scope, 0):
            if id(entry.node) not in seen:
                seen.add(id(entry.node))
                yield entry


class _Reader:
    def __init__(self, module: ModuleSymbols):
        self.module = module

    def policy(self, expr: ast.expr, scope: Scope, depth: int) -> Iterator[PacketEntry]:
        if depth > _MAX_DEPTH:
            return
        if isinstance(expr, ast.Name):
            binding = self.module.binding(scope, expr.id, expr.lineno)
            if binding is None:
                return
            if binding.kind == ASSIGN and binding.value is not None:
                yield from self.policy(binding.value, binding.written_from or binding.scope, depth + 1)
            elif binding.kind == DEF and isinstance(binding.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield from self._predicate(binding.node, self.module.scope_of.get(id(binding.node), binding.scope), depth)
            return
        yield from self.collection(expr, scope, depth, IN_LIST)

    def collection(self, expr: ast.expr, scope: Scope, depth: int, variant: str) -> Iterator[PacketEntry]:
        if depth > _MAX_DEPTH:
            return
        if isinstance(expr, (ast.List, ast.Set, ast.Tuple)):
            for element in expr.elts:
                yield from self.collection(element, scope, depth + 1, variant) if isinstance(element, ast.Name) else self._element(element, scope, variant)
        elif isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.BitOr)):
            yield from self.collection(expr.left, scope, depth + 1, variant)
            yield from self.collection(expr.right, scope, depth + 1, variant)
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("set", "list", "tuple", "frozenset") and expr.args:
            yield from self.collection(expr.args[0], scope, depth + 1, variant)
        elif isinstance(expr, ast.Name):
            binding = self.module.binding(scope, expr.id, expr.lineno)
            if binding is not None and binding.kind == ASSIGN and binding.value is not None:
                yield from self.collection(binding.value, binding.written_from or binding.scope, depth + 1, variant)
        else:
            yield from self._element(expr, scope, variant)

    def _element(self, expr: ast.expr, scope: Scope, variant: str) -> Iterator[PacketEntry]:
        name = self.module.qualified_name(expr, scope)
        if name is not None and name.startswith(_OPS_PREFIX):
            parts = name[len(_OPS_PREFIX) :].split(".")
            if len(parts) == 2:
                yield PacketEntry(expr, ".".join(parts), variant)

    def _predicate(self, function: ast.FunctionDef | ast.AsyncFunctionDef, scope: Scope, depth: int) -> Iterator[PacketEntry]:
        """`func in OPS` / `func == OP` tests in a policy function (its op parameter, the second)."""
        parameters = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
        if len(parameters) < 2:
            return
        op = parameters[1]
        for node in ast.walk(function):
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == op:
                for comparison, right in zip(node.ops, node.comparators):
                    if isinstance(comparison, (ast.In, ast.NotIn)):
                        yield from self.collection(right, scope, depth + 1, IN_PREDICATE)
                    elif isinstance(comparison, (ast.Eq, ast.NotEq, ast.Is)):
                        yield from self._element(right, scope, IN_PREDICATE)


def rejected_context_fn(module: ModuleSymbols, scope: Scope, context_fn: ast.expr) -> str | None:
    """Which form of `context_fn` Dynamo cannot trace (NESTED_LAMBDA, NESTED_DEF,
    BOUND_METHOD), or None: a module-level function or lambda, or a `functools.partial`."""
    if isinstance(context_fn, ast.Lambda):
        return NESTED_LAMBDA if scope.is_function() else None
    if isinstance(context_fn, ast.Name):
        binding = module.binding(scope, context_fn.id, context_fn.lineno)
        if binding is None or not binding.scope.is_function():
            return None
        if binding.kind == DEF:
            return NESTED_DEF
        if binding.kind == ASSIGN and isinstance(binding.value, ast.Lambda):
            return NESTED_LAMBDA
        return None
    if isinstance(context_fn, ast.Attribute) and isinstance(context_fn.value, ast.Name) and scope.kind != "module":
        receiver = context_fn.value.id
        function = scope
        while function.parent is not None and function.kind not in ("function",):
            function = function.parent
        first = function.first_parameter() if function.kind == "function" else None
        if first is not None and receiver == first and function.parent is not None and function.parent.kind == "class":
            return BOUND_METHOD if _is_method(module, function.parent, context_fn.attr) else None
    return None


def _is_method(module: ModuleSymbols, class_scope: Scope, name: str) -> bool:
    """The class defines `name` as a def (not a staticmethod)."""
    for binding in class_scope.bindings.get(name, []):
        node = binding.node
        if binding.kind == DEF and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list):
                return True
    return False


def is_selective(context_fn: ast.expr, module: ModuleSymbols) -> bool:
    """The `context_fn` is a selective-checkpoint policy (sac_policy.py reads it)."""
    return policy_saved_ops(context_fn, module) is not None


@dataclass(frozen=True)
class RejectedContextFn:
    call: CheckpointCall
    node: ast.expr  # the `context_fn` value
    variant: str  # NESTED_LAMBDA, NESTED_DEF, BOUND_METHOD
    compiled_by: str  # what puts the call under torch.compile, for the message


@dataclass(frozen=True)
class HookedSelectiveCall:
    call: CheckpointCall
    hook: str  # "save_on_cpu", "saved_tensors_hooks"
    respects: str | None  # how `respect_saved_tensors_hooks` is given (source text), None: not given


ContextOf = Callable[[CheckpointCall], "ExecutionContext | None"]


def rejected_context_fns(calls: list[CheckpointCall], context_of: ContextOf) -> Iterator[RejectedContextFn]:
    """Calls under torch.compile whose `context_fn` is a form Dynamo cannot trace (CKP503)."""
    for call in calls:
        keyword = call.keyword("context_fn")
        if keyword is None:
            continue
        scope = enclosing_scope(keyword.module, keyword.value)
        variant = rejected_context_fn(keyword.module, scope, keyword.value)
        if variant is None:
            continue
        compiled_by = _compiled_by(context_of(call))
        if compiled_by is not None:
            yield RejectedContextFn(call, keyword.value, variant, compiled_by)


def _compiled_by(context: ExecutionContext | None) -> str | None:
    """The compile that covers the call (analysis/contexts/execution.py), None when it runs eagerly."""
    if context is None or not context.compiled:
        return None
    seen = [e.describe() for e in context.evidence if e.fact == COMPILED]
    return seen[0] if seen else "torch.compile"


def hooked_selective_calls(calls: list[CheckpointCall], context_of: ContextOf) -> Iterator[HookedSelectiveCall]:
    """Selective-checkpoint calls under an outer saved-tensors hook (CKP505)."""
    for call in calls:
        keyword = call.keyword("context_fn")
        if keyword is None or not is_selective(keyword.value, keyword.module):
            continue
        context = context_of(call)
        hook = context.offload if context is not None else None
        if hook is None:
            continue
        respects = call.keyword("respect_saved_tensors_hooks")
        yield HookedSelectiveCall(call, hook, ast.unparse(respects.value) if respects is not None else None)
