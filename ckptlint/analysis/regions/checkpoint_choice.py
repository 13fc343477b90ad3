"""A grad-mode branch that only chooses whether to checkpoint is not a hazard.

Model code checkpoints its inner blocks only when gradients are on:

    if torch.is_grad_enabled() and self.gradient_checkpointing:
        x = self._gradient_checkpointing_func(block, x, temb)
    else:
        x = block(x, temb)

Inside an outer reentrant region the forward takes the `else` path (no grad) and the replay
the checkpointed one, but both run `block(x, temb)`: the same values (the real-model corpus,
docs/accuracy.md, replays such branches in diffusers and transformers as equivalent). The
branch is excused when the body, with each checkpoint call rewritten to the plain call it
replays, is the `else` body exactly; any other difference keeps CKP206. A plain call may
spell the trailing arguments as keywords (`block(x, temb, conv_cache=c)` for the replayed
`block(x, temb, c)`: reentrant checkpoint takes positional arguments only) when their values,
in order, are the checkpointed call's trailing positional ones.
"""

from __future__ import annotations

import ast
import copy

from ckptlint.analysis.regions.training_step import (
    CHECKPOINT_KEYWORDS,  # what configures the call, not the region
)
from ckptlint.catalogue import BUILTIN_APIS

# the last component of every checkpoint API's name: `checkpoint`, `_gradient_checkpointing_func`, ...
CHECKPOINT_CALLEES = frozenset(api_name.rpartition(".")[2] for api in BUILTIN_APIS for api_name in api.names)


def only_chooses_checkpointing(node: ast.If) -> bool:
    """The `if` body is the `else` body with its calls checkpointed (and nothing else differs)."""
    if not node.orelse:
        return False
    plain = _Unwrap()
    body = [plain.visit(copy.deepcopy(statement)) for statement in node.body]
    if not plain.unwrapped:
        return False
    orelse = [_Positional(plain.replayed).visit(copy.deepcopy(statement)) for statement in node.orelse]
    return [ast.dump(s) for s in body] == [ast.dump(s) for s in orelse]


def _callee_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


class _Unwrap(ast.NodeTransformer):
    """`ckpt(f, *args, use_reentrant=...)` -> `f(*args)`."""

    def __init__(self) -> None:
        self.unwrapped = 0
        self.replayed: list[ast.Call] = []  # the plain calls the checkpoint calls replay

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if _callee_name(node.func) in CHECKPOINT_CALLEES and node.args and not isinstance(node.args[0], ast.Starred):
            self.unwrapped += 1
            keywords = [k for k in node.keywords if k.arg not in CHECKPOINT_KEYWORDS]
            replayed = ast.Call(func=node.args[0], args=node.args[1:], keywords=keywords)
            self.replayed.append(replayed)
            return replayed
        return node


class _Positional(ast.NodeTransformer):
    """`block(x, temb, conv_cache=c)` -> `block(x, temb, c)` when a replayed call of the same
    callee passes `x, temb, c` positionally: the keywords' values, in order, are its trailing
    positional arguments."""

    def __init__(self, replayed: list[ast.Call]) -> None:
        self.replayed = replayed

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if not node.keywords or any(k.arg is None for k in node.keywords):
            return node
        head = [ast.dump(a) for a in node.args]
        values = [ast.dump(k.value) for k in node.keywords]
        for call in self.replayed:
            if ast.dump(call.func) != ast.dump(node.func) or call.keywords:
                continue
            args = [ast.dump(a) for a in call.args]
            if args == head + values:
                return ast.Call(func=node.func, args=[*node.args, *(k.value for k in node.keywords)], keywords=[])
        return node
