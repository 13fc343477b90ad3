"""The ops a selective-checkpoint policy saves, read from a checkpoint call's `context_fn`.

`checkpoint(fn, x, use_reentrant=False, context_fn=partial(create_selective_checkpoint_contexts,
[torch.ops._c10d_functional.all_reduce.default]))` keeps the outputs of the listed ops from
the forward, so the replay does not run them again (CKP401/CKP402 read this). Understood
spellings, whatever the import aliases:

- `functools.partial(create_selective_checkpoint_contexts, OPS)`,
- a name bound to that partial, or a def or lambda returning
  `create_selective_checkpoint_contexts(OPS)`,

where OPS is a literal list, set or tuple of `torch.ops.<namespace>.<op>.<overload>`, or a
module-level or function-local name bound to one (concatenations with `+` too). A policy
function (`create_selective_checkpoint_contexts(policy_fn)`) is not read: it saves nothing
here, so nothing is neutralised by it.
"""

from __future__ import annotations

import ast

from ckptlint.symbols import ASSIGN, DEF, ModuleSymbols, Scope
from ckptlint.syntax import own_statements

CREATE_CONTEXTS = "torch.utils.checkpoint.create_selective_checkpoint_contexts"
PARTIAL = "functools.partial"
_OPS_PREFIX = "torch.ops."
_MAX_DEPTH = 4


def saved_ops(context_fn: ast.expr, module: ModuleSymbols) -> frozenset[str]:
    """The ops (`_c10d_functional.all_reduce`, `aten.mm`) whose outputs the policy given as
    `context_fn` saves; empty when the policy is not one of the spellings above."""
    return _PolicyReader(module).context_fn(context_fn, enclosing_scope(module, context_fn), 0)


def enclosing_scope(module: ModuleSymbols, node: ast.AST) -> Scope:
    """The innermost function, lambda or class scope whose source span holds `node`."""
    line = getattr(node, "lineno", 0)
    best = module.scope
    for scope in module.iter_scopes():
        start = getattr(scope.node, "lineno", None)
        end = getattr(scope.node, "end_lineno", None)
        if start is not None and end is not None and start <= line <= end and start >= getattr(best.node, "lineno", 0):
            best = scope
    return best


class _PolicyReader:
    def __init__(self, module: ModuleSymbols):
        self.module = module

    def context_fn(self, expr: ast.expr, scope: Scope, depth: int) -> frozenset[str]:
        if depth > _MAX_DEPTH:
            return frozenset()
        if isinstance(expr, ast.Call) and self._names(expr.func, scope, PARTIAL) and len(expr.args) >= 2:
            if self._names(expr.args[0], scope, CREATE_CONTEXTS):
                return self.ops(expr.args[1], scope, depth)
            return frozenset()
        if isinstance(expr, ast.Lambda):
            return self._created(expr.body, self.module.scope_of.get(id(expr), scope), depth)
        if isinstance(expr, ast.Name):
            binding = self.module.binding(scope, expr.id, expr.lineno)
            if binding is None:
                return frozenset()
            if binding.kind == ASSIGN and binding.value is not None:
                return self.context_fn(binding.value, binding.written_from or binding.scope, depth + 1)
            if binding.kind == DEF and isinstance(binding.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = self.module.scope_of.get(id(binding.node), binding.scope)
                returned = [s.value for s in own_statements(binding.node) if isinstance(s, ast.Return) and s.value is not None]
                found = [self._created(value, inner, depth) for value in returned]
                return frozenset.intersection(*found) if found else frozenset()
        return frozenset()

    def _created(self, expr: ast.expr, scope: Scope, depth: int) -> frozenset[str]:
        """`create_selective_checkpoint_contexts(OPS)` as the value a context function returns."""
        if isinstance(expr, ast.Call) and expr.args and self._names(expr.func, scope, CREATE_CONTEXTS):
            return self.ops(expr.args[0], scope, depth)
        return frozenset()

    def ops(self, expr: ast.expr, scope: Scope, depth: int) -> frozenset[str]:
        if depth > _MAX_DEPTH:
            return frozenset()
        if isinstance(expr, (ast.List, ast.Set, ast.Tuple)):
            return frozenset(op for op in (self._op(element, scope) for element in expr.elts) if op is not None)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.BitOr)):
            return self.ops(expr.left, scope, depth + 1) | self.ops(expr.right, scope, depth + 1)
        if isinstance(expr, ast.Name):
            binding = self.module.binding(scope, expr.id, expr.lineno)
            if binding is not None and binding.kind == ASSIGN and binding.value is not None:
                return self.ops(binding.value, binding.written_from or binding.scope, depth + 1)
        return frozenset()

    def _op(self, expr: ast.expr, scope: Scope) -> str | None:
        """`torch.ops._c10d_functional.all_reduce.default` -> `_c10d_functional.all_reduce`: an
        overload, as SAC requires (an op packet without one is rejected by torch)."""
        if isinstance(expr, ast.Starred):
            return None
        name = self.module.qualified_name(expr, scope)
        if name is None or not name.startswith(_OPS_PREFIX):
            return None
        parts = name[len(_OPS_PREFIX) :].split(".")
        return ".".join(parts[:2]) if len(parts) == 3 else None

    def _names(self, expr: ast.expr, scope: Scope, qualified: str) -> bool:
        return self.module.qualified_name(expr, scope) == qualified

