"""Which op's output a tensor changed in place holds (CKP501).

`y = torch.mm(x, w); y.relu_()`: under a selective-checkpoint policy that saves `aten.mm`,
the forward keeps `y`'s storage for the backward and the in-place op changes it. Read from
the function's own lines: the latest plain assignment of the name before the in-place op (or
the producer itself as the receiver, `torch.mm(x, w).relu_()`), whose value is a call that
reaches a saved-able op (aten_ops.PRODUCERS). A name rebound through branches or loops is
taken at its latest binding above the line; a tensor that reaches the function as an argument
is not followed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ckptlint.analysis.knowledge import aten_ops
from ckptlint.symbols import ModuleSymbols, Scope
from ckptlint.syntax import own_statements


@dataclass(frozen=True)
class Producer:
    op: str  # "aten.mm"
    text: str  # how the code calls it: "torch.mm(x, w)", "x @ self.w"
    reshaped: bool  # an N-D input makes it an `_unsafe_view` of the op's output (aten_ops.RESHAPED_WHEN_BATCHED)


def producer_of(module: ModuleSymbols, scope: Scope, tensor: ast.expr, before: ast.AST) -> Producer | None:
    """The producer of the tensor an in-place op at `before` changes, or None."""
    if isinstance(tensor, ast.Name):
        value = _latest_assignment(scope.node, tensor.id, getattr(before, "lineno", 0))
        return None if value is None else _producer(module, scope, value)
    return _producer(module, scope, tensor)


def _latest_assignment(function: ast.AST, name: str, line: int) -> ast.expr | None:
    """The value of the latest binding of `name` above `line`; None when that binding is not
    a plain assignment (tuple targets, loops, `with ... as`) or there is none."""
    latest: tuple[int, ast.expr | None] | None = None
    for statement in own_statements(function):
        if statement.lineno >= line or (latest is not None and statement.lineno <= latest[0]):
            continue
        if isinstance(statement, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in statement.targets):
            latest = (statement.lineno, statement.value)
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.target.id == name:
            latest = (statement.lineno, statement.value)
        elif _binds_otherwise(statement, name):
            latest = (statement.lineno, None)
    return None if latest is None else latest[1]


def _binds_otherwise(statement: ast.stmt, name: str) -> bool:
    """Binds `name` in a way that hides what it holds (tuple targets, loops, `with ... as`)."""
    targets: list[ast.expr] = []
    if isinstance(statement, ast.Assign):
        targets = [t for t in statement.targets if not isinstance(t, ast.Name)]
    elif isinstance(statement, ast.For):
        targets = [statement.target]
    elif isinstance(statement, ast.With):
        targets = [item.optional_vars for item in statement.items if item.optional_vars is not None]
    return any(isinstance(node, ast.Name) and node.id == name for target in targets for node in ast.walk(target))


def _producer(module: ModuleSymbols, scope: Scope, value: ast.expr) -> Producer | None:
    text = ast.unparse(value)
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.MatMult):
        return Producer(aten_ops.MATMUL_OPERATOR, text, True)
    if not isinstance(value, ast.Call):
        return None
    name = module.qualified_name(value.func, scope)
    if name in aten_ops.PRODUCERS:
        op = aten_ops.PRODUCERS[name]
        if name == aten_ops.LINEAR and len(value.args) < 3 and not any(k.arg == "bias" for k in value.keywords):
            op = aten_ops.LINEAR_WITHOUT_BIAS
        # `F.linear` with a bias reaches `aten.addmm` and a view sharing its version counter: that raises
        return Producer(op, text, name in aten_ops.RESHAPED_WHEN_BATCHED and op != aten_ops.PRODUCERS[aten_ops.LINEAR])
    if name is None and isinstance(value.func, ast.Attribute) and value.func.attr in aten_ops.METHOD_PRODUCERS:
        return Producer(aten_ops.METHOD_PRODUCERS[value.func.attr], text, value.func.attr in aten_ops.RESHAPED_WHEN_BATCHED)
    return None
