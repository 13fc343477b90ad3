"""The interpreter as its library-call plugin sees it (`Interpreter`).

`interpreter.FunctionInterpreter` asks `library_calls.LibraryCalls` about calls it does not
follow, and the plugin records effects back on the interpreter and evaluates through it:
the two recurse into each other. The plugin takes this interface instead of the class, so
neither module imports the other (as pyright's special forms take the evaluator's interface
module).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Callable, Protocol

from ckptlint.analysis.regions.summary import Effect
from ckptlint.analysis.semantics.values import Value
from ckptlint.classes import ClassIndex
from ckptlint.symbols import ModuleSymbols, Scope

if TYPE_CHECKING:  # annotations only (as in binding.py): the evaluator need not load for this interface
    from ckptlint.analysis.semantics.evaluator import TypeInference


class SummariesView(Protocol):
    """What the plugin reads of the project-wide analyses (`interpreter.Summaries`)."""

    @property
    def classes(self) -> ClassIndex: ...


class Interpreter(Protocol):
    inference: TypeInference
    module: ModuleSymbols
    scope: Scope

    @property
    def analysis(self) -> SummariesView: ...

    def add(self, kind: str, node: ast.AST, variant: str, depends_on: frozenset[tuple[str, str]] = frozenset(), **facts: str) -> None: ...

    def record(self, effect: Effect) -> None: ...

    def inference_only(self, node: ast.AST, names: Callable[[], set[str]] | None = None) -> bool: ...

    def mutate(self, target: Value, node: ast.AST, action: str, tensor: bool = False) -> None: ...

    def store_attribute(self, base: Value, attribute: str, node: ast.AST, action: str, value: Value) -> None: ...

    def attribute_of(self, base: Value, attribute: str) -> Value: ...

    def eval(self, node: ast.AST | None) -> Value: ...
