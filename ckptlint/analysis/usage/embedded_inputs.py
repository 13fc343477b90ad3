"""Inputs a region embeds itself: token ids, known from how the region uses them (CKP301).

Where a checkpointed block's input comes from is often unknowable (a training loop's batch), but
the block may say what it is: a parameter the region hands to an embedding as its indices
(`self.embed(token_ids)` with `self.embed = nn.Embedding(...)`, `F.embedding(ids, weight)`) is an
integer tensor, and an integer tensor cannot require grad.
"""

from __future__ import annotations

import ast
from typing import Callable, Iterator

from ckptlint.analysis.semantics.evaluator import TypeInference
from ckptlint.analysis.semantics.values import ClassType
from ckptlint.analysis.usage.facts import EMBEDDING_INDICES, Reason
from ckptlint.calls import CheckpointCall
from ckptlint.classes import ClassIndex, ClassInfo
from ckptlint.symbols import PARAM, Scope, positional_parameters

_EMBEDDING_LAYERS = frozenset({"Embedding", "EmbeddingBag"})
_EMBEDDING_FUNCTIONS = frozenset({"torch.nn.functional.embedding", "torch.nn.functional.embedding_bag", "torch.embedding"})

LayerClass = Callable[[ClassInfo, str], "str | None"]  # GradFlow.layer_class: the torch.nn class of `self.<attr>`


def embedding_indices(call: CheckpointCall, classes: ClassIndex, inference: TypeInference, layer_class: LayerClass) -> dict[int, Reason]:
    """By position among the region's positional inputs: those its forward uses as an
    embedding's indices, with where. Empty when the region is not a project module instance."""
    found: dict[int, Reason] = {}
    for info, scope in _region_forwards(call, classes, inference):
        parameters = [a.arg for a in positional_parameters(scope.node.args)][1:]  # type: ignore[attr-defined]  # a method scope's node is its def
        receiver = scope.first_parameter()
        for position, name in enumerate(parameters):
            if [b.kind for b in scope.bindings.get(name, [])] != [PARAM]:
                continue  # rebound in the forward: the name no longer is the input
            where = next(_embedded(scope, info, receiver, name, layer_class), None)
            if where is not None:
                detail, line = where
                path = "" if info.module is call.module else info.module.source.display_path
                found[position] = Reason(EMBEDDING_INDICES, detail, line, path=path)
    return found


def _region_forwards(call: CheckpointCall, classes: ClassIndex, inference: TypeInference) -> Iterator[tuple[ClassInfo, Scope]]:
    """The forward of each project module class the region expression may hold (`self.stem`)."""
    if not isinstance(call.region, (ast.Name, ast.Attribute)):
        return
    for item in inference.types(call.region, call.module, call.scope):
        if isinstance(item, ClassType):
            info = classes.by_name(item.name)
            found = classes.find_method(info, "forward") if info is not None else None
            if found is not None and isinstance(found[1].node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield found


def _embedded(scope: Scope, info: ClassInfo, receiver: str | None, name: str, layer_class: LayerClass) -> Iterator[tuple[str, int]]:
    """Where the forward passes `name` as an embedding's indices: (what embeds it, the line)."""
    module = info.module
    for node in ast.walk(scope.node):
        if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == name):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == receiver:
            if layer_class(info, func.attr) in _EMBEDDING_LAYERS:
                yield f"{receiver}.{func.attr}", node.lineno
        elif module.qualified_name(func, scope) in _EMBEDDING_FUNCTIONS:
            yield ast.unparse(func), node.lineno
