"""Name fields of configuration dataclasses: `norm_layer: Optional[str] = 'layernorm'`.

Model zoos keep the name of a layer in a config dataclass and look it up in a table
(`get_norm_layer(cfg.norm_layer)`). Without the field's value the key is unknown and every
norm in the table is assumed, which the real-model corpus showed is wrong for the default
(docs/accuracy.md). A field with no `__init__` of its own in the class holds its class-level
default or what the module's constructor calls pass by keyword; when each of those is a
string or None, the field's value is known: a string is that key, None is never a key
(`registries.NO_KEY`). A helper's parameter passed to the field (`_nfnet_cfg(attn_layer='se')`)
gives its default and the constants the module's calls pass; a helper's own `**kwargs`
(`def _radio_vit_cfg(**kwargs): return NaFlexVitCfg(..., **kwargs)`) gives what the module's
calls of the helper pass by the field's name. Any other value (a variable, a positional
argument, a `**` the module's calls fill from elsewhere) leaves the field unknown.
"""

from __future__ import annotations

import ast
from typing import Callable

from ckptlint.analysis.semantics.registries import NO_KEY
from ckptlint.analysis.semantics.values import LiteralType, Type, Types
from ckptlint.classes import ClassInfo
from ckptlint.passed_arguments import keyword_arguments, passed_arguments
from ckptlint.symbols import PARAM, ModuleSymbols, Scope, parameter_default

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
        if call.args:
            return EMPTY  # passed positionally: not known
        for keyword in call.keywords:
            if keyword.arg is None:  # `NaFlexVitCfg(..., **kwargs)`: what the helper's callers put in it
                passed = _forwarded_keys(module, scope, keyword.value, attribute)
            elif keyword.arg == attribute:
                passed = constant_key(keyword.value)
                if passed is None and isinstance(keyword.value, ast.Name):
                    passed = _parameter_keys(module, scope, keyword.value)
            else:
                continue
            if passed is None:
                return EMPTY
            keys.update(passed)
    return frozenset(keys)


def _constant_keys(arguments: list[tuple[ast.expr, Scope]]) -> set[Type] | None:
    """The keys of arguments that are all string constants or None; None when one is not."""
    keys: set[Type] = set()
    for argument, _ in arguments:
        key = constant_key(argument)
        if key is None:
            return None
        keys.update(key)
    return keys


def _forwarded_keys(module: ModuleSymbols, scope: Scope, unpacked: ast.expr, attribute: str) -> Types | None:
    """The keys a helper's `**kwargs` forwards to the field: the constants the module's calls
    of the helper pass by that keyword; None when `unpacked` is not the helper's own `**kwargs`,
    or a call passes a variable or `**something` there."""
    function = scope.node
    if not (isinstance(unpacked, ast.Name) and isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))):
        return None
    if function.args.kwarg is None or function.args.kwarg.arg != unpacked.id:
        return None
    if any(isinstance(n, ast.Name) and n.id == unpacked.id and isinstance(n.ctx, ast.Store) for n in ast.walk(function)):
        return None  # rebound before it is forwarded
    passed = keyword_arguments(module, scope, attribute)
    keys = None if passed is None else _constant_keys(passed)
    return None if keys is None else frozenset(keys)


def _parameter_keys(module: ModuleSymbols, scope: Scope, name: ast.Name) -> Types | None:
    """The keys a config helper's parameter forwards to the field (`def _nfnet_cfg(...,
    attn_layer='se'): return NfCfg(..., attn_layer=attn_layer)`): its default and the constants
    the module's calls of the helper pass; None when the name is not a parameter or one of
    those is not a constant."""
    binding = module.binding(scope, name.id, name.lineno)
    if binding is None or binding.kind != PARAM or binding.scope is not scope:
        return None
    default = parameter_default(binding)
    own = NO_KEY if default is None else constant_key(default)
    passed = _constant_keys(passed_arguments(module, scope, name.id))
    return None if own is None or passed is None else own | frozenset(passed)

