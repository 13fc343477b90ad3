"""What an instance's flag holds (`self.inplace`, `self.use_checkpoint`): the values its constructor
can give it, when nothing else sets it (a mixin of `evaluator.TypeInference`).

A flag a method flips (`set_grad_checkpointing()`) or code outside the class stores
(`m.is_first_chunk = flag`) is whatever a run makes it, so it is not known.
"""

from __future__ import annotations

import re

from ckptlint.analysis.knowledge import torch_api
from ckptlint.analysis.semantics.protocol import TypeEvaluator
from ckptlint.analysis.semantics.values import ClassType, Type, Types
from ckptlint.symbols import ModuleSymbols


class InstanceFlags(TypeEvaluator):
    _outside_stores: dict[tuple[int, str], bool]

    def flag_types(self, item: ClassType, attribute: str) -> Types | None:
        """What `self.<attribute>` holds when every value it can be given is known: it is set
        only in `__init__`-like methods (as the instance's constructor chose), never augmented,
        and each value has known types. None otherwise (a flag a method flips, a value not known)."""
        info = self.classes.by_name(item.name)
        if info is None:
            return None
        assignments = [(cls, a) for cls in self.classes.mro(info) for a in cls.attribute_assignments.get(attribute, ())]
        if not assignments or any(a.augmented or a.value is None or a.unpack is not None for _, a in assignments):
            return None
        if any(a.method.node.name not in torch_api.INIT_LIKE_METHODS for _, a in assignments):  # type: ignore[attr-defined]  # a method scope's node is a def
            return None
        if any(self._stored_from_outside(cls.module, attribute) for cls, _ in assignments):
            return None  # `for m in self.modules(): m.is_first_chunk = flag`: set on the instance from elsewhere
        found: set[Type] = set()
        for cls, assignment in assignments:
            value = assignment.value
            assert value is not None
            types = self.as_configured(item, lambda bound: self.construction.value_types(self, value, cls.module, assignment.method, bound))
            if not types:
                return None
            found.update(types)
        return frozenset(found)

    def _stored_from_outside(self, module: ModuleSymbols, attribute: str) -> bool:
        """Whether the module assigns `attribute` on an object other than a method's `self`
        (`m.is_first_chunk = flag`): read from the text, as a whole-module walk costs more."""
        key = (id(module), attribute)
        found = self._outside_stores.get(key)
        if found is None:
            text = module.source.code if module.source is not None else ""
            # the pattern starts with its literal (`.attr`), which `re` then finds by fast search;
            # a `(?<!self)` in front tried every position of the module (5% of a cold -j1 run)
            stores = re.finditer(r"\." + re.escape(attribute) + r"\s*(?:=(?!=)|[-+*/|&]=)", text)
            found = self._outside_stores[key] = any(text[max(0, m.start() - 4) : m.start()] != "self" for m in stores)
        return found
