"""Arguments a checkpoint call passes that are false whenever it runs in a training step.

Generation caches are switched off under checkpointing: transformers' models run `if
self.gradient_checkpointing and self.training: use_cache = False` before the layers, and
layers are called with `use_cache=False`. A region parameter given such a value is false
in the replayed step, so a cache write under `if use_cache:` is never reached. This reads
the checkpoint call's own arguments: literal `False`/`None`, and names whose last binding
before the call is a false constant, unconditionally or under a test of
`gradient_checkpointing` (never negated).
"""

from __future__ import annotations

import ast
from typing import Iterator

from ckptlint.calls import CheckpointCall
from ckptlint.syntax import child_nodes

# the keywords torch's checkpoint takes for itself; everything else goes to the region
CHECKPOINT_KEYWORDS = frozenset(
    {"use_reentrant", "context_fn", "determinism_check", "debug", "early_stop", "preserve_rng_state", "function"}
)


def false_arguments(call: CheckpointCall) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """(positions among the region's arguments, keywords) whose value is false in a checkpointed step."""
    start = call.api.arguments_from
    arguments = call.arguments
    if start is None or arguments.unknown_from is not None and arguments.unknown_from <= start:
        return (), ()
    bindings = _false_names(call)
    limit = len(arguments.positional) if arguments.unknown_from is None else arguments.unknown_from
    positions = tuple(
        index - start for index in range(start, limit) if _is_false(arguments.positional[index], bindings)
    )
    keywords = tuple(
        sorted(name for name, bound in arguments.keywords.items() if name not in CHECKPOINT_KEYWORDS and _is_false(bound.value, bindings))
    )
    return positions, keywords


def _is_false(expr: ast.expr, false_names: set[str]) -> bool:
    if isinstance(expr, ast.Constant):
        return expr.value is None or expr.value is False
    return isinstance(expr, ast.Name) and expr.id in false_names


def _false_names(call: CheckpointCall) -> set[str]:
    """Names whose last binding before the call (by line) is a false constant that holds
    whenever gradient checkpointing runs."""
    function = call.scope.node
    line = call.node.lineno
    last: dict[str, tuple[int, bool]] = {}
    body = getattr(function, "body", [])
    if not isinstance(body, list):  # a lambda's body is one expression: it binds nothing
        return set()
    for statement, guards in _statements(body, ()):
        if statement.lineno >= line:
            continue
        for name, value in _bindings(statement):
            holds = _is_false(value, set()) if value is not None else False
            holds = holds and all(_under_checkpointing(guard) or _tests_itself(guard, name) for guard in guards)
            if name not in last or last[name][0] <= statement.lineno:
                last[name] = (statement.lineno, holds)
    return {name for name, (_, holds) in last.items() if holds}


def _statements(body: list[ast.stmt], guards: tuple[ast.expr, ...]) -> Iterator[tuple[ast.stmt, tuple[ast.expr, ...]]]:
    """Every statement of a function body (not of nested functions), with the `if` tests
    that guard it; statements in loops, `else` branches and handlers count as guarded by a
    test that never holds under checkpointing."""
    for statement in body:
        yield statement, guards
        if isinstance(statement, ast.If):
            yield from _statements(statement.body, (*guards, statement.test))
            yield from _statements(statement.orelse, (*guards, ast.Constant(value=False)))
        elif isinstance(statement, (ast.With, ast.AsyncWith)):
            yield from _statements(statement.body, guards)
        elif isinstance(statement, (ast.For, ast.AsyncFor, ast.While, ast.Try)):
            for child in child_nodes(statement):
                if isinstance(child, ast.stmt):
                    yield from _statements([child], (*guards, ast.Constant(value=False)))
            for handler in getattr(statement, "handlers", []):
                yield from _statements(handler.body, (*guards, ast.Constant(value=False)))


def _bindings(statement: ast.stmt) -> Iterator[tuple[str, ast.expr | None]]:
    """(name, the value bound, when it is a plain `name = value`) for what a statement binds."""
    if isinstance(statement, ast.Assign):
        for target in statement.targets:
            if isinstance(target, ast.Name):
                yield target.id, statement.value
            else:
                for node in ast.walk(target):
                    if isinstance(node, ast.Name):
                        yield node.id, None
    elif isinstance(statement, (ast.AnnAssign, ast.AugAssign)) and isinstance(statement.target, ast.Name):
        yield statement.target.id, statement.value if isinstance(statement, ast.AnnAssign) else None
    elif isinstance(statement, (ast.For, ast.AsyncFor)):
        for node in ast.walk(statement.target):
            if isinstance(node, ast.Name):
                yield node.id, None


def _tests_itself(test: ast.expr, name: str) -> bool:
    """`if use_cache: use_cache = False`: the name is false after the branch either way."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot):
        test = test.left
    return isinstance(test, ast.Name) and test.id == name


def _under_checkpointing(test: ast.expr) -> bool:
    """A test that holds whenever gradient checkpointing runs in training: it reads
    `gradient_checkpointing` (an attribute or name) outside any `not`, joined by `and`."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_under_checkpointing(value) for value in test.values)
    if isinstance(test, ast.Attribute):
        return "gradient_checkpointing" in test.attr
    if isinstance(test, ast.Name):
        return "gradient_checkpointing" in test.id
    return False
