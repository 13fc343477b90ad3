"""Who calls a method, and with what (for gradient flow: analysis/usage/grad_flow.py).

The calls of `self.method(...)` in the class and its subclasses and, for `forward`, of the
instances other classes build (`self.encoder = Encoder(...)`, then `self.encoder(x)` or
`self.encoder.forward(x)`), in the class's module and in the modules of its package directory
that import it (a diffusers encoder defined in `vae.py` and built in `autoencoder_tiny.py`).
Syntactic. Those other modules come from `modules_beside.py`, which records them as dependencies
of the analysed file. Everything is computed once per analysis state.
"""

from __future__ import annotations

import ast
import weakref
from typing import Iterator

from ckptlint.analysis.semantics.modules_beside import ModulesBeside
from ckptlint.classes import ClassIndex, ClassInfo
from ckptlint.passed_arguments import passed_argument
from ckptlint.symbols import ASSIGN, IMPORT, ModuleSymbols, Scope, positional_parameters


class MethodCallers:
    def __init__(self, classes: ClassIndex, beside: ModulesBeside):
        self.classes = classes
        self.beside = beside  # the class's module and those beside it that use it
        self._method_calls: dict[int, list[tuple[ast.Call, ModuleSymbols, Scope]]] = {}  # by id of the method scope
        self._self_call_index: weakref.WeakKeyDictionary[ModuleSymbols, SelfCalls] = weakref.WeakKeyDictionary()

    def arguments(self, info: ClassInfo, scope: Scope, name: str) -> Iterator[tuple[ast.expr | None, ModuleSymbols, Scope, int]]:
        """(the argument passed for `name` or None when unknown, the calling module and scope, its
        line) for each call of the method: `self.method(...)` in the class or a subclass, and, for
        `forward`, `self.attr(...)` / `self.attr.forward(...)` where a class builds
        `self.attr = Class(...)`; in the class's module and the modules beside it."""
        node = scope.node
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        parameters = [a.arg for a in positional_parameters(node.args)][1:]
        position = parameters.index(name) if name in parameters else None
        for call, module, caller in self._calls_of(info, scope):
            yield passed_argument(call, name, position), module, caller, call.lineno

    def _calls_of(self, info: ClassInfo, scope: Scope) -> list[tuple[ast.Call, ModuleSymbols, Scope]]:
        """The calls of the method `scope` of `info` that `arguments` reads, once per method:
        `self.method(...)` in `info` or a subclass, and for `forward`, `self.attr(...)` and
        `self.attr.forward(...)` where the caller's class builds `self.attr = Class(...)`."""
        found = self._method_calls.get(id(scope))
        if found is not None:
            self.beside.of(info)  # what they were read from is this file's dependency too
            return found
        node = scope.node
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        found = self._method_calls[id(scope)] = []
        for module in self.beside.of(info):
            index = self._self_calls(module)
            for call, caller, owner in index.direct.get(node.name, ()):
                if any(cls.node is info.node for cls in self.classes.mro(owner)):
                    found.append((call, module, caller))
            if node.name != "forward":
                continue
            for owner, attribute in index.built(info.qualified_name):
                for call, caller, calling in (*index.direct.get(attribute, ()), *index.forward.get(attribute, ())):
                    if calling.node is owner.node:
                        found.append((call, module, caller))
        found.sort(key=lambda item: (item[1].name, item[0].lineno, item[0].col_offset))
        return found

    def _self_calls(self, module: ModuleSymbols) -> SelfCalls:
        index = self._self_call_index.get(module)
        if index is None:
            index = self._self_call_index[module] = SelfCalls.of(module, self.classes)
        return index


class SelfCalls:
    """A module's calls through `self`, by attribute: `self.x(...)` (`direct`) and
    `self.x.forward(...)` (`forward`), each with its scope and class; and, asked per class,
    which attributes its classes build from it (`built`: `self.encoder = Encoder(...)`)."""

    def __init__(self, module: ModuleSymbols, classes: ClassIndex, direct: dict[str, list[tuple[ast.Call, Scope, ClassInfo]]], forward: dict[str, list[tuple[ast.Call, Scope, ClassInfo]]]):
        self.module = module
        self.classes = classes
        self.direct = direct
        self.forward = forward
        self._built: dict[str, list[tuple[ClassInfo, str]]] = {}
        self._aliases: dict[str, set[str]] | None = None

    @classmethod
    def of(cls, module: ModuleSymbols, classes: ClassIndex) -> SelfCalls:
        direct: dict[str, list[tuple[ast.Call, Scope, ClassInfo]]] = {}
        forward: dict[str, list[tuple[ast.Call, Scope, ClassInfo]]] = {}
        for call, caller in module.calls:
            func = call.func
            if not isinstance(func, ast.Attribute):
                continue
            self_name = receiver(caller)
            if self_name is None:
                continue
            if isinstance(func.value, ast.Name) and func.value.id == self_name:
                into, attribute = direct, func.attr
            elif func.attr == "forward" and isinstance(func.value, ast.Attribute) and isinstance(func.value.value, ast.Name) and func.value.value.id == self_name:
                into, attribute = forward, func.value.attr
            else:
                continue
            owner = classes.enclosing_class(module, caller)
            if owner is not None:
                into.setdefault(attribute, []).append((call, caller, owner))
        return cls(module, classes, direct, forward)

    def built(self, qualified: str) -> list[tuple[ClassInfo, str]]:
        """The (class, attribute) pairs whose every assignment builds the class `qualified`, in
        source order, once per class name. Only classes whose lines name it (or a module-level
        alias of it) are scanned: scanning every class of every caller module cost a twentieth
        of a cold run on transformers."""
        found = self._built.get(qualified)
        if found is not None:
            return found
        found = self._built[qualified] = []
        module = self.module
        words = {qualified.rpartition(".")[2], *self._alias_names().get(qualified, ())}
        for node, _ in module.classes:
            owner = self.classes.info(module, module.scope_of[id(node)])
            if not owner.mentions(words):
                continue
            for attribute, assignments in owner.attribute_assignments.items():
                names = {
                    module.qualified_name(a.value.func, a.method)
                    if not a.augmented and isinstance(a.value, ast.Call) and isinstance(a.value.func, (ast.Name, ast.Attribute))
                    else None
                    for a in assignments
                }
                if names == {qualified}:
                    found.append((owner, attribute))
        return found

    def _alias_names(self) -> dict[str, set[str]]:
        """Module-level names bound to another name's class (`from .enc import Encoder as E`), by what they resolve to."""
        if self._aliases is None:
            self._aliases = {}
            module = self.module
            for name, bindings in module.scope.bindings.items():
                for binding in bindings:
                    if binding.kind in (IMPORT, ASSIGN):
                        resolved = module.binding_qualified_name(binding)
                        if resolved is not None and resolved.rpartition(".")[2] != name:
                            self._aliases.setdefault(resolved, set()).add(name)
        return self._aliases


def receiver(scope: Scope) -> str | None:
    """The name of `self` in a method (or in a closure nested inside one)."""
    current: Scope | None = scope
    while current is not None and current.enclosing_class is None:
        current = current.parent
    return current.first_parameter() if current is not None else None
