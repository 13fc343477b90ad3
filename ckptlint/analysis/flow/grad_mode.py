"""Lines of a function whose results no backward differentiates: eval-mode branches, and
grad-off code whose results stay inside it (CKP504).

A checkpointed region's backward recomputes it to differentiate it (in training). Two kinds
of code give it nothing to differentiate:

- **eval-mode branches**: `if not self.training:`, the `else` of `if self.training:`, the
  lines after an `if self.training:` block that always returns. `eval_only(scope, node)`;
  the caller asks the same of the line that calls a function (interpreter.py), so what a
  callee reached only that way does is not reported either.
- **grad-off code** (`with torch.no_grad():` or `torch.inference_mode()`, the reading CKP301
  and CKP302 make of a function's blocks, grad_flow.py; a function decorated
  `@torch.no_grad()`, like the `moe_infer` of DeepSeek-style MoE layers) computes tensors
  autograd holds as constants. A selection there that picks other indices at recompute
  still changes the backward when its indices leave the grad-off code and route computation
  that is differentiated (the `@torch.no_grad()` indexer of sparse-attention layers returns
  the top-k key positions the attention then reads). `grad_off_only(scope, node, names)`:
  whether `node` is in grad-off code and neither it nor the names computed from it
  (`names()`) leave it: returned, stored in a parameter or an attribute, or read after the
  `with` block. A function called from a `with torch.no_grad():` block is not judged so
  (what it returns is not followed back into its caller's names).
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from ckptlint.analysis.flow.statements import grad_context, grad_off_at
from ckptlint.symbols import FUNCTION, Scope
from ckptlint.syntax import own_statements

_TRAINING = "training"  # `self.training`, set by `Module.train()` / `.eval()`


def eval_only(scope: Scope, node: ast.AST) -> bool:
    """Whether `node` runs only when `self.training` is false, read from its function."""
    body = getattr(scope.node, "body", None)
    return isinstance(body, list) and _eval_only(body, node)


def grad_off_only(scope: Scope, node: ast.AST, names: Callable[[], set[str]]) -> bool:
    """Whether `node` runs with grad off and its result stays in the grad-off code: neither
    it nor `names()` (the names computed from it) leave it."""
    function = scope.node
    if scope.kind == FUNCTION and any(_grad_off_decorator(d) for d in getattr(function, "decorator_list", ())):
        code: ast.AST = function
    elif grad_off_at(scope, node):
        block = _grad_off_block(function, node)
        if block is None:
            return False
        code = block
    else:
        return False
    return not _leaves(function, code, node, names())


def _grad_off_decorator(decorator: ast.expr) -> bool:
    """`@torch.no_grad()`, `@torch.no_grad`, `@torch.inference_mode()` (grad_flow's reading of
    the same context managers)."""
    call = decorator if isinstance(decorator, ast.Call) else ast.Call(func=decorator, args=[], keywords=[])
    return grad_context(call) not in (None, "enable")


def _grad_off_block(function: ast.AST, node: ast.AST) -> ast.With | ast.AsyncWith | None:
    """The innermost `with` statement around `node` that turns grad off."""
    found: ast.With | ast.AsyncWith | None = None
    for statement in own_statements(function):
        if isinstance(statement, (ast.With, ast.AsyncWith)) and _contains(statement, node):
            if any(grad_context(item.context_expr) not in (None, "enable") for item in statement.items):
                if found is None or _contains(found, statement):
                    found = statement
    return found


def _leaves(function: ast.AST, code: ast.AST, node: ast.AST, names: set[str]) -> bool:
    """Whether the value of `node`, or a name in `names`, leaves `code` (the function or a
    `with` block of it): returned or yielded, stored in a parameter or an attribute, or (a
    block) read after it."""
    arguments = getattr(function, "args", None)
    parameters = {a.arg for a in ast.walk(arguments) if isinstance(a, ast.arg)} if isinstance(arguments, ast.arguments) else set()
    if names & parameters:
        return True  # `out[idx] = ...` on an input, `self.cache = idx`: outlives the call
    for statement in own_statements(function):
        if code is not function and not _contains(code, statement):
            continue
        if isinstance(statement, ast.Return) and statement.value is not None:
            if _contains(statement, node) or _mentions(statement.value, names):
                return True
        if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and _contains(statement, node):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            if any(not isinstance(t, (ast.Name, ast.Tuple, ast.List)) for t in targets):
                return True  # stored into an attribute or an item
    for child in ast.walk(function):
        if isinstance(child, (ast.Yield, ast.YieldFrom)) and child.value is not None and (_mentions(child.value, names) or _contains_node(child, node)):
            return True
    if code is not function:
        end = (getattr(code, "end_lineno", 0) or 0, getattr(code, "end_col_offset", 0) or 0)
        return any(
            isinstance(child, ast.Name) and child.id in names and isinstance(child.ctx, ast.Load) and (child.lineno, child.col_offset) > end
            for child in ast.walk(function)
        )
    return False


def _eval_only(body: list[ast.stmt], node: ast.AST) -> bool:
    """Whether `node`, somewhere in `body`, runs only when `self.training` is false."""
    for index, statement in enumerate(body):
        if _contains(statement, node):
            if isinstance(statement, ast.If):
                if _in(statement.body, node):
                    return False in _training_when(statement.test, True) or _eval_only(statement.body, node)
                if _in(statement.orelse, node):
                    return False in _training_when(statement.test, False) or _eval_only(statement.orelse, node)
                return False
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                return False
            blocks = [getattr(statement, field, []) for field in ("body", "orelse", "finalbody")]
            blocks += [handler.body for handler in getattr(statement, "handlers", [])]
            blocks += [case.body for case in getattr(statement, "cases", [])]
            inner = [block for block in blocks if isinstance(block, list) and _in(block, node)]
            if inner:
                return any(_eval_only(block, node) for block in inner)
            return any(_eval_only_branch(choice, node) for choice in ast.walk(statement) if isinstance(choice, ast.IfExp))
        if isinstance(statement, ast.If) and not statement.orelse and _always_exits(statement.body) and False in _training_when(statement.test, False):
            return _in(body[index + 1 :], node)  # `if self.training: ... return`: the rest runs in eval mode
    return False


def _eval_only_branch(choice: ast.IfExp, node: ast.AST) -> bool:
    """`x if self.training else self.infer(x)`: `node` in the branch taken in eval mode only."""
    if _contains_node(choice.body, node):
        return False in _training_when(choice.test, True)
    return _contains_node(choice.orelse, node) and False in _training_when(choice.test, False)


def _training_when(test: ast.expr, outcome: bool) -> set[bool]:
    """The values `self.training` must have when `test` is `outcome` (empty: not known)."""
    if _is_training(test):
        return {outcome}
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _training_when(test.operand, not outcome)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And if outcome else ast.Or):
        return set().union(*(_training_when(v, outcome) for v in test.values))  # every operand has that outcome
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and _is_training(test.left):
        right, op = test.comparators[0], test.ops[0]
        if isinstance(right, ast.Constant) and isinstance(right.value, bool) and isinstance(op, (ast.Is, ast.Eq, ast.IsNot, ast.NotEq)):
            return {right.value == (isinstance(op, (ast.Is, ast.Eq)) == outcome)}
    return set()


def _is_training(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Attribute) and expr.attr == _TRAINING and isinstance(expr.value, ast.Name)


def _always_exits(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise))


def _mentions(expression: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(expression))


def _in(block: list[ast.stmt], node: ast.AST) -> bool:
    return any(_contains(statement, node) for statement in block)


def _contains_node(outer: ast.AST, node: ast.AST) -> bool:
    return any(n is node for n in ast.walk(outer))


def _contains(statement: ast.AST, node: ast.AST) -> bool:
    """Whether `node` lies within `statement`'s span."""
    line, column = getattr(node, "lineno", 0), getattr(node, "col_offset", 0)
    start = (getattr(statement, "lineno", 0), getattr(statement, "col_offset", 0))
    end = (getattr(statement, "end_lineno", None) or start[0], getattr(statement, "end_col_offset", None) or 0)
    return start <= (line, column) <= end
