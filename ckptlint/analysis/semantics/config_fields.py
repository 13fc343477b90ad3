"""Name fields of configuration dataclasses: `norm_layer: Optional[str] = 'layernorm'`.

Model zoos keep the name of a layer in a config dataclass and look it up in a table
(`get_norm_layer(cfg.norm_layer)`). Without the field's value the key is unknown and every
norm in the table is assumed, which the real-model corpus showed is wrong for the default
(docs/accuracy.md). A field with no `__init__` of its own in the class holds its class-level
default or what the module's constructor calls pass by keyword; when each of those is a
string or None, the field's value is known: a string is that key, None is never a key
(`registries.NO_KEY`). Any other value (a variable, a positional argument) leaves the field
unknown, as before.
"""

from __future__ import annotations

import ast
from typing import Callable

from ckptlint.analysis.semantics.registries import NO_KEY
from ckptlint.analysis.semantics.values import LiteralType, Types
from ckptlint.classes import ClassInfo
from ckptlint.symbols import ModuleSymbols, Scope

EMPTY: Types = frozenset()


def constant_key(value: ast.expr | None) -> Types | None:
    """A string constant as its key, None as no key; anything else is not known."""
    if isinstance(value, ast.Constant):
        if isinstance(value.value, str):
            return frozenset({LiteralType(value.value)})
        if value.value is None:
            return NO_KEY
    return None


def field_keys(
    info: ClassInfo, attribute: str, has_init: bool, called_name: Callable[[ast.expr, ModuleSymbols, Scope], str | None]
) -> Types:
    """The keys a name field can hold, or nothing when one of its values is not a constant."""
    if has_init:
        return EMPTY
    default = info.class_level_defaults.get(attribute)
    if default is None:
        return EMPTY
    found = constant_key(default)
    if found is None:
        return EMPTY
    keys = set(found)
    module = info.module
    for call, scope in module.calls:
        if not isinstance(call.func, (ast.Name, ast.Attribute)) or called_name(call.func, module, scope) != info.qualified_name:
            continue
        if call.args or any(k.arg is None for k in call.keywords):
            return EMPTY  # passed positionally or through **kwargs: not known
        for keyword in call.keywords:
            if keyword.arg == attribute:
                passed = constant_key(keyword.value)
                if passed is None:
                    return EMPTY
                keys.update(passed)
    return frozenset(keys)

