"""How model zoos choose the class they build: literal keys, config dicts, registries.

`build_norm_layer(dict(type='GN'), c)` looks `'GN'` up in `{'BN': nn.BatchNorm2d, ...}`;
`MODELS.build(dict(type='Block'))` looks it up among the classes decorated with
`@MODELS.register_module()`; `getattr(nn, 'LayerNorm')` names a class by a string. With a
literal key the lookup gives exactly that class (a literal `'GN'` is never BatchNorm);
with an unknown key it gives every class the mapping holds, marked with the builder that
over-approximated (`built_by`) so a finding can say so. Inference (evaluator.py, zoo.py) asks
these questions; this module only knows the shapes.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Callable, Iterable, Sequence

from ckptlint.analysis.knowledge import torch_api
from ckptlint.analysis.semantics.values import (
    FALSE_TYPE,
    NONE_TYPE,
    TRUE_TYPE,
    ClassObjectType,
    ClassType,
    ContainerType,
    FunctionType,
    KeyedType,
    LiteralType,
    Type,
    Types,
    element_types,
    number_of,
    ordered,
)
from ckptlint.symbols import ModuleSymbols, Scope

MAX_LITERAL = 64  # longer strings are text, not keys
# what a dict-like config does with a method: `cfg.get('type')`, `cfg.pop('type')`, `cfg.copy()`
KEYED_METHODS = frozenset({"get", "pop", "copy", "setdefault"})
# string methods a key goes through on its way to a lookup (`name.lower()`)
LITERAL_METHODS: dict[str, Callable[[str], str]] = {"lower": str.lower, "upper": str.upper, "strip": str.strip, "casefold": str.casefold}
# how a registry object is asked for a class: `MODELS.build(cfg)`, `MODELS.get('name')`
REGISTRY_METHODS = frozenset({"build", "get", "get_module", "build_from_cfg"})
REGISTER_METHODS = frozenset({"register_module", "register"})
SPLIT_METHODS = frozenset({"split", "rsplit"})  # `name.split('-')[0]`: the parts, as a list
STRING_METHODS = LITERAL_METHODS.keys() | {"replace"} | SPLIT_METHODS
ALL_METHODS = KEYED_METHODS | STRING_METHODS | REGISTRY_METHODS
# the key a string method gives on a value that is never a string (`norm_layer.lower()` where
# `norm_layer` is `nn.LayerNorm`): that branch does not run for the value, so it selects nothing
NO_KEY: Types = frozenset({LiteralType("\0")})
# types a constructor or builder argument can carry that choose what gets built
CHOICE_TYPES = (LiteralType, KeyedType, ClassObjectType)
NONE_ONLY: Types = frozenset({NONE_TYPE})
FLAGS = frozenset({FALSE_TYPE, TRUE_TYPE})  # `inplace=True`: a flag that chooses what the code does
NEVER_TEXT = FLAGS | NONE_ONLY  # values no string method runs on (`attn_type.lower()` under `if attn_type:`)


MAX_TEXTS = 16  # strings a concatenation may give before it is unknown


def literal(value: object) -> Types:
    """A short string constant is a possible key, an int a part of one (`'bn' + str(1)`);
    anything else is neither."""
    if isinstance(value, str) and len(value) <= MAX_LITERAL:
        return frozenset({LiteralType(value)})
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return frozenset({LiteralType(repr(value), number=True)})
    return frozenset()


def keys(types: Types) -> frozenset[str] | None:
    """The strings a key can be, or None when any of its values is unknown (or a number, which
    no string key equals)."""
    if not types or not all(isinstance(t, LiteralType) and not t.number for t in types):
        return None
    return frozenset(t.value for t in types if isinstance(t, LiteralType))


def texts(types: Types) -> frozenset[str] | None:
    """The strings `str(value)` can give, when every value is a known string or int."""
    if not types or not all(isinstance(t, LiteralType) for t in types):
        return None
    return frozenset(t.value for t in types if isinstance(t, LiteralType))


def concatenated(parts: list[Types]) -> Types:
    """`'bn' + str(postfix)`, `f"layer{i}"` on known parts: every string they can make."""
    made = {""}
    for part in parts:
        known = texts(part)
        if known is None:
            return frozenset()
        made = {a + b for a in made for b in known}
        if len(made) > MAX_TEXTS:
            return frozenset()
    return frozenset(LiteralType(text) for text in made if len(text) <= MAX_LITERAL)


def keyed(pairs: Iterable[tuple[str, Types]]) -> KeyedType:
    return KeyedType(tuple(sorted(pairs, key=lambda pair: pair[0])))


def lookup(base: Types, key: Types, builder: str) -> Types:
    """`base[key]`: a known key picks its entry; an unknown one every entry, marked `built_by`."""
    known = keys(key)
    mappings = [t for t in base if isinstance(t, KeyedType)]
    if known is not None and any(not m.complete and any(not m.get(name) for name in known) for m in mappings):
        return frozenset()  # a key a dict changed after it was built may have gained: not known
    if known is not None and mappings:
        found: set[Type] = set()
        for mapping in mappings:
            for name in known:
                found.update(mapping.get(name))
        return frozenset(found)
    everything = element_types(base) | frozenset(t for m in mappings for _, types in m.items for t in types)
    return over_approximated(everything, builder)


def changed_later(types: Types) -> Types:
    """`types` with each dict marked not complete: the function that built it changes it in place."""
    return frozenset(replace(t, complete=False) if isinstance(t, KeyedType) else t for t in types)


def always_holds(base: Types, key: Types) -> bool:
    """Whether every dict `base` may be holds the literal key(s) `key` (`ba.get('num_experts', 0)`
    on block arguments that all name it never gives the default)."""
    known = keys(key)
    mappings = [t for t in base if isinstance(t, KeyedType)]
    # a dict display is typed both by its keys and as a mapping of its values: the mapping adds no key
    others = [t for t in base if not isinstance(t, KeyedType) and not (isinstance(t, ContainerType) and t.kind == torch_api.MAPPING)]
    if not known or not mappings or others or any(not m.complete for m in mappings):
        return False
    return all(all(any(name == k for name, _ in t.items) for k in known) for t in mappings)


def over_approximated(types: Types, builder: str) -> Types:
    """Classes an unknown key could select, each marked with who selected it (when several)."""
    classes = [t for t in types if isinstance(t, (ClassObjectType, ClassType))]
    if len({t.name for t in classes}) < 2 or not builder:
        return types
    return frozenset(replace(t, built_by=t.built_by or builder) if isinstance(t, (ClassObjectType, ClassType)) else t for t in types)


def string_method(types: Types, method: str) -> Types:
    """`name.lower()` on literal keys."""
    transform = LITERAL_METHODS[method]
    return frozenset(LiteralType(transform(t.value)) for t in types if isinstance(t, LiteralType))


def string_method_call(types: Types, method: str, arguments: list[ast.expr], keywords: Sequence[ast.keyword] = ()) -> Types | None:
    """`name.lower()`, `name.replace('_', '')` on literal keys; NO_KEY on a class, a function,
    None or a bool, which are never strings; None when the value may be a string no literal gives."""
    if any(isinstance(t, LiteralType) for t in types):
        if method in SPLIT_METHODS:
            return None if keywords else _split(types, method, arguments)  # `split('-', maxsplit=1)`: not guessed
        if method != "replace":
            return string_method(types, method)
        old_new = [a.value for a in arguments if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if len(old_new) != 2 or len(arguments) != 2:
            return None
        return frozenset(LiteralType(t.value.replace(old_new[0], old_new[1])) for t in types if isinstance(t, LiteralType))
    if types and all(isinstance(t, (ClassObjectType, FunctionType)) or t in NEVER_TEXT for t in types):
        return frozenset({ContainerType(torch_api.SEQUENCE, NO_KEY)}) if method in SPLIT_METHODS else NO_KEY
    return None


def _split(types: Types, method: str, arguments: list[ast.expr]) -> Types | None:
    """`name.split('-')` on literal keys: a list holding every part; None unless the separator
    and the count are constants."""
    constants = [a.value for a in arguments if isinstance(a, ast.Constant)]
    if len(constants) != len(arguments) or len(constants) > 2:
        return None
    separator = constants[0] if constants else None
    count = constants[1] if len(constants) > 1 else -1
    if not (separator is None or isinstance(separator, str) and separator) or not isinstance(count, int):
        return None
    split = str.split if method == "split" else str.rsplit
    parts = frozenset(LiteralType(part) for t in types if isinstance(t, LiteralType) for part in split(t.value, separator, count))
    return frozenset({ContainerType(torch_api.SEQUENCE, parts)})


MAX_CASES = 4  # value combinations a builder call is evaluated for one by one
MAX_DICT_CASES = 32  # kinds of block-argument dict a builder call is evaluated for one by one


def case_split(passed: tuple[tuple[str, Types], ...]) -> list[tuple[tuple[str, Types], ...]]:
    """A builder call's choosing arguments, one combination of their values at a time: a
    builder's branches test one value (`if attn_type: ... attn_type.lower() == 'se'`), so
    `None` or `SqueezeExcite` evaluated together take every branch, and apart take one each.
    Unsplit when there is one combination or more than MAX_CASES. Dicts of block arguments (a
    builder handed each stage's decoded dicts) are split by kind: the dicts that agree on their
    keys and on every value but numbers go together (`dict(block_type='ir', s2d=False,
    out_chs=24)` with `out_chs=40`), up to MAX_DICT_CASES kinds."""
    choices = [(name, _alternatives(types)) for name, types in passed]
    cases = 1
    for _, alternatives in choices:
        cases *= len(alternatives)
    by_kind = any(len(alternatives) > 1 and isinstance(next(iter(alternatives[0])), KeyedType) for _, alternatives in choices)
    if cases == 1 or cases > (MAX_DICT_CASES if by_kind else MAX_CASES):
        return [passed]
    combinations: list[tuple[tuple[str, Types], ...]] = [()]
    for name, alternatives in choices:
        combinations = [(*combination, (name, alternative)) for combination in combinations for alternative in alternatives]
    return combinations


def _alternatives(types: Types) -> list[Types]:
    """The values a choosing argument is evaluated for one at a time: each type, or for dicts
    alone, each kind of dict (numbers merged)."""
    if len(types) > 1 and all(isinstance(t, KeyedType) for t in types):
        kinds: dict[tuple[object, ...], list[KeyedType]] = {}
        for item in ordered(types):
            assert isinstance(item, KeyedType)
            shape = (item.complete, *((key, frozenset(t for t in value if number_of(t) is None)) for key, value in item.items))
            kinds.setdefault(shape, []).append(item)
        return [frozenset({_merged(group)}) for group in kinds.values()]
    return [frozenset({t}) for t in types] or [types]


def _merged(group: list[KeyedType]) -> KeyedType:
    """Dicts with the same keys, as one whose values are each key's values in any of them."""
    if len(group) == 1:
        return group[0]
    merged = keyed((key, frozenset().union(*(item.get(key) for item in group))) for key, _ in group[0].items)
    return merged if group[0].complete else replace(merged, complete=False)  # a group shares its completeness (the shape)


def is_choice(types: Types, passed: bool = False) -> bool:
    """Whether an argument's types can choose what a builder builds; a `None` passed for one
    (`ConvModule(..., norm_cfg=None)`) chooses to build nothing."""
    return any(_chooses(t) for t in types) or (passed and types == NONE_ONLY)


def choices(types: Types) -> Types:
    return frozenset(t for t in types if _chooses(t) or t == NONE_TYPE)


def _chooses(item: Type) -> bool:
    """A literal, config dict, class or flag; or a sequence of classes (`block_fns=(Bottleneck,) * 4`,
    one block class per stage). A float (a rate, a scale, an epsilon) chooses nothing built."""
    if isinstance(item, ContainerType) and item.kind == torch_api.SEQUENCE:
        return any(isinstance(e, (ClassObjectType, KeyedType)) or (isinstance(e, ContainerType) and _chooses(e)) for e in item.elements)
    if isinstance(item, LiteralType) and item.number and not item.value.lstrip("-").isdigit():
        return False
    return isinstance(item, CHOICE_TYPES) or item in FLAGS


def registrations(module: ModuleSymbols) -> list[tuple[ast.expr, Scope, str, ast.ClassDef]]:
    """`@REG.register_module()` classes of a module: (the registry expression, the scope it is
    evaluated in, the key, the class). The key is the decorator's `name=` (or first positional
    string), else the class's own name.
    """
    found: list[tuple[ast.expr, Scope, str, ast.ClassDef]] = []
    for node, scope in module.classes:
        for decorator in node.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            func = call.func if call is not None else decorator
            if not (isinstance(func, ast.Attribute) and func.attr in REGISTER_METHODS):
                continue
            name = node.name
            if call is not None:
                given = next((k.value for k in call.keywords if k.arg in ("name", "module_name")), None)
                if given is None and call.args:
                    given = call.args[0]
                if isinstance(given, ast.Constant) and isinstance(given.value, str):
                    name = given.value
            found.append((func.value, scope, name, node))
    return found


def call_registrations(module: ModuleSymbols) -> list[tuple[ast.expr, str, ast.expr]]:
    """`REG.register_module('BN', module=nn.BatchNorm2d)` statements at module level (mmcv's
    `norm.py`, and every vendored copy of it): (the registry expression, each key, the class
    expression). Keys are the `name=` or first positional string, or a list of them."""
    found: list[tuple[ast.expr, str, ast.expr]] = []
    for node in _module_level_statements(module.tree.body):
        call = node.value if isinstance(node, ast.Expr) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in REGISTER_METHODS):
            continue
        registered = next((k.value for k in call.keywords if k.arg == "module"), None)
        if registered is None:
            continue
        given = next((k.value for k in call.keywords if k.arg in ("name", "module_name")), call.args[0] if call.args else None)
        names = given.elts if isinstance(given, (ast.List, ast.Tuple)) else [given]
        for name in names:
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                found.append((call.func.value, name.value, registered))
    return found


def _module_level_statements(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    """Statements run on import: the module's, and those under its `if`/`try` blocks."""
    for statement in body:
        yield statement
        if isinstance(statement, (ast.If, ast.Try)):
            for block in (statement.body, statement.orelse, *(h.body for h in getattr(statement, "handlers", [])), getattr(statement, "finalbody", [])):
                yield from _module_level_statements(block)


def builder_name(scope_name: str, fallback: str) -> str:
    """Who over-approximated: the function doing the lookup, or the mapping when it is an `__init__`."""
    if not scope_name or scope_name.rpartition(".")[2] in ("__init__", "<module>", "<lambda>"):
        return fallback
    return scope_name
