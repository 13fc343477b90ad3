"""Calls, as the interpreter follows them: library calls by name, methods, `super()`, modules
and project functions, each run through its summary and chained (a mixin of
`interpreter.FunctionInterpreter`, written against `protocol.Interpreter`).

With a call log (`coverage.CallLog`, for `ckptlint calls --unresolved`) each call is marked
resolved or not, with the reason, where its dispatch decides it.
"""

from __future__ import annotations

import ast
import os
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from ckptlint.analysis.flow.routing import handed_on, parameter_routing_use, returned_indices, routing_use_at
from ckptlint.analysis.knowledge import torch_api
from ckptlint.analysis.regions import binding, coverage
from ckptlint.analysis.regions.libraries import reached_at
from ckptlint.analysis.regions.library_calls import own_running_statistics
from ckptlint.analysis.regions.protocol import Interpreter
from ckptlint.analysis.regions.summary import (
    NONDETERMINISTIC_OP,
    Effect,
    HandedIndices,
    ReturnedSelection,
    Summary,
    approximation_note,
    with_note,
)
from ckptlint.analysis.semantics.autograd_functions import APPLY, applied_forward
from ckptlint.analysis.semantics.evaluator import is_property
from ckptlint.analysis.semantics.module_structure import MODULE_METHODS
from ckptlint.analysis.semantics.values import (
    LOCAL_VALUE,
    ClassObjectType,
    ClassType,
    ContainerType,
    FunctionType,
    Value,
    element_types,
    merge,
    ordered,
)
from ckptlint.symbols import ModuleSymbols, Scope, positional_parameters

if TYPE_CHECKING:  # typed against the interface; at run time no protocol members (its properties) are inherited
    _Interpreter = Interpreter
else:
    _Interpreter = object


class CallDispatch(_Interpreter):
    """How a call in the interpreted function is run."""

    def mark(self, node: ast.Call, reason: str = coverage.RESOLVED) -> None:
        """Log how the call was dispatched (only when coverage is asked for)."""
        if self.calls is not None:
            if reason == coverage.RESOLVED:
                self.calls.resolved(node)
            else:
                self.calls.unresolved(node, reason)

    def eval_Call(self, node: ast.Call) -> Value:
        value = self._dispatch_call(node)
        if self.calls is not None:
            self.calls.close(self.module, node, coverage.VALUE_UNKNOWN)
        return value

    def _dispatch_call(self, node: ast.Call) -> Value:
        func = node.func
        arguments = [self.eval(a) for a in node.args]
        keywords = {k.arg: self.eval(k.value) for k in node.keywords if k.arg is not None}
        for keyword in node.keywords:
            if keyword.arg is None:
                self.eval(keyword.value)
        name = self._callee_name(func)
        if name is not None:
            known = self.library.function(self, name, node, arguments, keywords)
            if known is not None:
                self.mark(node)
                return known
        if isinstance(func, ast.Attribute):
            if _is_super_call(func.value, self.module, self.scope):
                return self.super_call(func.attr, node, arguments, keywords)
            if self._names_a_module_attribute(func):  # `ops.scale(x)` after `from . import ops`
                callee = self.eval(func)
                if any(isinstance(item, (FunctionType, ClassObjectType, ClassType)) for item in callee.types):
                    return self.invoke(callee, node, arguments, keywords)
                self.mark(node, self._callee_reason(node, name))
            mark = self.tracker.mark(0) if func.attr in torch_api.OVERWRITE_METHODS else None
            receiver = self.eval(func.value)
            if mark is not None:
                self.tracker.forget_reads(mark)  # loading the tensor to write into it is not reading its contents
            return self.method_call(receiver, func.attr, node, arguments, keywords)
        callee = self.eval(func)
        if not callee.types:
            self.mark(node, self._callee_reason(node, name))
        return self.invoke(callee, node, arguments, keywords)

    def _callee_reason(self, node: ast.Call, name: str | None) -> str:
        return coverage.callee_reason(node, name, name is not None and self.analysis.project.never_read(name))

    def _callee_name(self, func: ast.expr) -> str | None:
        base = func
        while isinstance(base, ast.Attribute):
            base = base.value
        if isinstance(base, ast.Name) and self.is_local_value(base.id):
            return None
        name = self.module.qualified_name(func, self.scope)
        return None if name is None else self.analysis.project.canonical_name(name)

    def method_call(self, receiver: Value, method: str, node: ast.Call, arguments: list[Value], keywords: dict[str, Value]) -> Value:
        known = self.library.method(self, receiver, method, node, merge([*arguments, *keywords.values()]))
        if known is not None:
            self.mark(node)
            return known
        text = f"{receiver.path}.{method}" if receiver.path else method
        results = self.bound_methods(receiver, method, node, arguments, keywords)
        if results is not None:
            return results
        attribute = self.attribute_of(receiver, method)
        if any(isinstance(t, (ClassType, FunctionType, ContainerType)) for t in attribute.types):
            return self.invoke(attribute, node, arguments, keywords)  # `self.block(x)`: a module attribute
        if method in MODULE_METHODS:  # `self.children()`, `self.blocks.values()`, `block.train()`
            types = self.inference.module_method_types(method, receiver.types, node.args[0] if node.args else None)
            if types is not None:
                self.mark(node)
                return Value(receiver.origins, types, receiver.volatile, f"{text}()", receiver.attribute)
        if method in torch_api.ALIASING_METHODS:
            self.mark(node)
            types = element_types(receiver.types) if method in ("get", "setdefault", "values", "__getitem__") else receiver.types
            return Value(receiver.origins, types, receiver.volatile, f"{text}()", receiver.attribute)
        if self.calls is not None:
            typed = any(isinstance(t, ClassType) and self.analysis.classes.by_name(t.name) is not None for t in receiver.types)
            self.mark(node, coverage.method_reason(method, typed))
        return Value(volatile=receiver.volatile)

    def bound_methods(self, receiver: Value, method: str, node: ast.Call, arguments: list[Value], keywords: dict[str, Value]) -> Value | None:
        """Calls of project methods on a receiver of known class (`self.helper(x)`, `block.forward(x)`)."""
        results: list[Value] = []
        for item in ordered(receiver.types):
            if isinstance(item, ClassType):
                info = self.analysis.classes.by_name(item.name)
                if info is None:
                    continue
                instance = replace(receiver, types=frozenset({item}))  # `self` is this class in its method
                if method in ("forward", "__call__"):
                    results.append(self.call_module(instance, item, node, arguments, keywords))
                    continue
                found = self.analysis.classes.find_method(info, method)
                if found is not None and not is_property(found[1].node):  # a property's value is called: `attribute_of`
                    owner, scope = found
                    function = self.inference.function(owner.module, scope, instance)
                    results.append(self.call_function(function, node, arguments, keywords, stores_into=receiver.path))
            elif isinstance(item, FunctionType) and method == "__call__":
                results.append(self.call_function(item, node, arguments, keywords))
            elif isinstance(item, ClassObjectType) and method == APPLY:  # `_ReduceScatter.apply(x)`
                forward = applied_forward(self.analysis.classes, item.name)
                if forward is not None:
                    results.append(self.call_function(forward, node, arguments, keywords))
        return merge(results) if results else None

    def super_call(self, method: str, node: ast.Call, arguments: list[Value], keywords: dict[str, Value]) -> Value:
        """`super().forward(x)`: the next definition in the method resolution order."""
        owner_scope = self.scope.parent
        receiver = self.env.get(self.scope.first_parameter() or "", None)
        if owner_scope is None or owner_scope.kind != "class" or receiver is None:
            return LOCAL_VALUE
        classes = self.analysis.classes
        owner = classes.info(self.module, owner_scope)
        for ancestor in classes.ancestors(owner):
            if isinstance(ancestor, str):
                self.mark(node)  # a library base's method
                if method == "forward":
                    self.library.torch_super_forward(self, node, receiver.path or "self", ancestor)
                continue
            scope = ancestor.method(method)
            if scope is not None:
                function = self.inference.function(ancestor.module, scope, receiver)
                return self.call_function(function, node, arguments, keywords)
        return LOCAL_VALUE

    def invoke(self, callee: Value, node: ast.Call, arguments: list[Value], keywords: dict[str, Value]) -> Value:
        results: list[Value] = []
        for item in ordered(callee.types):
            if isinstance(item, FunctionType):
                results.append(self.call_function(item, node, arguments, keywords))
            elif isinstance(item, ClassType):
                results.append(self.call_module(replace(callee, types=frozenset({item})), item, node, arguments, keywords))
            elif isinstance(item, ContainerType) and item.kind == torch_api.SEQUENTIAL:
                for element in ordered(item.elements):
                    element_value = Value(callee.origins, frozenset({element}), path=f"{callee.path}[...]")
                    results.append(self.invoke(element_value, node, arguments, keywords))
            elif isinstance(item, ClassObjectType):
                self.mark(node)
                results.append(Value(types=self.inference.instance_types(item.name, node, self.module, self.scope, 0)))
        return merge(results) if results else LOCAL_VALUE

    def _constructed_by(self, func: ast.expr, class_name: str) -> bool:
        """The module called is made by this very expression, `Cls(...)(x)`: a new module on
        every run, whose running statistics no replay can update twice."""
        if not isinstance(func, ast.Call):
            return False
        name = self._callee_name(func.func)
        return name is not None and name == class_name

    def call_module(self, module_value: Value, item: ClassType, node: ast.Call, arguments: list[Value], keywords: dict[str, Value]) -> Value:
        """Calling an `nn.Module` instance runs its forward."""
        if item.built_by:  # its class came from a builder's unknown key: what it does is noted so
            start = len(self.effects)
            try:
                return self._call_module(module_value, item, node, arguments, keywords)
            finally:
                note = approximation_note(module_value.path or ast.unparse(node.func), item.built_by)
                self.effects[start:] = [with_note(effect, note) for effect in self.effects[start:]]
        return self._call_module(module_value, item, node, arguments, keywords)

    def _call_module(self, module_value: Value, item: ClassType, node: ast.Call, arguments: list[Value], keywords: dict[str, Value]) -> Value:
        if item.running_stats and self._constructed_by(node.func, item.name):
            item = replace(item, running_stats=False)  # `nn.BatchNorm1d(dim)(x)`: statistics that die with the call
        if self.library.module_call(self, module_value.path or ast.unparse(node.func), item, node):
            self.mark(node)
            return LOCAL_VALUE
        info = self.analysis.classes.by_name(item.name)
        if info is None:  # a torch module (its effects are library_calls.py's) or a class not read
            self.mark(node, coverage.RESOLVED if item.name.startswith("torch.") else coverage.NOT_READ)
            return LOCAL_VALUE
        view = self.inference.construction.container_view(self.inference, item, None, None, None, 0)
        receiver = module_value.renamed("self") if view is None else module_value.with_types({item, view}).renamed("self")
        for method in ("forward", "__call__"):
            found = self.analysis.classes.find_method(info, method)
            if found is not None:
                owner, scope = found
                function = self.inference.function(owner.module, scope, receiver)
                # a norm module's statistics were reported at this call (`module_call`): not again inside it
                skip = own_running_statistics if item.running_stats else None
                return self.call_function(function, node, arguments, keywords, skip)
        if view is not None and view.kind == torch_api.SEQUENTIAL:  # an nn.Sequential subclass runs what it registered
            return self.invoke(Value(module_value.origins, frozenset({view}), path=module_value.path), node, arguments, keywords)
        self.mark(node)  # a library base's forward
        self.library.inherited_forward(self, node, [a for a in self.analysis.classes.ancestors(info) if isinstance(a, str)], item.short)
        return LOCAL_VALUE

    def call_function(
        self,
        function: FunctionType,
        node: ast.Call,
        arguments: list[Value],
        keywords: dict[str, Value],
        skip: Callable[[Effect], bool] | None = None,
        stores_into: str = "",
    ) -> Value:
        """Run a project function: its summary's effects, chained through it; `skip` leaves out
        those the caller has already reported in its own words; `stores_into`: the local name of
        the receiver of a method called on it (`self` in `self.preprocess(x)`), whose attributes
        the method assigned."""
        module: ModuleSymbols = function.module  # type: ignore[assignment]  # project functions carry the module that defines them
        scope = module.scope_of.get(id(function.node)) if module is not None else None
        if scope is None:
            self.mark(node, coverage.NOT_READ)
            return LOCAL_VALUE
        context = binding.call_context(function, scope, node, arguments, keywords)
        if context is None:  # the call cannot bind to this callee: it is not the one called
            self.mark(node, coverage.UNBOUND)
            return LOCAL_VALUE
        summary = self.analysis.summary(module, scope, context)
        self.mark(node)
        self._route_handed_indices(node, function, scope)
        if self.calls is not None:
            self.calls.extend(summary.calls)
        into_library = module.library and not self.module.library  # reported at this line (analysis/regions/libraries.py)
        inference_call: bool | None = None  # whether this call runs in eval mode only, once asked
        for effect in summary.effects:
            if skip is not None and skip(effect):
                continue
            if effect.kind == NONDETERMINISTIC_OP:
                inference_call = self.inference_only(node) if inference_call is None else inference_call
                if inference_call:
                    continue  # an eval-mode call: no backward differentiates what it decides (CKP504)
            effect = replace(effect, chain=(function.name, *effect.chain))
            self.record(reached_at(effect, self.module, node) if into_library else effect)
        self._route_returned_selections(summary, node, function.name)
        for effect in self.tracker.merge_callee(summary, function.name):  # stores of state this run read first
            if skip is not None and skip(effect):
                continue
            self.record(reached_at(effect, self.module, node) if into_library else effect)
        if stores_into.isidentifier():
            self._see_stored_attributes(stores_into, summary)
        return summary.returns

    def _route_returned_selections(self, summary: Summary, node: ast.Call, callee: str) -> None:
        """Indices the callee returned (`weights, experts = self.route(x)`): reported where this
        function routes them (CKP504), or handed on to this function's caller when it returns them."""
        function = self.scope.node
        for selection in summary.returned_selections:
            effect = replace(selection.effect, chain=(callee, *selection.effect.chain))
            used = routing_use_at(function, node, selection.position)
            if used is not None:
                if not (self.inference_only(node) or self.inference_only(used)):  # the call, or the use, on an eval path
                    where = (("use", ast.unparse(used)), ("use_line", str(getattr(used, "lineno", node.lineno))), ("use_in", self._where_used(effect)))
                    self.record(replace(effect, variant="returned-selection", facts=effect.facts + where))
                continue
            returned = returned_indices(function, node, selection.position)
            if returned is not None:
                self.returned_selections.append(ReturnedSelection(effect, returned.position))
            # also when returned: a name assigned from the callee handed them (`h = self.experts(h, idx, w)`) reads as holding them
            self.handed_indices.extend(HandedIndices(effect, call, slot) for call, slot in handed_on(function, node, selection.position))

    def _route_handed_indices(self, node: ast.Call, function: FunctionType, scope: Scope) -> None:
        """Indices this function handed to the callee of `node` (`self.experts(x, top_k_index, w)`):
        reported (CKP504) where the callee routes with the parameter they bind."""
        for handed in [h for h in self.handed_indices if h.call is node]:
            parameter = _bound_parameter(scope, handed.slot, function.receiver is not None)
            used = parameter_routing_use(scope.node, parameter) if parameter is not None else None
            if used is None or self.inference_only(node):
                continue
            where = f"`{scope.qualname}`" if function.module is handed.effect.module else f"`{scope.qualname}` ({os.path.basename(function.module.source.display_path)})"  # type: ignore[attr-defined]  # project functions carry their module
            facts = (("use", ast.unparse(used)), ("use_line", str(getattr(used, "lineno", node.lineno))), ("use_in", where))
            self.record(replace(handed.effect, variant="handed-selection", facts=handed.effect.facts + facts))

    def _where_used(self, effect: Effect) -> str:
        """`SparseMoE.dispatch`, with its file when the selection is in another one."""
        name = f"`{self.scope.qualname}`"
        return name if effect.module is self.module else f"{name} ({os.path.basename(self.module.source.display_path)})"

    def _see_stored_attributes(self, receiver: str, summary: Summary) -> None:
        """`self.preprocess(routing)` assigned `self.input_splits`: reads after it in this function
        see the value it stored (as they see this function's own assignments)."""
        for attribute, value in summary.stored_attributes:
            path = f"{receiver}.{attribute}"
            self.env[path] = replace(value, path=path)


def _bound_parameter(scope: Scope, slot: int | str, bound_method: bool) -> str | None:
    """The parameter of the function `scope` that argument `slot` (a position or a keyword) binds."""
    node = scope.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    positional = [a.arg for a in positional_parameters(node.args)][1 if bound_method else 0 :]
    if isinstance(slot, int):
        return positional[slot] if slot < len(positional) else None
    return slot if slot in positional or slot in {a.arg for a in node.args.kwonlyargs} else None


def _is_super_call(expr: ast.expr, module: ModuleSymbols, scope: Scope) -> bool:
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "super"
