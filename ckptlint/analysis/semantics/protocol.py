"""The type evaluator's interface, which its plugins are written against.

`evaluator.TypeInference` is assembled from plugins that recurse into it: `module_structure.py`
(what an `nn.Module` holds and calls) and `zoo.py` (what builders, registries and configurations
build), and `modules.py` is handed it. They take `TypeEvaluator`, not the evaluator, so no module
imports `evaluator.py` back (pyright's special forms take `typeEvaluatorTypes.ts` the same way).
The plugins are mixins: the analysis runs with the cyclic garbage collector off, and a mixin
adds no object holding a reference back to the evaluator.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

from ckptlint.analysis.semantics.values import ClassType, Type, Types
from ckptlint.classes import ClassIndex, ClassInfo
from ckptlint.project import Project
from ckptlint.symbols import Binding, ModuleSymbols, Scope

if TYPE_CHECKING:
    from ckptlint.analysis.semantics.modules import ModuleConstruction

EMPTY: Types = frozenset()
Passed = tuple[tuple[str, Types], ...]  # what a call passes to the parameters that choose what is built


class TypeEvaluator(Protocol):
    project: Project
    classes: ClassIndex
    construction: ModuleConstruction

    def types(self, expr: ast.AST | None, module: ModuleSymbols, scope: Scope, depth: int = 0) -> Types: ...

    def elements_types(self, elements: Iterable[ast.expr], module: ModuleSymbols, scope: Scope, depth: int) -> Types: ...

    def qualified_name(self, expr: ast.expr, module: ModuleSymbols, scope: Scope) -> str | None: ...

    def global_types(self, qualified_name: str, depth: int) -> Types: ...

    def binding_types(self, module: ModuleSymbols, binding: Binding, depth: int = 0) -> Types: ...

    def instance(self, class_name: str, call: ast.Call | None) -> ClassType: ...

    def instance_attribute_types(self, item: ClassType, attribute: str) -> Types: ...

    def as_configured(self, item: ClassType, evaluate: Callable[[dict[str, Types] | None], Types]) -> Types: ...

    def returned_types(self, module: ModuleSymbols, scope: Scope) -> Types: ...

    def returns_in(self, module: ModuleSymbols, scope: Scope, env: dict[int, dict[str, Types]]) -> Types: ...

    def return_expressions(self, scope: Scope) -> list[ast.expr]: ...

    def attribute_types(self, info: ClassInfo, attribute: str, config: Passed = ()) -> Types: ...

    def call_result(self, callee: Type, call: ast.Call | None, module: ModuleSymbols, scope: Scope, depth: int) -> Types: ...

    def container_elements(self, kind: str, arguments: Iterable[ast.expr], module: ModuleSymbols, scope: Scope, depth: int) -> Types: ...

    def unpacked_keywords(
        self, call: ast.Call, module: ModuleSymbols, scope: Scope, depth: int, names: Iterable[str]
    ) -> dict[str, tuple[Types, bool]]: ...

    def config_objects(self, types: Types) -> Types: ...

    def decided_test(self, module: ModuleSymbols, scope: Scope, test: ast.expr) -> bool | None: ...
