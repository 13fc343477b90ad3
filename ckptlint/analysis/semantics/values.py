"""Abstract values: where an object comes from, what it is, and whether branching on it is stable.

The region analysis does not know values, only *origins*: an object created inside the
region (`local`) may be mutated freely; one that outlives the region (an `input` of the
checkpoint call, `outer` state such as `self.<attr>` or a closure variable, a module-level
`global`) may not. Types are what `self.block` or `layer` is (a class, a container of
modules, a function), enough to follow calls into project code.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from typing import Iterable, TypeAlias, Union

from ckptlint.analysis.knowledge import torch_api

LOCAL = "local"  # created inside the region
INPUT = "input"  # passed into the region by the checkpoint call
OUTER = "outer"  # reachable state that outlives the region (self, closures, defaults)
CONST = "const"  # modules, functions, classes, literals: nothing to mutate
GLOBAL = "global:"  # prefix: a module-level object, by name



@dataclass(frozen=True, order=True)
class Volatility:
    """Why a branch on a value may go the other way in the replay.

    `state` names the mutable attribute or global it reads, when that is the reason: a
    region that writes that state itself before reading it replays the same read.
    """

    text: str
    state: tuple[str, str] | None = None


GRAD_MODE = Volatility("grad-mode")  # torch.is_grad_enabled(): only a hazard under reentrant checkpoint
# fairscale's `is_checkpointing()` / `is_recomputing()`: true in one pass and false in the other,
# by design; code that tests them is checkpoint-aware (push in the forward, pop in the replay)
CHECKPOINT_PHASE = Volatility("checkpoint-phase")


@dataclass(frozen=True)
class ClassType:
    """An instance of a class, by canonical qualified name."""

    name: str
    running_stats: bool = False  # a torch norm module that updates running statistics in training
    # what this instance's constructor call passed to the `__init__` parameters its attributes are
    # built from (`Wrapper(inner=Block())`), each as the types in `ordered` order
    arguments: tuple[tuple[str, tuple[Type, ...]], ...] = ()
    # constructor arguments that choose what the instance builds (literals, config dicts, classes)
    config: tuple[tuple[str, Types], ...] = ()
    built_by: str = ""  # the builder or registry whose unknown key over-approximated this class

    @property
    def short(self) -> str:
        return self.name.rpartition(".")[2]


@dataclass(frozen=True)
class ClassObjectType:
    """A class itself (`block_fn=Bottleneck`, `partial(Block, dim=8)`): calling it makes an instance."""

    name: str
    built_by: str = ""  # the builder or registry whose unknown key over-approximated this class


@dataclass(frozen=True)
class LiteralType:
    """A string constant (`'BN'`, `norm_layer='layernorm'`): a registry key or a config value;
    `number`: an int or float constant, kept as its text for the names built from it (`'bn' + str(1)`)
    and for the tests that compare it (`if self.drop > 0.`)."""

    value: str
    number: bool = False


@dataclass(frozen=True)
class KeyedType:
    """A dict with string keys (`dict(type='BN')`, `{'BN': nn.BatchNorm2d}`): the types per key.
    Not `complete` when the function that built it then changes it in place (`args['num_experts'] =
    n` under a branch): a key it lacks may be there, and a value it holds may have been replaced."""

    items: tuple[tuple[str, Types], ...]
    complete: bool = True

    def get(self, key: str) -> Types:
        for name, types in self.items:
            if name == key:
                return types
        return frozenset()


@dataclass(frozen=True)
class ContainerType:
    """A list, tuple, dict or module container, with the types of its elements."""

    kind: str  # torch_api.SEQUENTIAL / SEQUENCE / MAPPING
    elements: Types = frozenset()


@dataclass(frozen=True)
class TupleType:
    """A tuple with known positions: `return nn.Sequential(*stages), feature_info`."""

    positions: tuple[Types, ...]


@dataclass(frozen=True)
class RngType:
    """A generator object: `random.Random(...)`, `np.random.default_rng(...)`."""

    library: str  # "python" or "numpy"
    seeded: bool  # created with an explicit seed (replays draw the same numbers)


@dataclass(frozen=True)
class FunctionType:
    """A function or lambda that can be called, maybe bound to a receiver or partial arguments."""

    key: int  # id() of the defining node
    name: str
    receiver: Value | None = None  # `self` for bound methods
    bound: tuple[tuple[str, Value], ...] = ()  # partial(...) arguments and closure variables
    defined_in_region: bool = False  # a nested def or lambda created while the region runs
    node: ast.AST = field(default=None, compare=False, hash=False, repr=False)  # type: ignore[assignment]  # always given; a default only because it follows defaulted fields
    module: object = field(default=None, compare=False, hash=False, repr=False)


Type: TypeAlias = Union[ClassType, ClassObjectType, ContainerType, TupleType, RngType, FunctionType, LiteralType, KeyedType]
Types: TypeAlias = "frozenset[Type]"  # what a name may hold: a union of abstract types


@dataclass(frozen=True)
class Value:
    origins: frozenset[str] = frozenset({LOCAL})
    types: Types = frozenset()
    volatile: frozenset[Volatility] = frozenset()  # why a branch on this value may differ on replay
    path: str = ""  # how the code names it, for messages
    attribute: tuple[str, str] | None = None  # (class name, attribute) for `self.<attribute>`

    @property
    def outlives_region(self) -> bool:
        return any(origin in (INPUT, OUTER) or origin.startswith(GLOBAL) for origin in self.origins)

    @property
    def global_names(self) -> list[str]:
        return sorted(origin[len(GLOBAL) :] for origin in self.origins if origin.startswith(GLOBAL))

    def renamed(self, path: str) -> Value:
        return replace(self, path=path)

    def with_types(self, types: Iterable[Type]) -> Value:
        return replace(self, types=frozenset(types))


LOCAL_VALUE = Value()
CONST_VALUE = Value(frozenset({CONST}))
INPUT_VALUE = Value(frozenset({INPUT}))


def merge(values: Iterable[Value]) -> Value:
    """The value of a name that may hold any of `values` (after an if/else, in a loop)."""
    values = list(values)
    if not values:
        return LOCAL_VALUE
    if len(values) == 1:
        return values[0]
    first = values[0]
    attributes = {v.attribute for v in values}
    return Value(
        origins=frozenset().union(*(v.origins for v in values)),
        types=frozenset().union(*(v.types for v in values)),
        volatile=frozenset().union(*(v.volatile for v in values)),
        path=first.path if all(v.path == first.path for v in values) else first.path or values[-1].path,
        attribute=first.attribute if len(attributes) == 1 else None,
    )


def element_types(types: Iterable[Type]) -> Types:
    """What indexing or iterating over values of these types gives."""
    found: set[Type] = set()
    for item in types:
        if isinstance(item, ContainerType):
            found.update(item.elements)
        elif isinstance(item, TupleType):
            for position in item.positions:
                found.update(position)
    return frozenset(found)


def unpacked_types(types: Iterable[Type], index: int) -> Types:
    """What position `index` of `a, b = value` gets."""
    found: set[Type] = set()
    # a tuple display is typed as its positions and as a sequence of all of them (for indexing
    # and iteration): unpacking takes the positions, not that sequence
    shadows = {frozenset().union(*item.positions) for item in types if isinstance(item, TupleType)}
    for item in types:
        if isinstance(item, TupleType):
            if index < len(item.positions):
                found.update(item.positions[index])
        elif isinstance(item, ContainerType) and item.elements not in shadows:
            found.update(item.elements)
    return frozenset(found)


def ordered(types: Iterable[Type]) -> list[Type]:
    """Types in a stable order: sets iterate by hash, which differs between processes, and
    the first region path found is the one a message names."""
    return sorted(types, key=_stable_key)


def _stable_key(item: object) -> tuple[object, ...]:
    node = getattr(item, "node", None)
    module = getattr(item, "module", None)
    source = getattr(module, "source", None)
    where = (getattr(source, "path", ""), getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
    return (type(item).__name__, getattr(item, "name", ""), where, getattr(item, "kind", ""), repr(item) if node is None else "")


SAME_DEVICE = ClassType("<device of a tensor in the region>")
NONE_TYPE = ClassType("builtins.NoneType")
# the constants False and True (pseudo-classes, never a project class): a flag's value when known
FALSE_TYPE = ClassType("builtins.bool.False")
TRUE_TYPE = ClassType("builtins.bool.True")


def number_of(item: Type) -> float | None:
    """The number an int or float constant's type holds; None for any other type."""
    if not (isinstance(item, LiteralType) and item.number):
        return None
    try:
        return float(item.value)
    except ValueError:
        return None


def _falsy(item: Type) -> bool:
    """A value that is always false: None, False, `''`, `0`, `0.`."""
    if isinstance(item, LiteralType):
        return number_of(item) == 0 if item.number else item.value == ""
    return item in (NONE_TYPE, FALSE_TYPE)


def _truthy(item: Type) -> bool:
    """A value that is always true: a class, a function, True, a non-empty string or non-zero int."""
    return isinstance(item, (ClassObjectType, FunctionType)) or item == TRUE_TYPE or (isinstance(item, LiteralType) and not _falsy(item))


def short_circuit(is_or: bool, operands: list[Types]) -> Types:
    """What `a or b` (`a and b`) can give: an operand before the last gives its value only when
    that value ends the chain, truthy for `or`, falsy for `and` (`se_layer or SqueezeExcite` with
    `se_layer=None` is SqueezeExcite alone, never None)."""
    found: set[Type] = set()
    passes_on = _falsy if is_or else _truthy
    for types in operands[:-1]:
        found.update(t for t in types if not passes_on(t))
    if operands:
        found.update(operands[-1])
    return frozenset(found)


def constructed_rng(name: str, call: ast.Call) -> RngType | None:
    """`random.Random(0)`, `np.random.default_rng()`: a generator object (seeded when given arguments)."""
    seeded = bool(call.args or call.keywords)
    if name in torch_api.PYTHON_RNG_CLASSES:
        return RngType("python", seeded)
    if name.startswith("numpy.random.") and torch_api.short_name(name) in torch_api.NUMPY_RNG_CONSTRUCTORS:
        return RngType("numpy", seeded)
    return None
