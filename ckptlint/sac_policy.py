"""The ops a selective-checkpoint policy saves, read from a checkpoint call's `context_fn`.

`checkpoint(fn, x, use_reentrant=False, context_fn=partial(create_selective_checkpoint_contexts,
[torch.ops._c10d_functional.all_reduce.default]))` keeps the outputs of the listed ops from
the forward, so the replay does not run them again (CKP401/CKP402 read this). Understood
spellings, whatever the import aliases:

- `functools.partial(create_selective_checkpoint_contexts, OPS)`,
- a name bound to that partial, or a def or lambda returning
  `create_selective_checkpoint_contexts(OPS)`,

where OPS is a literal list, set or tuple of `torch.ops.<namespace>.<op>.<overload>`, or a
module-level or function-local name bound to one (concatenations with `+` too), or a simple
predicate policy: a def (or a function returning one) whose `func` parameter decides, in
`return CheckpointPolicy.MUST_SAVE if func in OPS else ...`, `if func == OP: return
CheckpointPolicy.PREFER_SAVE`, `to_save = func in OPS` (`or` unites, `and` intersects), or
that returns a saving policy for every op. Ops are counted saved only where the policy surely
saves them: a condition it cannot read saves nothing here, so nothing is neutralised by it.
"""

from __future__ import annotations

import ast

from ckptlint.symbols import ASSIGN, DEF, ModuleSymbols, Scope
from ckptlint.syntax import own_statements

CREATE_CONTEXTS = "torch.utils.checkpoint.create_selective_checkpoint_contexts"
PARTIAL = "functools.partial"
_OPS_PREFIX = "torch.ops."
_MAX_DEPTH = 4


EVERY_OP = "*"  # a policy that saves every op's output (returns a saving policy unconditionally)
SAVING = frozenset({"torch.utils.checkpoint.CheckpointPolicy.MUST_SAVE", "torch.utils.checkpoint.CheckpointPolicy.PREFER_SAVE"})


def saved_ops(context_fn: ast.expr, module: ModuleSymbols) -> frozenset[str]:
    """The ops (`_c10d_functional.all_reduce`, `aten.mm`) whose outputs the policy given as
    `context_fn` saves; empty when the policy is not one of the spellings above."""
    return policy_saved_ops(context_fn, module) or frozenset()


def policy_saved_ops(context_fn: ast.expr, module: ModuleSymbols) -> frozenset[str] | None:
    """As `saved_ops`, but None when `context_fn` is not a selective-checkpoint policy at all
    (`create_selective_checkpoint_contexts` not found): an empty set is SAC that surely saves
    nothing; `EVERY_OP` in it means every op is saved."""
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

    def context_fn(self, expr: ast.expr, scope: Scope, depth: int) -> frozenset[str] | None:
        if depth > _MAX_DEPTH:
            return None
        if isinstance(expr, ast.Call) and self._names(expr.func, scope, PARTIAL) and len(expr.args) >= 2:
            if self._names(expr.args[0], scope, CREATE_CONTEXTS):
                return self.policy(expr.args[1], scope, depth)
            return None
        if isinstance(expr, ast.Lambda):
            return self._created(expr.body, self.module.scope_of.get(id(expr), scope), depth)
        if isinstance(expr, ast.Name):
            binding = self.module.binding(scope, expr.id, expr.lineno)
            if binding is None:
                return None
            if binding.kind == ASSIGN and binding.value is not None:
                return self.context_fn(binding.value, binding.written_from or binding.scope, depth + 1)
            if binding.kind == DEF and isinstance(binding.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = self.module.scope_of.get(id(binding.node), binding.scope)
                returned = [s.value for s in own_statements(binding.node) if isinstance(s, ast.Return) and s.value is not None]
                found = [self._created(value, inner, depth) for value in returned]
                if not found or any(ops is None for ops in found):
                    return None
                return frozenset.intersection(*(ops for ops in found if ops is not None))
        return None

    def _created(self, expr: ast.expr, scope: Scope, depth: int) -> frozenset[str] | None:
        """`create_selective_checkpoint_contexts(OPS)` as the value a context function returns."""
        if isinstance(expr, ast.Call) and expr.args and self._names(expr.func, scope, CREATE_CONTEXTS):
            return self.policy(expr.args[0], scope, depth)
        return None

    def policy(self, expr: ast.expr, scope: Scope, depth: int) -> frozenset[str]:
        """What `create_selective_checkpoint_contexts`' first argument saves: an op list, or a
        policy function read by `_predicate` (a call of a project function returning one too)."""
        if depth > _MAX_DEPTH:
            return frozenset()
        function = self._function(expr, scope, depth)
        if function is not None:
            return self._predicate(*function)
        return self.ops(expr, scope, depth)

    def _function(self, expr: ast.expr, scope: Scope, depth: int) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, Scope] | None:
        """The def a name denotes, or that a call of a def returns (`_get_custom_policy(meta)`)."""
        if depth > _MAX_DEPTH:
            return None
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
            factory = self._function(expr.func, scope, depth + 1)
            if factory is None:
                return None
            inner = self.module.scope_of.get(id(factory[0]), factory[1])
            returned = [s.value for s in own_statements(factory[0]) if isinstance(s, ast.Return) and isinstance(s.value, ast.Name)]
            return self._function(returned[0], inner, depth + 1) if len(returned) == 1 else None
        if not isinstance(expr, ast.Name):
            return None
        binding = self.module.binding(scope, expr.id, getattr(expr, "lineno", None))
        if binding is not None and binding.kind == DEF and isinstance(binding.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return binding.node, self.module.scope_of.get(id(binding.node), binding.scope)
        return None

    def _predicate(self, node: ast.FunctionDef | ast.AsyncFunctionDef, scope: Scope) -> frozenset[str]:
        """The ops a policy `def policy(ctx, func, *args, **kwargs)` surely saves: read in order,
        `if COND: return SAVE` adds what COND surely holds for; any other early return ends the
        reading (what it returns for which ops is not known); `return SAVE if COND else ...`
        adds COND's ops; an unconditional `return SAVE` saves every op not returned before."""
        parameters = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
        if len(parameters) < 2:
            return frozenset()
        func = parameters[1]
        saved: set[str] = set()
        for statement in node.body:
            if isinstance(statement, ast.If) and not statement.orelse and len(statement.body) == 1 and isinstance(statement.body[0], ast.Return):
                if not self._saving(statement.body[0].value, scope):
                    break
                saved |= self._sure(statement.test, func, scope, 0)
                continue
            if isinstance(statement, ast.Return) and statement.value is not None:
                value = statement.value
                if self._saving(value, scope):
                    return frozenset({EVERY_OP}) if not saved else frozenset(saved)
                if isinstance(value, ast.IfExp) and self._saving(value.body, scope) and not self._saving(value.orelse, scope):
                    saved |= self._sure(value.test, func, scope, 0)
                break
            if isinstance(statement, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.Match)):
                break  # a return inside may decide for ops not known here
        return frozenset(saved)

    def _sure(self, test: ast.expr, func: str, scope: Scope, depth: int) -> set[str]:
        """The ops for which `test` is surely true: `func in OPS`, `func == OP`, `or`/`and` of
        them, and a name bound to such a test in the policy."""
        if depth > _MAX_DEPTH:
            return set()
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name):
            left, right, op = test.left, test.comparators[0], test.ops[0]
            if left.id == func and isinstance(op, ast.In):
                return set(self.ops(right, scope, depth))
            if left.id == func and isinstance(op, ast.Eq):
                one = self._op(right, scope)
                return {one} if one is not None else set()
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            right = test.comparators[0]
            if isinstance(right, ast.Name) and right.id == func:
                one = self._op(test.left, scope)
                return {one} if one is not None else set()
        if isinstance(test, ast.BoolOp):
            parts = [self._sure(value, func, scope, depth + 1) for value in test.values]
            return set.union(*parts) if isinstance(test.op, ast.Or) else set.intersection(*parts)
        if isinstance(test, ast.Name):
            binding = self.module.binding(scope, test.id, test.lineno)
            if binding is not None and binding.kind == ASSIGN and binding.scope is scope and binding.value is not None:
                return self._sure(binding.value, func, scope, depth + 1)
        return set()

    def _saving(self, expr: ast.expr | None, scope: Scope) -> bool:
        return expr is not None and self.module.qualified_name(expr, scope) in SAVING

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

