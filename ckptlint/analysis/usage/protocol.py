"""The questions the gradient evaluator asks across functions and classes (`GradOracle`).

`gradients.Evaluator` judges one function's expressions; for a parameter, a method's return
or a class attribute it asks `grad_flow.GradFlow`, which builds evaluators for other functions.
The evaluator takes this interface instead of `GradFlow`, so the two modules do not import
each other (as pyright's special forms take the evaluator's interface module).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Callable, Protocol

from ckptlint.analysis.usage.facts import Reason
from ckptlint.analysis.usage.layer_calls import ReentrantCalls
from ckptlint.classes import ClassIndex, ClassInfo
from ckptlint.symbols import ModuleSymbols, Scope

if TYPE_CHECKING:
    from ckptlint.analysis.usage.gradients import Evaluator

Active = frozenset[tuple[int, str]]


class GradOracle(Protocol):
    classes: ClassIndex

    def grad_enabled_names(self, module: ModuleSymbols, scope: Scope) -> frozenset[str]: ...

    def parameter_no_grad(
        self, module: ModuleSymbols, scope: Scope, name: str, depth: int, active: Active, reentrant: ReentrantCalls | None
    ) -> Reason | None: ...

    def parameter_needs_grad(self, module: ModuleSymbols, scope: Scope, name: str, depth: int, active: Active) -> Reason | None: ...

    def parameter_container_needs_grad(self, module: ModuleSymbols, scope: Scope, name: str, depth: int, active: Active) -> Reason | None: ...

    def method_returns(
        self, module: ModuleSymbols, scope: Scope, call: ast.Call, depth: int, active: Active, ask: Callable[[Evaluator, ast.expr], Reason | None]
    ) -> Reason | None: ...

    def method_returns_no_grad(self, module: ModuleSymbols, scope: Scope, call: ast.Call, depth: int, active: Active) -> Reason | None: ...

    def layer_class(self, info: ClassInfo, attribute: str) -> str | None: ...

    def sequential_layers(self, info: ClassInfo, attribute: str) -> frozenset[str]: ...

    def frozen_line(self, info: ClassInfo, attribute: str) -> int | None: ...

    def buffer_line(self, info: ClassInfo, attribute: str) -> int | None: ...
