"""BatchNorms an owner's `train()` keeps in eval mode: their running statistics never move in training.

OpenMMLab backbones (and their vendored copies) override `train()`:

    def train(self, mode=True):
        super().train(mode)
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, _BatchNorm):
                    m.eval()

With `norm_eval` known true for the instance (every value its constructor can give it is true:
the default, or what every construction shows), every BatchNorm below that model runs in eval
mode, so a checkpointed block's BatchNorm calls update nothing in the replay. A block is frozen
when some class of its module or the modules beside it holds it (builds it, or names it in the
table it builds its stages from) and freezes its norms this way, and every other class there that
holds it does so only through such a class.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ckptlint.analysis.semantics.known_truth import constant_value, known_truth
from ckptlint.analysis.semantics.values import ClassType, Value
from ckptlint.classes import ClassInfo
from ckptlint.symbols import ModuleSymbols

if TYPE_CHECKING:
    from ckptlint.analysis.semantics.evaluator import TypeInference

_MODULE_WALKS = frozenset({"modules", "named_modules"})
_NORM_WORDS = ("BatchNorm", "_NormBase", "SyncBN")


class FrozenNorms:
    def __init__(self, inference: TypeInference):
        self.inference = inference
        self._frozen: dict[int, bool] = {}
        self._freezes: dict[int, bool] = {}
        self._holds: dict[tuple[int, str], bool] = {}

    def frozen(self, block: ClassInfo) -> bool:
        """Whether every model the project builds around `block` keeps its BatchNorms in eval mode."""
        key = id(block.scope)
        found = self._frozen.get(key)
        if found is None:
            found = self._frozen[key] = self._decide(block)
        return found

    def _decide(self, block: ClassInfo) -> bool:
        inference = self.inference
        modules = inference.construction.beside.of(block)
        if not any("def train(" in (m.source.code if m.source is not None else "") for m in modules):
            return False  # no module here overrides train(): the common case, decided by text
        classes = self.inference.classes
        holders = [
            info for info in self._classes(modules) if block not in classes.mro(info) and self._holds_class(info, block)
        ]  # a subclass of the block (ResNeXt's `Bottleneck(_Bottleneck)`) is another block, not a holder
        freezing = [info for info in holders if self._freezes_norms(info)]
        if not freezing:
            return False
        return all(info in freezing or any(self._holds_class(info, f) for f in freezing) for info in holders)

    def _classes(self, modules: list[ModuleSymbols]) -> list[ClassInfo]:
        classes = self.inference.classes
        return [classes.info(module, module.scope_of[id(node)]) for module in modules for node, _ in module.classes]

    def _holds_class(self, holder: ClassInfo, held: ClassInfo) -> bool:
        key = (id(holder.scope), held.qualified_name)
        found = self._holds.get(key)
        if found is None:
            found = self._holds[key] = _names_class(holder, held) or self._below(holder, held)
        return found

    def _below(self, holder: ClassInfo, held: ClassInfo) -> bool:
        inference = self.inference
        below = inference.construction.descendants(inference, frozenset({ClassType(holder.qualified_name)}))
        return any(isinstance(t, ClassType) and t.name == held.qualified_name for t in below)

    def _freezes_norms(self, info: ClassInfo) -> bool:
        """`train()` (its own or a project base's) puts every BatchNorm of `self.modules()` in eval
        mode under tests the instance's flags decide true (`mode` taken as training)."""
        key = id(info.scope)
        found = self._freezes.get(key)
        if found is None:
            method = self.inference.classes.find_method(info, "train")
            found = False
            if method is not None:
                item = ClassType(info.qualified_name)
                found = any(self._decided_true(test, item) for test in _freezing_guards(method[1].node))
            self._freezes[key] = found
        return found

    def _decided_true(self, tests: list[ast.expr], item: ClassType) -> bool:
        def lookup(path: str) -> Value | None:
            if path == "mode":
                return constant_value(True)
            receiver, _, attribute = path.partition(".")
            if receiver != "self" or not attribute or "." in attribute:
                return None
            types = self.inference.flag_types(item, attribute)
            return Value(types=types) if types else None

        return all(known_truth(test, lookup) is True for test in tests)


def _names_class(holder: ClassInfo, held: ClassInfo) -> bool:
    """The holder's body names the class (`arch_settings = {50: (Bottleneck, (3, 4, 6, 3))}`):
    a table it builds its stages from, which the construction analysis may not follow."""
    name = held.name
    return any((isinstance(n, ast.Name) and n.id == name) or (isinstance(n, ast.Attribute) and n.attr == name) for n in ast.walk(holder.scope.node))


def _freezing_guards(train: ast.AST) -> list[list[ast.expr]]:
    """For each `m.eval()` on a BatchNorm found by walking `self.modules()`, the `if` tests above it."""
    found: list[list[ast.expr]] = []

    def visit(body: list[ast.stmt], tests: list[ast.expr], walked: str | None) -> None:
        for statement in body:
            if isinstance(statement, ast.If):
                norm = walked is not None and _is_norm_test(statement.test, walked)
                if walked is not None and norm and any(_evals(s, walked) for s in statement.body):
                    found.append(tests)
                visit(statement.body, tests if norm else [*tests, statement.test], walked)
                visit(statement.orelse, tests, walked)
            elif isinstance(statement, ast.For):
                target = statement.target.elts[-1] if isinstance(statement.target, ast.Tuple) and statement.target.elts else statement.target
                iterated = statement.iter
                walks = (
                    isinstance(iterated, ast.Call)
                    and isinstance(iterated.func, ast.Attribute)
                    and iterated.func.attr in _MODULE_WALKS
                    and isinstance(iterated.func.value, ast.Name)
                    and iterated.func.value.id == "self"
                )
                visit(statement.body, tests, target.id if walks and isinstance(target, ast.Name) else walked)

    visit(list(getattr(train, "body", [])), [], None)
    return found


def _is_norm_test(test: ast.expr, name: str) -> bool:
    """`isinstance(m, _BatchNorm)`, `isinstance(m, (nn.BatchNorm2d, nn.SyncBatchNorm))`."""
    return (
        isinstance(test, ast.Call)
        and isinstance(test.func, ast.Name)
        and test.func.id == "isinstance"
        and len(test.args) == 2
        and isinstance(test.args[0], ast.Name)
        and test.args[0].id == name
        and any(word in ast.unparse(test.args[1]) for word in _NORM_WORDS)
    )


def _evals(statement: ast.stmt, name: str) -> bool:
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "eval" and isinstance(node.func.value, ast.Name) and node.func.value.id == name
        for node in ast.walk(statement)
    )
