"""What a function's parameter holds, from the calls of the function in its own module.

`def apply_module(m, x): return checkpoint(m, x)` replays whatever is passed as `m`:
`apply_module(self.mlp, x)`, `ckpt_helper(blk, x)` for every block of a loop. The region
is the union of the arguments at those calls. Only the defining module is searched, so
the answer depends on that file alone (a wrapper called only from other files resolves
to nothing, as before).
"""

from __future__ import annotations

from ckptlint.analysis.semantics.evaluator import TypeInference
from ckptlint.analysis.semantics.values import Type, Types
from ckptlint.passed_arguments import passed_arguments
from ckptlint.symbols import ModuleSymbols, Scope


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
        found: set[Type] = set()
        for argument, call_scope in passed_arguments(module, scope, name):
            found.update(self.inference.types(argument, module, call_scope))
        result = frozenset(found)
        self._memo[key] = result
        return result
