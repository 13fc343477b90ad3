"""Which bindings and returns a use can see: through branches and loops, and under the
arguments a function is being evaluated with (a mixin of `evaluator.TypeInference`).

`expert = Linear(); if ckpt: expert = checkpoint_wrapper(expert); if shard: expert = FSDP(expert)`:
the wrapper wraps the Linear (`StatementIndex.reaching`). `get_norm_layer(None)` stops at
`if norm_layer is None: return None`, and `get_attn(SqueezeExcite)` skips its
`isinstance(attn_type, str)` table: arms a decided test does not take hold no binding and no
return the call can see (`known_truth.dead_lines`). A loop target binds an element of what
it iterates: `for i, (block_fn, width) in enumerate(zip(block_fns, widths))` gives `block_fn`
an element of `block_fns`.
"""

from __future__ import annotations

import ast

from ckptlint.analysis.flow.statements import StatementIndex, straight_line_binding
from ckptlint.analysis.semantics.known_truth import dead_lines, known_truth
from ckptlint.analysis.semantics.protocol import EMPTY, TypeEvaluator
from ckptlint.analysis.semantics.values import (
    Type,
    Types,
    Value,
    element_types,
    unpacked_types,
)
from ckptlint.symbols import PARAM, Binding, ModuleSymbols, Scope


class ReachingBindings(TypeEvaluator):
    _env: dict[int, dict[str, Types]]
    _statement_indexes: dict[int, StatementIndex]
    _dead: dict[int, tuple[dict[str, Types], list[tuple[int, int]]]]

    def reaching_bindings(self, module: ModuleSymbols, scope: Scope, candidates: list[Binding], use: ast.Name) -> list[Binding]:
        """Of a function's bindings of a name, those that may reach `use`: not on an arm the
        arguments being evaluated with leave unrun (`module_cls = SEModule` under
        `isinstance(attn_type, str)` with a class passed); the one straight-line code gives; else
        those that reach through branches and loops (`expert = Linear()` before `if ...: expert =
        checkpoint_wrapper(expert)`, not the `expert = FSDP(expert)` after it)."""
        if self._env:
            dead = self._dead_lines(module, scope)
            candidates = [c for c in candidates if c.kind == PARAM or not within(c.line, dead)] or candidates
        if len(candidates) < 2:
            return candidates
        reaching = straight_line_binding(candidates, scope, use)
        if reaching is not None:
            return [reaching]
        index = self._statement_indexes.get(id(scope))
        if index is None:
            index = self._statement_indexes[id(scope)] = StatementIndex(scope.node)
        return index.reaching(candidates, use.lineno) or candidates

    def _reachable_returns(self, module: ModuleSymbols, scope: Scope, env: dict[int, dict[str, Types]]) -> list[ast.expr]:
        """The returns a call with the arguments `env` passes can reach: a test on a passed
        argument whose value decides it (`if norm_layer is None: return None`) prunes the other arm."""
        returns = self.return_expressions(scope)
        dead = self._dead_lines(module, scope)
        return [r for r in returns if not within(r.lineno, dead)] if dead else returns

    def _dead_lines(self, module: ModuleSymbols, scope: Scope) -> list[tuple[int, int]]:
        """The lines of the function that the arguments being evaluated with it leave unrun
        (known_truth.dead_lines); none when it is not being evaluated with arguments."""
        passed = self._env.get(id(scope)) if self._env else None
        node = scope.node
        if not passed or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return []
        cached = self._dead.get(id(scope))
        if cached is not None and cached[0] is passed:  # the entry holds `passed`, so its id is not reused
            return cached[1]
        self._dead[id(scope)] = (passed, [])  # a test that reads a binding of the same function
        found = dead_lines(node.body, lambda test: self._decided(module, scope, test))
        self._dead[id(scope)] = (passed, found)
        return found

    def decided_test(self, module: ModuleSymbols, scope: Scope, test: ast.expr) -> bool | None:
        """The outcome of a test (`norm == "bn"` in `BatchNorm1d(dim) if norm == "bn" else
        LayerNorm(dim)`) under the arguments the function is being evaluated with; None when it is
        not being evaluated with arguments or they do not decide it."""
        if not self._env or not self._env.get(id(scope)):
            return None
        return self._decided(module, scope, test)

    def _decided(self, module: ModuleSymbols, scope: Scope, test: ast.expr) -> bool | None:
        def lookup(path: str) -> Value | None:
            return None if "." in path else Value(frozenset(), self._types_before(module, scope, path, test))

        def evaluate(expr: ast.expr) -> Value:
            return Value(frozenset(), self.types(expr, module, scope))

        return known_truth(test, lookup, values=True, evaluate=evaluate)

    def _types_before(self, module: ModuleSymbols, scope: Scope, name: str, test: ast.expr) -> Types:
        """What `name` holds at `test`, a test outside any loop: the union of its bindings that
        end before it (a later one cannot reach it); nothing when one of them is not known."""
        position = (test.lineno, test.col_offset)
        found: set[Type] = set()
        for binding in scope.bindings.get(name, ()):
            end = (getattr(binding.node, "end_lineno", None) or 0, getattr(binding.node, "end_col_offset", None) or 0)
            if binding.kind == PARAM and name not in self._env.get(id(scope), {}):
                return frozenset()  # not passed: its default is not what every call holds
            if binding.kind == PARAM or end <= position:
                types = self.binding_types(module, binding)
                if not types:
                    return frozenset()  # `norm = resolve(norm)` with `resolve` unknown: the test is not decided
                found.update(types)
        return frozenset(found)


    def _loop_types(self, binding: Binding, module: ModuleSymbols, scope: Scope, depth: int) -> Types:
        iterable = binding.value
        if iterable is None:
            return EMPTY
        return self._iterated(iterable, tuple(binding.unpack or ()), module, scope, depth)

    def _iterated(self, iterable: ast.expr, unpack: tuple[int, ...], module: ModuleSymbols, scope: Scope, depth: int) -> Types:
        """What a loop target unpacked at `unpack` gets from `iterable`: `for i, (block_fn, planes)
        in enumerate(zip(block_fns, channels))` gives `block_fn` the elements of `block_fns`."""
        if isinstance(iterable, ast.Call) and unpack:
            name = module.qualified_name(iterable.func, scope)
            if name == "builtins.enumerate" and unpack[0] == 0:
                return EMPTY  # the count: an int no literal gives
            if name == "builtins.enumerate" and unpack[0] == 1 and iterable.args:
                return self._iterated(iterable.args[0], unpack[1:], module, scope, depth + 1)
            if name == "builtins.zip" and unpack[0] < len(iterable.args) and not any(isinstance(a, ast.Starred) for a in iterable.args):
                return self._iterated(iterable.args[unpack[0]], unpack[1:], module, scope, depth + 1)
            if isinstance(iterable.func, ast.Attribute) and iterable.func.attr == "items" and unpack[0] == 1 and len(unpack) == 1:
                return element_types(self.types(iterable.func.value, module, scope, depth + 1))
        types = element_types(self.types(iterable, module, scope, depth + 1))  # `named_children()`: (name, module) pairs
        for index in unpack:
            types = unpacked_types(types, index)
        return types


def within(line: int, ranges: list[tuple[int, int]]) -> bool:
    return any(start <= line <= end for start, end in ranges)
