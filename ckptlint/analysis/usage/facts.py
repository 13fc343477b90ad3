"""What the gradient-flow analysis tells the rules (CKP301, CKP302): records and wording keys.

Kept apart from the analysis so that a rule that reads them loads no evaluator.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ckptlint.calls import CheckpointCall
from ckptlint.catalogue import (
    CALLABLE,
    FROM_ARGUMENT,
    LIBRARY_DEFAULT,
    NONE,
    OMITTED,
    TRUE,
)

# why a value cannot require grad (CKP301's wording keys)
DETACHED = "detached"
NO_GRAD_BLOCK = "no-grad-block"
CREATED = "created"
INTEGER = "integer"
TOKENS = "tokens"
FROZEN_EMBEDDING = "frozen-embedding"
EMBEDDING_INDICES = "embedding-indices"  # the region hands it to an embedding as indices (embedded_inputs.py)
BUFFER = "buffer"
MODEL_INPUT = "model-input"  # the data an entry model is trained on (analysis/usage/model_inputs.py)
NOT_TENSOR = "not-tensor"  # a parameter annotated or defaulted as a bool, int, float or str
# why a value can require grad (CKP302's wording keys)
TRAINABLE_OUTPUT = "trainable-output"
PARAMETER = "parameter"
REQUIRES_GRAD = "requires-grad"
# how a tensor reaches a region other than as a positional input
KEYWORD = "keyword"
PARTIAL = "partial"
CLOSURE = "closure"
GLOBAL = "global"
LAYER_KEYWORD = "layer-keyword"  # a checkpointing layer's keyword argument, bound into its partial
CONTAINER = "container"  # inside a list, tuple or dict passed positionally: not a tensor input
# what goes wrong (CKP302)
RAISES = "raises"  # torch's reentrant checkpoint rejects keyword arguments
DROPPED = "dropped"  # no positional input requires grad: the output is detached
GRAPH_REUSED = "graph-reused"  # the region's inner backward frees a graph used again


@dataclass(frozen=True)
class Reason:
    """Why a value cannot (or can) require grad: a wording key and what the message quotes."""

    kind: str
    detail: str = ""  # `self.embed`, `torch.zeros`, `.detach()`
    line: int = 0  # where the decisive code is
    leaf: bool = False  # for needs_grad: a leaf tensor (a parameter, `requires_grad=True`)
    path: str = ""  # the file of `line` when it is not the checkpoint call's

    def at(self) -> str:
        """`line 12`, or `autoencoder_tiny.py:310` in another file."""
        return f"{self.path}:{self.line}" if self.path else f"line {self.line}"


@dataclass(frozen=True)
class NoGradInput:
    """A positional input of the region and why it cannot require grad; `first_pass` is the
    line of the loop around the call when that holds only on the loop's first pass (later
    passes feed the region the previous one's output)."""

    text: str
    reason: Reason
    first_pass: int | None = None
    called_at: ast.Call | None = None  # for a checkpointing layer: the call of the instance


@dataclass(frozen=True)
class UntrackedTensor:
    """A tensor that reaches a reentrant region other than as a positional input."""

    route: str  # KEYWORD, PARTIAL, CLOSURE, GLOBAL, LAYER_KEYWORD, CONTAINER
    name: str  # the keyword, the name, or the expression text
    consequence: str  # RAISES, DROPPED, GRAPH_REUSED
    reason: Reason | None = None  # why it can require grad (None for RAISES)
    called_at: ast.Call | None = None  # for a checkpointing layer: the call of the instance


def reentrant_because(call: CheckpointCall) -> str:
    """What decided the mode, for messages."""
    flag = call.use_reentrant
    if call.api.mode == FROM_ARGUMENT and flag in (OMITTED, NONE):
        return "use_reentrant not passed: torch 2.x falls back to reentrant"
    if flag == TRUE:
        return "use_reentrant=True"
    return call.mode.source  # the library and the version that decided it (modes.py)


def takes_use_reentrant(call: CheckpointCall) -> bool:
    """Whether passing `use_reentrant=False` at the call selects the non-reentrant implementation."""
    return call.api.mode in (FROM_ARGUMENT, LIBRARY_DEFAULT) and call.api.region_kind == CALLABLE
