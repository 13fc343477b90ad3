"""Which model a training script's untyped parameter holds (CKP303-CKP305, CKP403-CKP405).

`def gradient_penalty(critic, real, fake)` or `def parallelize(model)` take the model their callers
build. What a parameter holds is what this module's calls pass it, followed through such
parameters up to three calls out; when nothing here calls the function (its tests or another
file do), the parameter is the model class of this module it is named after (`critic` for
`Critic`), and `model`/`net` the one whole model the module defines. Asked only by the
composition checks, where the question is which model a script wraps, shards or differentiates:
in the shared type inference every region's helpers would take their callers' values, for a cost
nobody measured, and a name is evidence only for a script's own model.
"""

from __future__ import annotations

import ast
import functools

from ckptlint.analysis.flow.statements import callee_leaf
from ckptlint.analysis.knowledge import torch_api
from ckptlint.analysis.semantics.evaluator import TypeInference
from ckptlint.analysis.semantics.values import ClassType, Type, Types, element_types
from ckptlint.classes import ClassInfo
from ckptlint.passed_arguments import passed_arguments
from ckptlint.symbols import FUNCTION, MODULE, PARAM, ModuleSymbols, Scope

_GENERIC_MODEL_NAMES = frozenset({"model", "net", "network"})


class ModelParameters:
    """The model types of one module's expressions, its functions' untyped parameters included."""

    def __init__(self, module: ModuleSymbols, inference: TypeInference):
        self.module = module
        self.inference = inference
        self.classes = inference.classes

    def model_types(self, expr: ast.expr, scope: Scope, depth: int = 0) -> Types:
        """What a model expression holds; for a parameter of a module-level function that nothing
        annotates (`def train_step(model, batch)`), what this module's calls of the function pass
        it, followed through such parameters up to three calls out (`main` builds the model and
        hands it to `critic_step`, which hands it to `gradient_penalty`). Asked only here, where
        the question is which model a training script wraps or differentiates: in the evaluator
        every region's helpers would take their callers' values, for a cost nobody measured."""
        types = self.inference.types(expr, self.module, scope)
        if types or depth >= 3 or not isinstance(expr, ast.Name):
            return types
        function = scope if scope.kind == FUNCTION and scope.parent is not None and scope.parent.kind == MODULE else None
        bindings = self.module.lookup(scope, expr.id)
        if function is None or [b.kind for b in bindings] != [PARAM] or bindings[0].scope is not function or bindings[0].value is not None:
            return types
        found: set[Type] = set()
        passed = passed_arguments(self.module, function, expr.id)
        for argument, call_scope in passed:
            found.update(self.model_types(argument, call_scope, depth + 1))
        if not passed:
            found.update(self.named_model(expr.id))
        return frozenset(found)

    def module_types(self, expr: ast.expr, scope: Scope) -> Types:
        """What a module expression holds, its root read as `model_types` reads a model
        (`model.layers[0]` in `def parallelize(model)`: an element of that model's `layers`)."""
        types = self.inference.types(expr, self.module, scope)
        if types:
            return types
        if isinstance(expr, ast.Name):
            return self.model_types(expr, scope)
        if isinstance(expr, ast.Subscript):
            return element_types(self.module_types(expr.value, scope))
        if isinstance(expr, ast.Attribute):
            found: set[Type] = set()
            for item in self.module_types(expr.value, scope):
                if isinstance(item, ClassType):
                    found.update(self.inference.instance_attribute_types(item, expr.attr))
            return frozenset(found)
        return frozenset()

    def named_model(self, parameter: str) -> Types:
        """The model class this module defines that a parameter nothing here passes is named
        after: a script's `gradient_penalty(critic, ...)` beside `class Critic(nn.Module)`, `gen`
        for `Generator` (its tests or another file make the call). `model`/`net` is the one
        module class no other class here builds, when it is a whole model (it builds another
        of them) or the module trains (it differentiates something): a layer library's lone
        `Block` is not what its `apply_fsdp(model)` helper is given. Nothing when the name fits
        no class, or `model` fits several."""
        models = self.module_classes()
        word = parameter.lower().replace("_", "")
        if word in _GENERIC_MODEL_NAMES:
            built = {info.name: {other.name for other in models if other is not info and other.name in _names_in(info.node)} for info in models}
            roots = [info for info in models if not any(info.name in inner for inner in built.values())]
            if len(roots) != 1 or not (built[roots[0].name] or self._trains):
                return frozenset()
            return frozenset({ClassType(roots[0].qualified_name)})
        return frozenset(ClassType(info.qualified_name) for info in models if _named_after(word, info.name.lower()))

    @functools.cached_property
    def _trains(self) -> bool:
        """Whether this module differentiates anything (`loss.backward()`, `torch.autograd.grad`)."""
        return any(callee_leaf(call.func) in ("backward", "grad") for call, _ in self.module.calls)

    def module_classes(self) -> list[ClassInfo]:
        """The torch module classes this module defines at its top level."""
        found = []
        for node, scope in self.module.classes:
            inner = self.module.scope_of.get(id(node))
            if scope is not self.module.scope or inner is None:
                continue
            info = self.classes.info(self.module, inner)
            if any(torch_api.is_torch_module_class(a if isinstance(a, str) else a.qualified_name) for a in self.classes.ancestors(info)):
                found.append(info)
        return found


def _named_after(word: str, class_name: str) -> bool:
    """`critic` for `Critic`, `gen` for `Generator`, `encoder` for `TextEncoder` (lowercase)."""
    return word == class_name or (len(word) >= 3 and (class_name.startswith(word) or class_name.endswith(word)))


def _names_in(node: ast.ClassDef) -> set[str]:
    """The names a class body uses (its bases are not what it builds)."""
    return {n.id for statement in node.body for n in ast.walk(statement) if isinstance(n, ast.Name)}
