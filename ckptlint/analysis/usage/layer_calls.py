"""Reentrant checkpoint calls as an expression sees them: which calls of a module run a
reentrant region, with which inputs, including the calls of checkpointing-layer instances
(`GradientCheckpointingLayer` subclasses: `for layer in self.layers: h = layer(h)`).

A layer's instance calls are read off the syntax: the callee reaches an attribute whose
assignments or growth build the layer class (`self.layers = nn.ModuleList([Layer(...) ...])`,
`self.layers.append(Layer(...))`), directly, through an item, or through a loop variable
(`enumerate`, `zip`). Inferring every callee's type cost more than the rest of the reentrant
rules together on transformers.
"""

from __future__ import annotations

import ast
import weakref
from typing import Iterable

from ckptlint.calls import CheckpointCall
from ckptlint.catalogue import CALLABLE, LAYER_CLASS
from ckptlint.classes import ClassIndex, ClassInfo
from ckptlint.analysis.semantics.method_callers import receiver
from ckptlint.symbols import ASSIGN, FUNCTION, LAMBDA, LOOP, PARAM, UNPACK, ModuleSymbols, Scope


def checkpoint_inputs(call: CheckpointCall) -> list[ast.expr]:
        """The tensors the reentrant function is applied to: a callable region's arguments after
        it, a checkpointing layer's positional arguments (its keywords are bound into a partial),
        the input of `checkpoint_seq(functions, x)` (the first segment's; a later segment's is
        the previous one's output, detached when that one's is)."""
        arguments = call.arguments
        if arguments.unknown_from is not None:
            return []
        if call.api.region_kind == LAYER_CLASS:
            return list(arguments.positional)
        if call.api.sequence_input is not None:
            given = arguments.get(*call.api.sequence_input)
            return [given] if given is not None else []
        start = call.api.arguments_from
        if call.api.region_kind != CALLABLE or start is None:
            return []
        return arguments.positional[start:]


class LayerCalls:
    """The instance calls of checkpointing layers, per module, once per analysis state."""

    def __init__(self, classes: ClassIndex):
        self.classes = classes
        self._instance_classes: weakref.WeakKeyDictionary[ModuleSymbols, dict[frozenset[str], dict[int, frozenset[str]]]] = weakref.WeakKeyDictionary()
        self._assigned_memo: dict[int, dict[str, frozenset[str]]] = {}  # by id of the class scope

    def instance_classes(self, module: ModuleSymbols, layers: frozenset[str]) -> dict[int, frozenset[str]]:
        """For each call in `module` that calls an instance of one of the checkpointing layer
        classes `layers` (qualified names), those classes (by call node id). Read off the syntax:
        the callee reaches an attribute whose assignments build such a class (`self.layers[i]`,
        `layer` in `for layer in self.layers`, with `self.layers = nn.ModuleList([Layer(...)
        ...])`); inferring every callee's type cost more than the rest of the reentrant rules
        together. Once per module and set of layers."""
        by_layers = self._instance_classes.setdefault(module, {})
        found = by_layers.get(layers)
        if found is None:
            found = by_layers[layers] = {}
            qualified = {name.rpartition(".")[2]: name for name in layers}
            holders = self._holders(module, set(qualified))
            spans = [(info.node.lineno, info.node.end_lineno or info.node.lineno) for info, _ in holders.values()]
            for node, scope in module.calls:
                if not any(first <= node.lineno <= last for first, last in spans) or not _may_be_instance(node.func, module, scope):
                    continue  # only a method of a class holding a layer can call an instance of it
                owner = self.classes.enclosing_class(module, scope)
                _, held = holders.get(id(owner.scope), (None, {})) if owner is not None else (None, {})
                if not held:
                    continue
                names = {qualified[word] for attribute in _holders_reached(node.func, module, scope, held) for word in held[attribute]}
                if names:
                    found[id(node)] = frozenset(names)
        return found

    def _holders(self, module: ModuleSymbols, words: set[str]) -> dict[int, tuple[ClassInfo, dict[str, set[str]]]]:
        """The module's classes (by id of their scope) with an attribute built from one of
        `words`, with those attributes: a module's calls are walked only inside them."""
        found: dict[int, tuple[ClassInfo, dict[str, set[str]]]] = {}
        for node, _ in module.classes:
            info = self.classes.info(module, module.scope_of[id(node)])
            held = self._layer_holders(info, words)
            if held:
                found[id(info.scope)] = (info, held)
        return found

    def _layer_holders(self, info: ClassInfo, words: set[str]) -> dict[str, set[str]]:
        """The attributes of `info` (and its project bases) whose assignments name one of `words`, with those named."""
        held: dict[str, set[str]] = {}
        for cls in self._local_mro(info):
            if not cls.mentions(words):
                continue  # its assignments cannot name a layer class: no need to scan them
            for attribute, names in self._assigned_names(cls).items():
                named = names & words
                if named:
                    held.setdefault(attribute, set()).update(named)
        return held

    def _local_mro(self, info: ClassInfo) -> list[ClassInfo]:
        """The class and its bases defined in the same module, by name: a checkpointing layer's
        list is built there (`self.layers = nn.ModuleList([Layer(...) ...])`), and resolving
        every base across the project only to look for it cost more than the search."""
        module = info.module
        local = {node.name: scope for node, scope in module.classes if scope is module.scope}
        found: list[ClassInfo] = []
        queue = [info]
        while queue:
            current = queue.pop(0)
            if any(c.node is current.node for c in found):
                continue
            found.append(current)
            for base in current.node.bases:
                if isinstance(base, ast.Name) and base.id in local:
                    node = next(n for n, scope in module.classes if n.name == base.id and scope is module.scope)
                    queue.append(self.classes.info(module, module.scope_of[id(node)]))
        return found

    def _assigned_names(self, info: ClassInfo) -> dict[str, frozenset[str]]:
        """Each attribute the class itself assigns or grows (`append`, `extend`, `[k] =`), with the
        names its values mention; once per class."""
        found = self._assigned_memo.get(id(info.scope))
        if found is None:
            values: dict[str, list[ast.expr]] = {}
            for attribute, assignments in info.attribute_assignments.items():
                values.setdefault(attribute, []).extend(a.value for a in assignments if a.value is not None)
            for attribute, growth in info.container_growth.items():  # `self.layers.append(Layer(...))`
                values.setdefault(attribute, []).extend(g.value for g in growth)
            found = self._assigned_memo[id(info.scope)] = {
                attribute: frozenset(n.id for value in exprs for n in ast.walk(value) if isinstance(n, ast.Name)) for attribute, exprs in values.items()
            }
        return found


class ReentrantCalls:
    """A module's reentrant checkpoint calls, by call node, and its reentrant checkpointing layer
    classes, by qualified name: what an expression evaluated in the module can see through."""

    def __init__(self, layer_calls: LayerCalls, calls: dict[int, CheckpointCall], layers: dict[str, CheckpointCall]):
        self.layer_calls = layer_calls
        self.calls = calls
        self.layers = layers

    @classmethod
    def of(cls, calls: Iterable[CheckpointCall], layer_calls: LayerCalls) -> ReentrantCalls:
        by_node: dict[int, CheckpointCall] = {}
        layers: dict[str, CheckpointCall] = {}
        for call in calls:
            if call.reentrant is not True:
                continue
            if call.api.region_kind == LAYER_CLASS and isinstance(call.node, ast.ClassDef):
                layers[_layer_name(call)] = call
            else:
                by_node[id(call.node)] = call
        return cls(layer_calls, by_node, layers)

    def inputs_of(self, node: ast.Call, module: ModuleSymbols, scope: Scope) -> list[ast.expr] | None:
        """The positional inputs of `node` when it runs a reentrant region; None otherwise."""
        call = self.calls.get(id(node))
        if call is not None:
            return checkpoint_inputs(call)
        if self.layers and not any(isinstance(a, ast.Starred) for a in node.args):
            if self.layer_calls.instance_classes(module, frozenset(self.layers)).get(id(node), frozenset()) & self.layers.keys():
                return list(node.args)
        return None

    def instance_calls(self, layer: CheckpointCall, module: ModuleSymbols) -> list[tuple[ast.Call, Scope]]:
        """The calls in `module` of an instance of the checkpointing layer `layer`, in line order."""
        name = _layer_name(layer)
        classes = self.layer_calls.instance_classes(module, frozenset(self.layers))
        found = [(node, scope) for node, scope in module.calls if name in classes.get(id(node), ())]
        return sorted(found, key=lambda item: (item[0].lineno, item[0].col_offset))


def _layer_name(call: CheckpointCall) -> str:
    """The qualified name of the checkpointing layer class a LAYER_CLASS call is (its ClassDef)."""
    assert isinstance(call.node, ast.ClassDef)
    return call.module.defined_name(call.scope, call.node.name)


def _may_be_instance(func: ast.expr, module: ModuleSymbols, scope: Scope) -> bool:
    """A callee that can be a module instance: a local name (`layer`), an attribute of the
    receiver (`self.layer`), an item of either (`self.layers[i]`); not an imported function or
    class, a method call (`x.view(...)`) or a builtin, whose types are not worth inferring."""
    if isinstance(func, ast.Subscript):
        return _may_be_instance(func.value, module, scope)
    if isinstance(func, ast.Attribute):
        self_name = receiver(scope)
        return self_name is not None and isinstance(func.value, ast.Name) and func.value.id == self_name
    if isinstance(func, ast.Name):
        bindings = module.lookup(scope, func.id)
        return bool(bindings) and all(b.kind in (ASSIGN, UNPACK, LOOP, PARAM) and b.scope.kind in (FUNCTION, LAMBDA) for b in bindings)
    return False


def _holders_reached(func: ast.expr, module: ModuleSymbols, scope: Scope, held: dict[str, set[str]]) -> set[str]:
    """The attributes in `held` the callee reaches: `self.<attr>` or an item of it, or a local
    name bound from one (a loop over it, `enumerate`/`zip` of it, an assignment)."""
    if not held:
        return set()

    def named(expr: ast.AST) -> set[str]:
        return {n.attr for n in ast.walk(expr) if isinstance(n, ast.Attribute) and n.attr in held and isinstance(n.value, ast.Name)}

    if not isinstance(func, ast.Name):
        return named(func)
    found: set[str] = set()
    for binding in module.lookup(scope, func.id):
        value = _unpacked_iterable(binding.value, binding.unpack) if binding.kind == LOOP else binding.value
        if value is not None:
            found |= named(value)
    return found


def _unpacked_iterable(iterable: ast.expr | None, position: tuple[int, ...]) -> ast.expr | None:
    """What the loop target at `position` iterates over: `X` for `i, x in enumerate(X)`, `B` for
    `a, b in zip(A, B)`; None when the shape is another."""
    for index in position:
        if not (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and not iterable.keywords):
            return None
        callee, arguments = iterable.func.id, iterable.args
        if callee == "enumerate" and index == 1 and arguments:
            iterable = arguments[0]
        elif callee == "zip" and index < len(arguments):
            iterable = arguments[index]
        else:
            return None
    return iterable
