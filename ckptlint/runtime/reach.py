"""What a region can touch: modules, tensors, containers, objects, closure cells, generator
objects and globals reachable from it.

Starting from the checkpointed callable and its arguments, follow partials, bound methods,
closure cells, the globals its code names (recursively into nested code and into the
project functions and module classes it reaches), `nn.Module` trees and the Python
containers and objects hanging off them. A `torch.autograd.Function` subclass the region
calls (`MyFn.apply`, an alias `f = MyFn.apply`, or `ops.MyFn.apply` through a project
module, whose attributes the code spells are followed) is followed into its `forward`,
`setup_context` and `backward` (static methods, as a class's are) and its class attributes:
its forward reruns at recompute, and each replay runs its backward. Library code (torch,
the standard library, site-packages) is not followed into its globals (nor a library
Function's class attributes): the region cannot change their state in a way a replay would
notice, and following them would snapshot half the interpreter. What a
library closure captured is the caller's data, though (`checkpoint_sequential` checkpoints
a torch closure over the user's layers), so closure cells and defaults are followed for
every function. Closure cells are recorded themselves, not only what they hold: a
`nonlocal` counter rebinds the cell, and the snapshot must put the old value back.
Generator objects (NumPy, `random.Random`, `torch.Generator`) are recorded as streams,
whose state only their own API can read. Each tensor also records how it reaches the region
(`HOW`): reentrant checkpoint tracks only top-level positional tensors, so a tensor that needs
grad and arrives any other way loses its gradient (CKP302).
"""

from __future__ import annotations

import collections
import functools
import os
import sys
import sysconfig
import types
from dataclasses import dataclass, field
from typing import Any, Iterable

import torch

from ckptlint.runtime.streams import generator_kind

_LIBRARY_DIRS = tuple(
    {os.path.dirname(torch.__file__), sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"]}
)
_CONTAINERS = (list, dict, set, collections.deque, collections.OrderedDict, collections.defaultdict)
MAX_OBJECTS = 50_000
# how a tensor reaches the region: the first hop from the call decides
POSITIONAL = "positional"  # a top-level positional argument: the only kind reentrant checkpoint tracks
POSITIONAL_CONTAINER = "positional-container"  # inside a list, tuple or dict passed positionally
KEYWORD = "keyword"
CLOSURE = "closure"
PARTIAL = "partial"  # a `functools.partial` argument
GLOBAL = "global"  # a module-level name the region's code reads
DEFAULT = "default"  # a default argument value
ATTRIBUTE = "attribute"  # on the object whose method or `forward` is the region
HOW = (POSITIONAL, POSITIONAL_CONTAINER, KEYWORD, CLOSURE, PARTIAL, GLOBAL, DEFAULT, ATTRIBUTE)
_REGION = "region"  # the callable itself, before any hop
_MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))  # hooks, _parameters, training, ...


def is_library_file(filename: str) -> bool:
    return filename.startswith(_LIBRARY_DIRS) or filename.startswith("<")


@dataclass
class Reachable:
    modules: dict[int, torch.nn.Module] = field(default_factory=dict)
    tensors: dict[int, tuple[str, torch.Tensor]] = field(default_factory=dict)  # id -> (name, tensor)
    containers: dict[int, tuple[str, Any]] = field(default_factory=dict)
    objects: dict[int, tuple[str, Any]] = field(default_factory=dict)  # plain objects whose __dict__ can change
    globals: dict[tuple[int, str], tuple[dict[str, Any], str]] = field(default_factory=dict)  # (id(globals), name)
    cells: dict[int, tuple[str, types.CellType]] = field(default_factory=dict)  # closure cells, by the variable's name
    generators: dict[int, tuple[str, Any]] = field(default_factory=dict)  # RNG objects: NumPy, random.Random, torch
    how: dict[int, str] = field(default_factory=dict)  # id(tensor) -> how it reaches the region (HOW)
    module_tensors: set[int] = field(default_factory=set)  # ids of parameters and buffers registered on modules

    def parameters(self) -> list[tuple[str, torch.Tensor]]:
        return [(name, t) for name, t in self.tensors.values() if t.is_leaf and t.requires_grad]


def reachable(fn: Any, args: Iterable[Any], kwargs: dict[str, Any]) -> Reachable:
    """Everything the region could read or change that outlives it (inputs' tensors excluded)."""
    found = Reachable()
    walker = _Walker(found)
    walker.visit(fn, "region", _REGION)
    for index, value in enumerate(args):
        if not isinstance(value, torch.Tensor):
            walker.visit(value, f"args[{index}]", POSITIONAL_CONTAINER)
    for key, value in kwargs.items():
        if not isinstance(value, torch.Tensor):
            walker.visit(value, f"kwargs[{key!r}]", KEYWORD)
    walker.run()
    return found


class _Walker:
    def __init__(self, found: Reachable):
        self.found = found
        self.seen: set[int] = set()
        self.queue: collections.deque[tuple[Any, str, str]] = collections.deque()

    def visit(self, value: Any, name: str, how: str) -> None:
        self.queue.append((value, name, how))

    def run(self) -> None:
        while self.queue and len(self.seen) < MAX_OBJECTS:
            value, name, how = self.queue.popleft()
            if id(value) in self.seen or value is None or isinstance(value, (str, bytes, int, float, bool, complex)):
                continue
            self.seen.add(id(value))
            self._expand(value, name, how)

    def _expand(self, value: Any, name: str, how: str) -> None:
        found = self.found
        if isinstance(value, torch.Tensor):
            found.tensors.setdefault(id(value), (name, value))
            found.how.setdefault(id(value), _first_hop(how, ATTRIBUTE))
            return
        if isinstance(value, torch.nn.Module):
            self._module(value, name, how)
            return
        if generator_kind(value) is not None:
            found.generators.setdefault(id(value), (name, value))
            return
        if isinstance(value, functools.partial):
            self.visit(value.func, name, how)
            for index, argument in enumerate(value.args):
                self.visit(argument, f"{name}.args[{index}]", _first_hop(how, PARTIAL))
            for key, argument in value.keywords.items():
                self.visit(argument, f"{name}.{key}", _first_hop(how, PARTIAL))
            return
        if isinstance(value, types.MethodType):
            self.visit(value.__self__, name.rpartition(".")[0] or "self", how)
            self.visit(value.__func__, name, how)
            return
        if isinstance(value, types.FunctionType):
            self._function(value, name, how)
            return
        how = _first_hop(how, ATTRIBUTE)  # anything else the region is, or holds, is its state
        if isinstance(value, _CONTAINERS):
            found.containers.setdefault(id(value), (name, value))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, element in list(items)[:1000]:
                self.visit(element, f"{name}[{key!r}]", how)
            return
        if isinstance(value, tuple):
            for index, element in enumerate(value):
                self.visit(element, f"{name}[{index}]", how)
            return
        if isinstance(value, type) and issubclass(value, torch.autograd.Function):
            self._autograd_function(value, how)
            return
        if isinstance(value, (types.ModuleType, type, types.BuiltinFunctionType, torch.dtype, torch.device)):
            return
        if type(value).__module__.startswith(("torch", "builtins", "numpy")):
            return
        attributes = getattr(value, "__dict__", None)
        if isinstance(attributes, dict):
            found.objects.setdefault(id(value), (name, value))
            for key, element in attributes.items():
                self.visit(element, f"{name}.{key}", how)
        call = getattr(type(value), "__call__", None)
        if isinstance(call, types.FunctionType):
            self.visit(call, f"{name}.__call__", how)

    def _module(self, module: torch.nn.Module, name: str, how: str) -> None:
        """`how` reaches the module's methods as it reached the module (a global a region
        module's `forward` reads is reached as a global); what the module holds, as attributes."""
        found = self.found
        held = _first_hop(how, ATTRIBUTE)
        for sub_name, sub in module.named_modules(prefix=name):
            if id(sub) in found.modules:
                continue
            found.modules[id(sub)] = sub
            self.seen.add(id(sub))
            for tensor_name, tensor in [*sub.named_parameters(sub_name, recurse=False), *sub.named_buffers(sub_name, recurse=False)]:
                found.tensors.setdefault(id(tensor), (tensor_name, tensor))
                found.how.setdefault(id(tensor), held)
                found.module_tensors.add(id(tensor))
            found.objects.setdefault(id(sub), (sub_name, sub))
            for key, element in vars(sub).items():
                if key in _MODULE_INTERNALS:
                    continue
                if not isinstance(element, (torch.nn.Module, torch.Tensor)):
                    self.visit(element, f"{sub_name}.{key}", held)
            for function in _methods(type(sub)):
                self._function(function, f"{type(sub).__name__}.{function.__name__}", how)

    def _function(self, function: types.FunctionType, name: str, how: str) -> None:
        code = function.__code__
        for cell, free in zip(function.__closure__ or (), code.co_freevars):
            if free == "__class__":  # zero-argument super(); the compiler's, never rebound
                continue
            cell_name = self.found.cells[id(cell)][0] if id(cell) in self.found.cells else self._cell_name(free, function)
            self.found.cells[id(cell)] = (cell_name, cell)
            try:
                self.visit(cell.cell_contents, cell_name, _first_hop(how, CLOSURE))
            except ValueError:  # an empty cell
                continue
        for default in (function.__defaults__ or ()):
            self.visit(default, f"{name} default", _first_hop(how, DEFAULT))
        for key, default in (function.__kwdefaults__ or {}).items():
            self.visit(default, f"{name} default {key}", _first_hop(how, DEFAULT))
        if is_library_file(code.co_filename):
            return
        namespace = function.__globals__
        names = _names(code)
        for global_name in names:
            if global_name in namespace:
                value = namespace[global_name]
                self.found.globals.setdefault((id(namespace), global_name), (namespace, global_name))
                self.visit(value, global_name, _first_hop(how, GLOBAL))
                if isinstance(value, types.ModuleType):
                    self._module_attributes(value, names, global_name, _first_hop(how, GLOBAL))

    def _module_attributes(self, module: types.ModuleType, names: set[str], prefix: str, how: str) -> None:
        """A project module the code names (`ops.MyFn.apply`, `pkg.ops.LOG`): the attributes
        the code spells are followed, and kept as that module's globals (a rebinding is state).
        A library module's are not (see the module docstring)."""
        if is_library_file(getattr(module, "__file__", None) or "<"):
            return
        namespace = vars(module)
        for attribute in names:
            if attribute not in namespace or (id(namespace), attribute) in self.found.globals:
                continue
            value = namespace[attribute]
            self.found.globals[(id(namespace), attribute)] = (namespace, attribute)
            self.visit(value, f"{prefix}.{attribute}", how)
            if isinstance(value, types.ModuleType):
                self._module_attributes(value, names, f"{prefix}.{attribute}", how)

    def _autograd_function(self, cls: type, how: str) -> None:
        """A project `torch.autograd.Function` the region calls (`MyFn.apply`, or an alias
        `f = MyFn.apply`, whose `__self__` is the class): `forward`, `setup_context` and
        `backward` run as part of the region and its replays' backward passes, so what they
        reach is the region's; the class's own attributes (a counter, a cache) are state too."""
        for klass in _own_classes(cls):
            if _is_library_class(klass):  # a library's class attributes are its own state
                continue
            self.found.objects.setdefault(id(klass), (klass.__qualname__, klass))
            for key, value in vars(klass).items():
                if not key.startswith("__") and _function_of(value) is None:
                    self.visit(value, f"{klass.__qualname__}.{key}", _first_hop(how, ATTRIBUTE))
        for function in _methods(cls):
            self._function(function, f"{cls.__qualname__}.{function.__name__}", how)

    def _cell_name(self, free: str, function: types.FunctionType) -> str:
        """The variable's name (`counter`), qualified by its function when two cells share it."""
        taken = {name for name, _ in self.found.cells.values()}
        return free if free not in taken else f"{function.__qualname__}.{free}"


def _first_hop(how: str, step: str) -> str:
    """The first hop away from the region's callable names how a tensor reaches it."""
    return step if how == _REGION else how


def _names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _names(constant)
    return names


def _own_classes(cls: type) -> Iterable[type]:
    """The classes of `cls`'s MRO that are not torch's or `object`."""
    return (klass for klass in cls.__mro__ if not klass.__module__.startswith("torch") and klass is not object)


def _is_library_class(cls: type) -> bool:
    module_file = getattr(sys.modules.get(cls.__module__), "__file__", None)
    return isinstance(module_file, str) and is_library_file(module_file)


def _function_of(value: Any) -> types.FunctionType | None:
    """The function a class attribute defines: itself, or what a `staticmethod` (an
    autograd.Function's `forward` and `backward`) or `classmethod` wraps."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    return value if isinstance(value, types.FunctionType) else None


def _methods(cls: type) -> Iterable[types.FunctionType]:
    for klass in _own_classes(cls):
        for value in vars(klass).values():
            function = _function_of(value)
            if function is not None:
                yield function
