"""What one function's statements say, from its own lines: its `if` branches, the function a
nested scope belongs to, a callee's last word, an expression's root name (CKP305, CKP403-CKP405),
and the statement index: which binding reaches a use, the loops around a line, and which lines
run with grad off (CKP301/302, CKP504)."""

from __future__ import annotations

import ast
from typing import Iterator

from ckptlint.symbols import (
    ANNOTATION,
    ASSIGN,
    FUNCTION,
    LAMBDA,
    LOOP,
    PARAM,
    UNPACK,
    Binding,
    ModuleSymbols,
    Scope,
)
from ckptlint.syntax import own_statements


def if_branches(function: ast.AST) -> Iterator[tuple[ast.expr, bool, int, int]]:
    """Each `if` of a function as (test, True, first line, last line) for its body and
    (test, False, ...) for its `else`, nested functions aside."""
    for statement in own_statements(function):
        if isinstance(statement, ast.If):
            for side, body in ((True, statement.body), (False, statement.orelse)):
                if body:
                    yield statement.test, side, body[0].lineno, body[-1].end_lineno or body[-1].lineno


Branches = list[tuple[ast.expr, bool, int, int]]  # `if_branches` of one function


def exclusive_lines(branches: Branches, first: int, second: int) -> bool:
    """Whether the two lines lie in the two arms of one `if` (an `elif` chain's arms too): no
    run executes both. `branches`: the function's `if_branches`, listed once by the caller."""
    sides = {id(test): side for test, side, start, end in branches if start <= first <= end}
    return any(id(test) in sides and sides[id(test)] != side for test, side, start, end in branches if start <= second <= end)


def function_scope(scope: Scope) -> Scope:
    """The function (or module) a call's statements belong to: lambdas and comprehensions are folded in."""
    current = scope
    while current.parent is not None and isinstance(current.node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        current = current.parent
    return current


def callee_leaf(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def root_name(expr: ast.expr) -> str | None:
    """`model` for `model`, `model.base.layers[0]`, `model.get_input_embeddings()`."""
    while True:
        if isinstance(expr, ast.Name):
            return expr.id
        if isinstance(expr, (ast.Attribute, ast.Subscript)):
            expr = expr.value
        elif isinstance(expr, ast.Call):
            expr = expr.func
        else:
            return None


_GRAD_OFF = frozenset({"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad"})


class StatementIndex:
    """Statements of one function with their enclosing blocks, for reaching definitions."""

    def __init__(self, function: ast.AST):
        self.blocks: dict[int, tuple[tuple[int, str], ...]] = {}  # id(stmt) -> (id(owner), field) chain
        self.grad: dict[int, str | None] = {}  # id(stmt) -> the grad-disabling context around it
        self.loops: dict[int, tuple[ast.stmt, ...]] = {}
        self.statements: list[ast.stmt] = []
        body = getattr(function, "body", None)
        if isinstance(body, list):
            self._visit(body, (), None, ())

    def _visit(self, body: list[ast.stmt], chain: tuple[tuple[int, str], ...], grad: str | None, loops: tuple[ast.stmt, ...]) -> None:
        for statement in body:
            self.blocks[id(statement)] = chain
            self.grad[id(statement)] = grad
            self.loops[id(statement)] = loops
            self.statements.append(statement)
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            inner_grad = grad
            if isinstance(statement, (ast.With, ast.AsyncWith)):
                for item in statement.items:
                    text = grad_context(item.context_expr)
                    if text is not None:
                        inner_grad = text if text != "enable" else None
                self._visit(statement.body, chain, inner_grad, loops)  # a with body always runs
                continue
            inner_loops = (*loops, statement) if isinstance(statement, (ast.For, ast.AsyncFor, ast.While)) else loops
            for field in ("body", "orelse", "finalbody"):
                block = getattr(statement, field, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                    self._visit(block, (*chain, (id(statement), field)), grad, inner_loops)
            for index, handler in enumerate(getattr(statement, "handlers", [])):
                self._visit(handler.body, (*chain, (id(statement), f"handler{index}")), grad, inner_loops)
            for index, case in enumerate(getattr(statement, "cases", [])):
                self._visit(case.body, (*chain, (id(statement), f"case{index}")), grad, inner_loops)

    def statement_of(self, node: ast.AST) -> ast.stmt | None:
        if isinstance(node, ast.stmt) and id(node) in self.blocks:
            return node
        line, column = getattr(node, "lineno", 0), getattr(node, "col_offset", 0)
        best: ast.stmt | None = None
        for statement in self.statements:
            if (statement.lineno, statement.col_offset) <= (line, column) <= (statement.end_lineno or statement.lineno, statement.end_col_offset or 0):
                best = statement  # later statements in the list are nested deeper
        return best

    def grad_off(self, node: ast.AST) -> str | None:
        statement = self.statement_of(node)
        return self.grad.get(id(statement)) if statement is not None else None

    def loops_around(self, line: int) -> tuple[ast.stmt, ...]:
        use = next((s for s in reversed(self.statements) if s.lineno <= line <= (s.end_lineno or s.lineno)), None)
        return self.loops.get(id(use), ()) if use is not None else ()

    def reaching(self, bindings: list[Binding], line: int, first_pass: bool = False) -> list[Binding]:
        """The last binding before `line` that always runs on the way, and the conditional ones
        after it; bindings later in a loop around the use come round again (unless `first_pass`:
        what the use sees on the loop's first pass)."""
        use = next((s for s in reversed(self.statements) if s.lineno <= line <= (s.end_lineno or s.lineno)), None)
        if use is None:
            return bindings
        use_chain = self.blocks.get(id(use), ())
        use_loops = self.loops.get(id(use), ())
        before = sorted((b for b in bindings if b.line < line), key=lambda b: b.line)
        found: list[Binding] = []
        for binding in reversed(before):
            found.append(binding)
            statement = self.statement_of(binding.node)
            chain = self.blocks.get(id(statement), None) if statement is not None else None
            if chain is not None and use_chain[: len(chain)] == chain:
                break  # it always runs before the use: earlier ones are overwritten
        loop_lines = [(loop.lineno, loop.end_lineno or loop.lineno) for loop in use_loops]
        if first_pass:
            return found
        for binding in bindings:
            if binding.line >= line and any(start <= binding.line <= end for start, end in loop_lines):
                found.append(binding)
        return found


def grad_off_at(scope: Scope, node: ast.AST) -> bool:
    """Whether `node` runs inside a `torch.no_grad()` (or `inference_mode`) block of its function."""
    if scope.kind not in (FUNCTION, LAMBDA):
        return False
    return StatementIndex(scope.node).grad_off(node) is not None


def grad_context(expr: ast.expr) -> str | None:
    """`torch.no_grad()` / `torch.inference_mode()` (their text), `torch.enable_grad()` ("enable")."""
    if not isinstance(expr, ast.Call):
        return None
    text = ast.unparse(expr.func)
    leaf = text.rpartition(".")[2]
    if leaf in ("no_grad", "inference_mode") and (text.startswith("torch.") or text == leaf):
        if leaf == "inference_mode" and expr.args and isinstance(expr.args[0], ast.Constant) and expr.args[0].value is False:
            return None
        return f"{text}()"
    if leaf == "set_grad_enabled" and expr.args and isinstance(expr.args[0], ast.Constant) and expr.args[0].value is False:
        return f"{text}(False)"
    if leaf in ("enable_grad", "set_grad_enabled"):
        return "enable"
    return None


def in_loop(function: ast.AST, node: ast.AST) -> bool:
    index = StatementIndex(function)
    statement = index.statement_of(node)
    return statement is not None and bool(index.loops.get(id(statement)))


# -- which binding reaches a use -------------------------------------------------------------
# Three precisions of one question, kept side by side so that a caller picks one knowingly:
# `StatementIndex.reaching` follows branches and loops (every binding that may be the one seen:
# the gradient evaluator); `straight_line_binding` answers only for straight-line code, by
# statement end positions (the type evaluator, which otherwise keeps the union); and
# `last_binding_before` takes the last binding by line, branches ignored (the FSDP and double
# checkpointing checks, which follow one module object through its aliases).


def straight_line_binding(candidates: list[Binding], scope: Scope, use: ast.Name) -> Binding | None:
    """The binding of a name that reaches `use` when every binding is a statement of the
    function's own body (no branch or loop around it) or a parameter; None otherwise (then
    any of them may have run, and the caller keeps their union)."""
    node = scope.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    body = {id(statement) for statement in node.body}
    position = (use.lineno, use.col_offset)
    reaching: Binding | None = None
    reached_at: tuple[int, int] = (0, -1)
    for candidate in candidates:
        if candidate.kind == PARAM:
            at = (0, 0)
        elif id(candidate.node) in body and (candidate.kind in (ASSIGN, UNPACK, LOOP) or isinstance(candidate.node, ast.AugAssign)):
            statement = candidate.node
            if candidate.kind == LOOP:
                at = (statement.lineno, statement.col_offset)  # type: ignore[attr-defined]  # a body statement
                if at >= position:
                    continue
            else:
                end = (getattr(statement, "end_lineno", None) or 0, getattr(statement, "end_col_offset", None) or 0)
                if end > position:
                    continue  # bound after the use (or by the statement the use is part of)
                at = end
        else:
            return None
        if at >= reached_at:
            reaching, reached_at = candidate, at
    return reaching


def last_binding_before(module: ModuleSymbols, scope: Scope, name: str, line: int) -> Binding | None:
    """The binding a use of `name` on `line` sees: in its own scope, the last one before the
    line (a loop's header counts on its own line; an assignment whose statement is still running
    on that line, `model = checkpoint_wrapper(\n    model, ...)`, does not count yet); outside it,
    Python's lookup."""
    own = [
        b
        for b in scope.bindings.get(name, [])
        if b.kind != ANNOTATION and ((b.line < line and not _spans(b, line)) or b.kind == PARAM or (b.kind == LOOP and b.line <= line))
    ]
    if own:
        return max(own, key=lambda b: b.line)
    if name in scope.bindings:
        return None  # bound only later in the function: not yet this object
    return module.binding(scope, name, line)


def _spans(binding: Binding, line: int) -> bool:
    """An assignment statement that runs on into `line`: a use there reads the name's old value."""
    node = binding.node
    return isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and (node.end_lineno or node.lineno) >= line


def enclosing_tests(function: ast.AST, line: int) -> list[tuple[ast.expr, bool]]:
    """The `if` tests a line sits under in a function, each with the arm it is on (True: the body)."""
    found: list[tuple[ast.expr, bool]] = []
    body: list[ast.stmt] = list(getattr(function, "body", []))
    while body:
        inner: list[ast.stmt] = []
        for statement in body:
            if not statement.lineno <= line <= (statement.end_lineno or statement.lineno):
                continue
            if isinstance(statement, ast.If):
                on_body = bool(statement.body) and statement.body[0].lineno <= line <= (statement.body[-1].end_lineno or line)
                found.append((statement.test, on_body))
                inner = statement.body if on_body else statement.orelse
            elif isinstance(statement, (ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While, ast.Try)):
                inner = [s for part in ("body", "orelse", "finalbody") for s in getattr(statement, part, [])]
            break
        body = inner
    return found
