"""Configuration objects as built: a dataclass-style instance carries the fields its construction gave.

Training frameworks build their models from config objects: `BlockConfig(norm="ln").build()`,
`ModuleSpec(module=Layer, submodules=LayerSubmodules(norm=ModuleSpec(module=nn.LayerNorm)))`
handed to `build_module(spec, dim)`, a `ModelConfig(depth=4)` whose `block` field defaults to
`field(default_factory=BlockConfig)`. A class whose `__init__` is the one its fields give (a
dataclass, an attrs or pydantic class: annotated fields in the body and no `__init__` written
in the project) makes instances whose fields are what the call passed, positionally in field
order or by name, else the field's default. Such an instance, handed to a function or
constructor, is evaluated there as the object it is (a choosing argument, like a config dict),
and a method called on it sees it as `self`: `self.norm` in `BlockConfig.build` is the `"ln"`
that instance was given, not every value any construction passes.
"""

from __future__ import annotations

import ast

from ckptlint.analysis.semantics.protocol import EMPTY, TypeEvaluator
from ckptlint.analysis.semantics.values import ClassType, Type, Types, ordered
from ckptlint.classes import ClassInfo
from ckptlint.symbols import ModuleSymbols, Scope

SELF = "self"  # the key a method's receiver takes among the arguments it is evaluated with
_FIELD_CALLS = frozenset({"dataclasses.field", "attr.ib", "attr.attrib", "attrs.field", "pydantic.Field", "pydantic.fields.Field"})


class ConfigObjects(TypeEvaluator):
    """The evaluator's config objects (a mixin of `evaluator.TypeInference`)."""

    _fields: dict[int, tuple[tuple[str, ast.expr | None, ClassInfo], ...] | None]
    _env: dict[int, dict[str, Types]]

    def config_fields(self, info: ClassInfo) -> tuple[tuple[str, ast.expr | None, ClassInfo], ...] | None:
        """(name, default, declaring class) of each field of a class whose constructor its fields
        make, bases' fields first; None for any other class (one with an `__init__` of its own
        or a base's, an `nn.Module`, a class with no annotated field)."""
        key = id(info.scope)
        if key in self._fields:
            return self._fields[key]
        found: tuple[tuple[str, ast.expr | None, ClassInfo], ...] | None = None
        mro = list(self.classes.mro(info))
        if self.classes.find_method(info, "__init__") is None and not self.construction.is_module_class(info):
            fields: dict[str, tuple[str, ast.expr | None, ClassInfo]] = {}
            for cls in reversed(mro):
                for name, _, default in cls.annotated_fields:
                    fields[name] = (name, default, cls)
            found = tuple(fields.values()) or None
        self._fields[key] = found
        return found

    def config_object(self, item: ClassType, info: ClassInfo, call: ast.Call, module: ModuleSymbols, scope: Scope, depth: int) -> ClassType:
        """The instance `call` makes of a config class, with the fields the call passes."""
        fields = self.config_fields(info)
        if fields is None or any(isinstance(a, ast.Starred) for a in call.args):
            return item
        names = [name for name, _, _ in fields]
        given: dict[str, Types] = {}
        for name, argument in zip(names, call.args):
            given[name] = self.types(argument, module, scope, depth + 1)
        for keyword in call.keywords:
            if keyword.arg in names:
                given[keyword.arg] = self.types(keyword.value, module, scope, depth + 1)
        if any(k.arg is None for k in call.keywords):  # `Cfg(**overrides)`: what the mapping's writes give, with the default when it may miss
            for name, (types, may_miss) in self.unpacked_keywords(call, module, scope, depth, names).items():
                given[name] = types | (self.field_default(info, name) if may_miss else EMPTY)
        if not given:
            return item
        return ClassType(item.name, item.running_stats, tuple((name, tuple(ordered(types))) for name, types in sorted(given.items())), item.config, item.built_by)

    def config_field_types(self, item: ClassType, info: ClassInfo, attribute: str) -> Types | None:
        """What a config object's field holds: what its construction passed, else the field's
        default; None when `attribute` is no field or the instance's construction is not known."""
        fields = self.config_fields(info)
        if fields is None or not item.arguments or all(name != attribute for name, _, _ in fields):
            return None
        passed = dict(item.arguments)
        return frozenset(passed[attribute]) if attribute in passed else self.field_default(info, attribute)

    def field_default(self, info: ClassInfo, attribute: str) -> Types:
        """A field's default: the value, or what `field(default=...)` / `field(default_factory=F)` gives."""
        for name, default, cls in reversed(self.config_fields(info) or ()):
            if name != attribute or default is None:
                continue
            scope = cls.scope
            if isinstance(default, ast.Call) and self.qualified_name(default.func, cls.module, scope) in _FIELD_CALLS:
                for keyword in default.keywords:
                    if keyword.arg == "default":
                        return self.types(keyword.value, cls.module, scope)
                    if keyword.arg in ("default_factory", "factory"):  # called with no argument
                        return frozenset().union(*(self.call_result(t, None, cls.module, scope, 1) for t in self.types(keyword.value, cls.module, scope)))
                return EMPTY
            return self.types(default, cls.module, scope)
        return EMPTY

    def config_objects(self, types: Types) -> Types:
        """The instances of config classes whose construction is known among `types`: each chooses
        what is built from it (`build_module(spec, dim)`, `cfg.build()`)."""
        return frozenset(t for t in types if self._is_config_object(t))

    def _is_config_object(self, item: Type) -> bool:
        if not isinstance(item, ClassType) or not item.arguments:
            return False
        info = self.classes.by_name(item.name)
        return info is not None and self.config_fields(info) is not None

    def receiver_in_env(self, method: Scope) -> Types | None:
        """The config object a method is being evaluated on (`cfg.build()`), if it is."""
        passed = self._env.get(id(method)) if self._env else None
        return passed.get(SELF) if passed else None
