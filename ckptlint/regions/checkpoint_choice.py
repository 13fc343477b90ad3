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
replays, is the `else` body exactly; any other difference keeps CKP206.
"""

from __future__ import annotations

import ast
import copy

from ckptlint.catalogue import BUILTIN_APIS
from ckptlint.regions.training_step import CHECKPOINT_KEYWORDS  # what configures the call, not the region

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
    return [ast.dump(s) for s in body] == [ast.dump(s) for s in node.orelse]


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

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if _callee_name(node.func) in CHECKPOINT_CALLEES and node.args and not isinstance(node.args[0], ast.Starred):
            self.unwrapped += 1
            keywords = [k for k in node.keywords if k.arg not in CHECKPOINT_KEYWORDS]
            return ast.Call(func=node.args[0], args=node.args[1:], keywords=keywords)
        return node
