"""Whether a checkpoint call runs in one instance: its guard (`if self.use_checkpoint:`) read from how that instance was built.

`model = Net(8)` with `Net.__init__(self, dim, use_checkpoint=False)` storing the flag never
reaches `if self.use_checkpoint: return checkpoint(...)`, so differentiating that model by
`torch.autograd.grad` recomputes nothing; `Net(8, use_checkpoint=True)` does. Decided only for
a model built by a call the using code shows (its defaults then hold) and only where the flag
is set in `__init__` alone from what the construction gives; a model handed in from elsewhere,
or a flag a method flips (`set_grad_checkpointing()`), leaves the call counted.
"""

from __future__ import annotations

import ast

from ckptlint.analysis.flow.statements import enclosing_tests, function_scope
from ckptlint.analysis.knowledge import torch_api
from ckptlint.analysis.semantics.evaluator import TypeInference
from ckptlint.analysis.semantics.known_truth import known_truth
from ckptlint.analysis.semantics.values import ClassType, Value
from ckptlint.calls import CheckpointCall
from ckptlint.symbols import ASSIGN, ModuleSymbols, Scope


def construction_call(module: ModuleSymbols, expr: ast.expr, scope: Scope) -> ast.Call | None:
    """The call that built the module a name holds, when its one binding in `scope` is one
    (`model = Net(8).cuda().train()`): None for a parameter, a loop variable or a rebinding."""
    if not isinstance(expr, ast.Name):
        return None
    bindings = scope.bindings.get(expr.id, [])
    if len(bindings) != 1 or bindings[0].kind != ASSIGN or bindings[0].unpack:
        return None
    value = bindings[0].value
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in torch_api.MODULE_RETURNING_METHODS:
        value = value.func.value
    return value if isinstance(value, ast.Call) else None


def runs_in(inference: TypeInference, call: CheckpointCall, item: ClassType) -> bool:
    """Whether the checkpoint call can run in the instance `item`: no `if` on the way to it in
    its function is decided against it by the instance's flags."""
    line = call.line
    scope = function_scope(call.scope)

    def lookup(path: str) -> Value | None:
        receiver, _, attribute = path.partition(".")
        if receiver != scope.first_parameter() or not attribute or "." in attribute:
            return None
        types = inference.flag_types(item, attribute)
        return Value(types=types) if types else None

    for test, taken in enclosing_tests(scope.node, line):
        outcome = known_truth(test, lookup)
        if outcome is not None and outcome != taken:
            return False
    return True
