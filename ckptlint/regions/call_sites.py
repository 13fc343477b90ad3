"""What a function's parameter holds, from the calls of the function in its own module.

`def apply_module(m, x): return checkpoint(m, x)` replays whatever is passed as `m`:
`apply_module(self.mlp, x)`, `ckpt_helper(blk, x)` for every block of a loop. The region
is the union of the arguments at those calls. Only the defining module is searched, so
the answer depends on that file alone (a wrapper called only from other files resolves
to nothing, as before).
"""

from __future__ import annotations

import ast

from ckptlint.regions.inference import TypeInference
from ckptlint.regions.values import Type, Types
from ckptlint.symbols import CLASS, DEF, ModuleSymbols, Scope, positional_parameters


class ParameterArguments:
    def __init__(self, inference: TypeInference):
        self.inference = inference
        self._memo: dict[tuple[int, str], Types] = {}

    def types(self, module: ModuleSymbols, scope: Scope, name: str) -> Types:
        """The types passed to parameter `name` of the function `scope` by its module's calls."""
        key = (id(scope), name)
        cached = self._memo.get(key)
        if cached is not None:
            return cached
        self._memo[key] = frozenset()  # a wrapper that passes its parameter to itself
        result = self._passed(module, scope, name)
        self._memo[key] = result
        return result

    def _passed(self, module: ModuleSymbols, scope: Scope, name: str) -> Types:
        node = scope.node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return frozenset()
        params = [a.arg for a in positional_parameters(node.args)]
        method = scope.parent is not None and scope.parent.kind == CLASS and not _is_static(node)
        if method:
            params = params[1:]
        position = params.index(name) if name in params else None
        found: set[Type] = set()
        for call, call_scope in module.calls:
            if not self._calls(call, call_scope, module, node, method):
                continue
            argument = next((k.value for k in call.keywords if k.arg == name), None)
            if argument is None and position is not None and position < len(call.args):
                if any(isinstance(a, ast.Starred) for a in call.args[: position + 1]):
                    continue
                argument = call.args[position]
            if argument is not None:
                found.update(self.inference.types(argument, module, call_scope))
        return frozenset(found)

    @staticmethod
    def _calls(call: ast.Call, scope: Scope, module: ModuleSymbols, function: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> bool:
        """Whether `call` calls `function`: by its name, or `self.<name>(...)` for a method."""
        func = call.func
        if method:
            return isinstance(func, ast.Attribute) and func.attr == function.name
        if not isinstance(func, ast.Name) or func.id != function.name:
            return False
        binding = module.binding(scope, func.id, func.lineno)
        return binding is not None and binding.kind == DEF and binding.node is function


def _is_static(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
