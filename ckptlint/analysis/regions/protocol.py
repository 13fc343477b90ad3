"""The interpreter as its library-call plugin and its call dispatch see it (`Interpreter`).

`interpreter.FunctionInterpreter` asks `library_calls.LibraryCalls` about calls it does not
follow, and the plugin records effects back on the interpreter and evaluates through it:
the two recurse into each other. The plugin takes this interface instead of the class, so
neither module imports the other (as pyright's special forms take the evaluator's interface
module).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Callable, Protocol

from ckptlint.analysis.regions.coverage import CallLog
from ckptlint.analysis.regions.summary import Context, Effect, HandedIndices, ReturnedSelection, Summary
from ckptlint.analysis.semantics.values import Value
from ckptlint.classes import ClassIndex
from ckptlint.project import Project
from ckptlint.symbols import ModuleSymbols, Scope

if TYPE_CHECKING:  # annotations only (as in binding.py): the evaluator need not load for this interface
    from ckptlint.analysis.regions.library_calls import LibraryCalls
    from ckptlint.analysis.regions.replay_writes import WriteTracker
    from ckptlint.analysis.semantics.evaluator import TypeInference


class SummariesView(Protocol):
    """What the plugin reads of the project-wide analyses (`interpreter.Summaries`)."""

    @property
    def classes(self) -> ClassIndex: ...

    @property
    def project(self) -> Project: ...

    def summary(self, module: ModuleSymbols, scope: Scope, context: Context) -> Summary: ...


class Interpreter(Protocol):
    inference: TypeInference
    module: ModuleSymbols
    scope: Scope
    library: LibraryCalls
    env: dict[str, Value]
    closure: dict[str, Value]
    effects: list[Effect]
    returned_selections: list[ReturnedSelection]  # selections whose indices the caller decides on (CKP504)
    handed_indices: list[HandedIndices]  # selections whose indices a later call of this function may route with (CKP504)
    tracker: WriteTracker
    calls: CallLog | None  # what it called, when coverage is asked for (coverage.py)

    @property
    def analysis(self) -> SummariesView: ...

    def add(self, kind: str, node: ast.AST, variant: str, depends_on: frozenset[tuple[str, str]] = frozenset(), **facts: str) -> None: ...

    def record(self, effect: Effect) -> None: ...

    def inference_only(self, node: ast.AST, names: Callable[[], set[str]] | None = None) -> bool: ...

    def mutate(self, target: Value, node: ast.AST, action: str, tensor: bool = False) -> None: ...

    def overwrite(self, target: Value, node: ast.AST, action: str, value: Value) -> None: ...

    def store_attribute(self, base: Value, attribute: str, node: ast.AST, action: str, value: Value) -> None: ...

    def attribute_of(self, base: Value, attribute: str) -> Value: ...

    def eval(self, node: ast.AST | None) -> Value: ...

    def _names_a_module_attribute(self, node: ast.Attribute) -> bool: ...

    def is_local_value(self, name: str) -> bool: ...
