"""What a reentrant region returns: tensors that reentrant checkpoint can track, or not (CKP306).

Reentrant checkpoint is an `autograd.Function`. Its output is connected to the graph only for
a returned tensor or the tensors of a returned tuple; a tensor inside anything else (a dict, a
dataclass, a Hugging Face `ModelOutput` or diffusers `BaseOutput`, both dict subclasses) comes
back as it was computed under `no_grad`: detached. Nothing upstream of it gets a gradient.

A region's return statements are read with the guards on its own parameters around them
(`if not return_dict: return (output,)`), the parameters bound to what the checkpoint call
passes or to their defaults. The region is reported only when every return that can run
returns such a container: a return whose value is not known (a name, a call of a function)
counts as tracked, precision first.
"""

from __future__ import annotations

import ast
from typing import Iterable, Iterator

from ckptlint.analysis.regions.resolve import RegionEntry, TorchModuleRegion
from ckptlint.analysis.regions.summary import UntrackedOutput
from ckptlint.analysis.semantics.evaluator import TypeInference
from ckptlint.analysis.semantics.values import ClassObjectType
from ckptlint.calls import CheckpointCall
from ckptlint.catalogue import CALLABLE
from ckptlint.classes import ClassIndex
from ckptlint.symbols import (
    CLASS,
    ModuleSymbols,
    Scope,
    parameter_default,
    positional_parameters,
)

# bases whose instances hold tensors as items or fields, out of autograd.Function's sight
_MAPPING_BASES = frozenset(
    {"dict", "builtins.dict", "collections.OrderedDict", "typing.OrderedDict", "OrderedDict",
     "transformers.utils.generic.ModelOutput", "transformers.utils.ModelOutput", "transformers.modeling_outputs.ModelOutput",
     "diffusers.utils.outputs.BaseOutput", "diffusers.utils.BaseOutput"}
)  # fmt: skip
_DATACLASS = frozenset({"dataclass", "dataclasses.dataclass"})


class RegionOutputs:
    def __init__(self, classes: ClassIndex, inference: TypeInference):
        self.classes = classes
        self.inference = inference

    def untracked(self, call: CheckpointCall, entries: Iterable[RegionEntry | TorchModuleRegion]) -> UntrackedOutput | None:
        """The region's untracked output when the call is reentrant and every region it can be
        returns a container on every path the call's arguments allow; None otherwise."""
        if call.reentrant is not True or call.api.region_kind != CALLABLE or call.api.arguments_from is None:
            return None
        arguments = call.arguments
        if arguments.unknown_from is not None:
            return None
        passed = list(arguments.positional[call.api.arguments_from :])
        found: UntrackedOutput | None = None
        for entry in entries:
            if isinstance(entry, TorchModuleRegion):
                return None
            untracked = self._entry(entry, passed)
            if untracked is None:
                return None
            found = found or untracked
        return found

    def _entry(self, entry: RegionEntry, passed: list[ast.expr]) -> UntrackedOutput | None:
        node = entry.scope.node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        values = self._bound(entry.scope, node, passed)
        found: UntrackedOutput | None = None
        for value, guards in _returns(node.body, ()):
            chosen: list[str] = []
            reachable = True
            for name, polarity in guards:
                known = values.get(name)
                if known is None:
                    continue  # either way: the return may run
                value_given, defaulted = known
                if bool(value_given) != polarity:
                    reachable = False
                    break
                if defaulted:
                    chosen.append(name)
            if not reachable:
                continue
            container = self._container(value, entry.module, entry.scope)
            if container is None:
                return None  # a return that may hand back tensors it tracks
            found = found or UntrackedOutput(entry.name, container, entry.module.source.display_path, value.lineno, tuple(chosen))
        return found

    def _bound(self, scope: Scope, node: ast.FunctionDef | ast.AsyncFunctionDef, passed: list[ast.expr]) -> dict[str, tuple[object, bool]]:
        """Each parameter the call decides: (its constant value, whether that is the default)."""
        parameters = positional_parameters(node.args)
        if scope.parent is not None and scope.parent.kind == CLASS:
            parameters = parameters[1:]
        values: dict[str, tuple[object, bool]] = {}
        bindings = {b.node: b for bs in scope.bindings.values() for b in bs}
        for index, parameter in enumerate(parameters):
            if index < len(passed):
                given = passed[index]
                if isinstance(given, ast.Constant):
                    values[parameter.arg] = (given.value, False)
                continue
            binding = bindings.get(parameter)
            default = parameter_default(binding) if binding is not None else None
            if isinstance(default, ast.Constant):
                values[parameter.arg] = (default.value, True)
        return values

    def _container(self, value: ast.expr, module: ModuleSymbols, scope: Scope) -> str | None:
        """`dict`, or the class the return builds, when it holds tensors out of sight."""
        if isinstance(value, (ast.Dict, ast.DictComp)):
            return "dict"
        if not isinstance(value, ast.Call):
            return None
        if isinstance(value.func, ast.Name) and value.func.id == "dict" and not module.lookup(scope, "dict"):
            return "dict"
        for found in self.inference.types(value.func, module, scope):
            if isinstance(found, ClassObjectType):
                info = self.classes.by_name(found.name)
                if info is not None and (self.classes.inherits_from(info, _MAPPING_BASES) or self._dataclass(info)):
                    return info.name
        return None

    def _dataclass(self, info: object) -> bool:
        node = getattr(info, "node", None)
        decorators = node.decorator_list if isinstance(node, ast.ClassDef) else []
        for decorator in decorators:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            if ast.unparse(target) in _DATACLASS:
                return True
        return False


def _returns(body: list[ast.stmt], guards: tuple[tuple[str, bool], ...]) -> Iterator[tuple[ast.expr, tuple[tuple[str, bool], ...]]]:
    """Each `return value` of a function body with the parameter tests around it: `if
    return_dict:` gives (`return_dict`, True) in its body and (`return_dict`, False) after a
    body that returns or in its `else`."""
    ended: tuple[tuple[str, bool], ...] = ()  # tests whose body returned: what the rest of the block knows
    for statement in body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        here = guards + ended
        if isinstance(statement, ast.Return):
            if statement.value is not None:
                yield statement.value, here
            return
        if isinstance(statement, ast.If):
            test = _parameter_test(statement.test)
            inside = here + ((test,) if test else ())
            outside = here + (((test[0], not test[1]),) if test else ())
            yield from _returns(statement.body, inside)
            yield from _returns(statement.orelse, outside)
            if test and statement.body and isinstance(statement.body[-1], ast.Return):
                ended = ended + ((test[0], not test[1]),)
            continue
        for field in ("body", "orelse", "finalbody"):
            block = getattr(statement, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield from _returns(block, here)
        for handler in getattr(statement, "handlers", []):
            yield from _returns(handler.body, here)


def _parameter_test(test: ast.expr) -> tuple[str, bool] | None:
    """`name` -> (name, True), `not name` -> (name, False); anything else is not read."""
    if isinstance(test, ast.Name):
        return (test.id, True)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Name):
        return (test.operand.id, False)
    return None
