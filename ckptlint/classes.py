"""Classes across the project: bases, `self.<attr>` assignments, inheritance.

Needed wherever a name only means something through a class: a partial stored on
`self._ckpt` in `__init__` and called in `forward`, a subclass of Hugging Face's
`GradientCheckpointingLayer` two files away, the class of `self.block`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Iterator

from ckptlint.project import Project
from ckptlint.symbols import CLASSDEF, DEF, FUNCTION, ModuleSymbols, Scope
from ckptlint.syntax import walk_branches


@dataclass(frozen=True)
class AttributeAssignment:
    """`self.<attr> = value` (or `+=`, or an annotation) inside a method."""

    attribute: str
    node: ast.stmt
    value: ast.expr | None
    method: Scope
    augmented: bool = False
    unpack: int | None = None  # `self.stages, self.info = build()`: the position in what is unpacked


@dataclass(frozen=True)
class AddedModule:
    """`self.add_module(name, m)`, `self.register_module(name, m)`, `setattr(self, name, m)`.

    `name` is the name expression: a literal, an f-string (`f"layer{i}"`) or a variable.
    """

    name: ast.expr
    value: ast.expr
    method: Scope

    @property
    def literal_name(self) -> str | None:
        return self.name.value if isinstance(self.name, ast.Constant) and isinstance(self.name.value, str) else None


@dataclass(frozen=True)
class ContainerGrowth:
    """`self.blocks.append(m)`, `.insert(i, m)`, `.add_module(n, m)`, `self.blocks[k] = m` (one element),
    `self.blocks.extend([...])`, `self.blocks += [...]` (a collection of elements)."""

    value: ast.expr
    method: Scope
    collection: bool  # `value` holds elements (extend, +=) rather than being one


ELEMENT_ADDERS = {"append": 0, "insert": 1, "add_module": 1, "register_module": 1}  # method -> position of the element
COLLECTION_ADDERS = frozenset({"extend", "update"})
MODULE_ADDERS = frozenset({"add_module", "register_module"})


@dataclass(eq=False)
class ClassInfo:
    module: ModuleSymbols
    scope: Scope

    @property
    def node(self) -> ast.ClassDef:
        return self.scope.node  # type: ignore[return-value]  # a class's scope node is its ClassDef

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def qualified_name(self) -> str:
        return self.module.defined_name(self.scope.parent, self.node.name)  # type: ignore[arg-type]  # a class scope always has a parent

    def methods(self) -> Iterator[Scope]:
        return (child for child in self.scope.children if child.kind == FUNCTION)

    def mentions(self, words: Iterable[str]) -> bool:
        """Whether the class's own lines hold one of `words`: a text search that lets a pass skip
        a class whose syntax cannot name what it looks for (cheaper than walking it)."""
        return any(self.module.source.mentions(word, self.node) for word in words)

    def method(self, name: str) -> Scope | None:
        return self._methods_by_name.get(name)

    @cached_property
    def _methods_by_name(self) -> dict[str, Scope]:
        """The first method of each name (what `method` finds), indexed once: inheritance
        questions ask every class of an MRO for `__init__` and `forward` many times."""
        found: dict[str, Scope] = {}
        for scope in self.methods():
            found.setdefault(scope.node.name, scope)  # type: ignore[attr-defined]  # a FUNCTION scope's node is a def
        return found

    @property
    def attribute_assignments(self) -> dict[str, list[AttributeAssignment]]:
        """Every `self.<attr>` written by this class's own methods (and closures inside them)."""
        return self._scan[0]

    @property
    def added_modules(self) -> list[AddedModule]:
        """Submodules this class's methods register under a computed or literal name."""
        return self._scan[1]

    @property
    def container_growth(self) -> dict[str, list[ContainerGrowth]]:
        """What this class's methods add to its container attributes (`self.blocks.append(m)`),
        by attribute; `""` for what they add to `self` itself (a ModuleList subclass)."""
        return self._scan[2]

    @cached_property
    def _scan(self) -> tuple[dict[str, list[AttributeAssignment]], list[AddedModule], dict[str, list[ContainerGrowth]]]:
        """One walk over the methods: attribute assignments, registered modules, container growth.
        Names, constants and other leaves are never looked at, so the walk leaves them out."""
        found: dict[str, list[AttributeAssignment]] = {}
        added: list[AddedModule] = []
        growth: dict[str, list[ContainerGrowth]] = {}
        for method in self.methods():
            receiver = method.first_parameter()
            if receiver is None or _is_static(method.node):
                continue
            for node in walk_branches(method.node):
                if isinstance(node, ast.Call):
                    _note_call(node, receiver, method, added, growth)
                    continue
                if not isinstance(node, ast.stmt):
                    continue
                for target, value, augmented, unpack in _assignment_targets(node):
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == receiver:
                        assignment = AttributeAssignment(target.attr, node, value, method, augmented, unpack)
                        found.setdefault(target.attr, []).append(assignment)
                        if augmented and value is not None and isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
                            growth.setdefault(target.attr, []).append(ContainerGrowth(value, method, True))  # `self.blocks += [...]`
                    elif isinstance(target, ast.Subscript) and not isinstance(target.slice, ast.Slice) and value is not None and not augmented:
                        attribute = _self_attribute(target.value, receiver)
                        if attribute is not None:  # `self.heads[key] = m`
                            growth.setdefault(attribute, []).append(ContainerGrowth(value, method, False))
        return found, added, growth

    @cached_property
    def class_level_annotations(self) -> dict[str, ast.expr]:
        """`block: Block` in the class body (dataclass style and typed modules)."""
        return {name: annotation for name, annotation, _ in self.annotated_fields}

    @cached_property
    def class_level_defaults(self) -> dict[str, ast.expr]:
        """`norm_layer: str = 'layernorm'`: the default of an annotated field (a dataclass's)."""
        return {name: value for name, _, value in self.annotated_fields if value is not None}

    @cached_property
    def annotated_fields(self) -> list[tuple[str, ast.expr, ast.expr | None]]:
        """(name, annotation, default) of each `name: T [= default]` in the class body."""
        return [
            (s.target.id, s.annotation, s.value)
            for s in self.node.body
            if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
        ]


def _is_static(node: ast.AST) -> bool:
    """Static and class methods (also implicit ones like `__init_subclass__`) have no instance."""
    if getattr(node, "name", "") in ("__init_subclass__", "__new__", "__class_getitem__"):
        return True
    decorators = getattr(node, "decorator_list", [])
    return any(isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod") for d in decorators)


def _self_attribute(expr: ast.expr, receiver: str) -> str | None:
    """`attr` when `expr` is `self.attr`."""
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == receiver:
        return expr.attr
    return None


def _note_call(call: ast.Call, receiver: str, method: Scope, added: list[AddedModule], growth: dict[str, list[ContainerGrowth]]) -> None:
    """Record a call that registers a submodule on `self` or grows a container attribute of it."""
    func = call.func
    args = call.args
    if _adds_unpacked_pair(func, args, receiver):  # `self.add_module(*stage)` with `stage = (name, module)`
        pair = args[0].value  # type: ignore[attr-defined]  # checked: one starred argument
        name, module = (ast.copy_location(ast.Subscript(pair, ast.Constant(i), ast.Load()), pair) for i in (0, 1))
        added.append(AddedModule(name, module, method))
        return
    if any(isinstance(a, ast.Starred) for a in args):
        return
    if isinstance(func, ast.Name) and func.id == "setattr" and len(args) == 3:
        if isinstance(args[0], ast.Name) and args[0].id == receiver:
            added.append(AddedModule(args[1], args[2], method))
        return
    if not isinstance(func, ast.Attribute):
        return
    if isinstance(func.value, ast.Name) and func.value.id == receiver:
        if func.attr in MODULE_ADDERS and len(args) == 2:
            added.append(AddedModule(args[0], args[1], method))
        elif func.attr in ELEMENT_ADDERS and len(args) > ELEMENT_ADDERS[func.attr]:  # a ModuleList subclass's `self.append(m)`
            growth.setdefault("", []).append(ContainerGrowth(args[ELEMENT_ADDERS[func.attr]], method, False))
        elif func.attr in COLLECTION_ADDERS and args:
            growth.setdefault("", []).append(ContainerGrowth(args[0], method, True))
        return
    attribute = _self_attribute(func.value, receiver)
    if attribute is None:
        return
    position = ELEMENT_ADDERS.get(func.attr)
    if position is not None and len(args) > position:
        growth.setdefault(attribute, []).append(ContainerGrowth(args[position], method, False))
    elif func.attr in COLLECTION_ADDERS and args:
        growth.setdefault(attribute, []).append(ContainerGrowth(args[0], method, True))


def _adds_unpacked_pair(func: ast.expr, args: list[ast.expr], receiver: str) -> bool:
    return (
        isinstance(func, ast.Attribute)
        and func.attr in MODULE_ADDERS
        and isinstance(func.value, ast.Name)
        and func.value.id == receiver
        and len(args) == 1
        and isinstance(args[0], ast.Starred)
    )


def _assignment_targets(node: ast.AST) -> Iterator[tuple[ast.expr, ast.expr | None, bool, int | None]]:
    """(target, value, augmented, position when unpacking) for an assignment statement."""
    if isinstance(node, ast.Assign):
        for target in node.targets:
            if isinstance(target, (ast.Tuple, ast.List)):
                value = node.value
                literal = isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
                for index, element in enumerate(target.elts):
                    if literal:
                        yield element, value.elts[index], False, None  # type: ignore[attr-defined]  # `literal` checked the type
                    else:
                        yield element, node.value, False, index
            else:
                yield target, node.value, False, None
    elif isinstance(node, ast.AnnAssign):
        yield node.target, node.value, False, None
    elif isinstance(node, ast.AugAssign):
        yield node.target, node.value, True, None


class ClassIndex:
    """ClassInfo by node and by qualified name, and inheritance through the project."""

    def __init__(self, project: Project):
        self.project = project
        self._infos: dict[int, ClassInfo] = {}
        self._ancestors: dict[int, list[ClassInfo | str]] = {}  # by id of the class scope

    def info(self, module: ModuleSymbols, scope: Scope) -> ClassInfo:
        info = self._infos.get(id(scope))
        if info is None:
            info = self._infos[id(scope)] = ClassInfo(module, scope)
        return info

    def enclosing_class(self, module: ModuleSymbols, scope: Scope) -> ClassInfo | None:
        """The class of `self` in a method (or in a closure nested inside one)."""
        current: Scope | None = scope
        while current is not None:
            owner = current.enclosing_class
            if owner is not None:
                return self.info(module, owner)
            current = current.parent
        return None

    def by_name(self, qualified_name: str) -> ClassInfo | None:
        found = self.project.global_binding(qualified_name)
        if found is None:
            return self._nested(qualified_name)
        module, binding = found
        if binding.kind != CLASSDEF:
            return None
        scope = module.scope_of.get(id(binding.node))
        return None if scope is None else self.info(module, scope)

    def _nested(self, qualified_name: str) -> ClassInfo | None:
        """A class defined inside a function or a class (`mod.build.Block`, `mod.Outer.Inner`)."""
        found = self.project.split_module(qualified_name)
        if found is None or len(found[1]) < 2:
            return None
        module, parts = found
        scope: Scope | None = module.scope
        binding = None
        for part in parts:
            if part == "<locals>":
                continue
            bindings = scope.bindings.get(part) if scope is not None else None
            binding = next((b for b in reversed(bindings or ()) if b.kind in (CLASSDEF, DEF)), None)
            if binding is None:
                return None
            scope = module.scope_of.get(id(binding.node))
        if binding is None or binding.kind != CLASSDEF or scope is None:
            return None
        return self.info(module, scope)

    def base_names(self, info: ClassInfo) -> list[str]:
        names = []
        for base in info.node.bases:
            name = info.module.qualified_name(base, info.scope.parent)  # type: ignore[arg-type]  # a class scope always has a parent
            if name is not None:
                names.append(self.project.canonical_name(name))
        return names

    def ancestors(self, info: ClassInfo) -> Iterator[ClassInfo | str]:
        """The class's bases, transitively: project classes as ClassInfo, others by name."""
        found = self._ancestors.get(id(info.scope))
        if found is None:
            found = self._ancestors[id(info.scope)] = list(self._walk_ancestors(info))
        return iter(found)

    def _walk_ancestors(self, info: ClassInfo) -> Iterator[ClassInfo | str]:
        seen: set[str] = set()
        queue: list[ClassInfo] = [info]
        while queue:
            current = queue.pop(0)
            for name in self.base_names(current):
                if name in seen:
                    continue
                seen.add(name)
                base = self.by_name(name)
                if base is None:
                    yield name
                else:
                    yield base
                    queue.append(base)

    def inherits_from(self, info: ClassInfo, names: frozenset[str]) -> bool:
        for ancestor in self.ancestors(info):
            name = ancestor if isinstance(ancestor, str) else ancestor.qualified_name
            if name in names:
                return True
        return False

    def mro(self, info: ClassInfo) -> Iterator[ClassInfo]:
        """The class itself, then its project bases (breadth first)."""
        yield info
        for ancestor in self.ancestors(info):
            if isinstance(ancestor, ClassInfo):
                yield ancestor

    def find_method(self, info: ClassInfo, name: str) -> tuple[ClassInfo, Scope] | None:
        """The class in the project MRO that defines `name`, and the method."""
        for cls in self.mro(info):
            scope = cls.method(name)
            if scope is not None:
                return cls, scope
        return None

    def attribute_assignments(self, info: ClassInfo, attribute: str) -> list[AttributeAssignment]:
        found: list[AttributeAssignment] = []
        for cls in self.mro(info):
            found.extend(cls.attribute_assignments.get(attribute, ()))
        return found
