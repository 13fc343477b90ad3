"""The rule registry: every rule ckptlint ships, by code.

Each `rules/ckpNNN.py` holds one rule class; the registry is read from those files, so a
new rule is one new file. The codes are a user contract (`# noqa`, configs): tests check
each file holds the rule its name says and that the generated docs list every code.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

from ckptlint.rules.base import Rule

_RULE_MODULE = re.compile(r"ckp\d{3}")


def _discover() -> tuple[Rule, ...]:
    rules: list[Rule] = []
    for info in pkgutil.iter_modules(__path__):
        if _RULE_MODULE.fullmatch(info.name):
            module = importlib.import_module(f"{__name__}.{info.name}")
            rules.extend(
                value()
                for value in vars(module).values()
                if isinstance(value, type) and issubclass(value, Rule) and value.__module__ == module.__name__
            )
    return tuple(sorted(rules, key=lambda rule: rule.code))


ALL_RULES: tuple[Rule, ...] = _discover()
RULES_BY_CODE: dict[str, Rule] = {rule.code: rule for rule in ALL_RULES}
ALL_CODES: tuple[str, ...] = tuple(RULES_BY_CODE)

DOCS_URL = "https://github.com/ckptlint/ckptlint/blob/main/docs/rules/"


def rule_url(code: str) -> str:
    """Where a rule's page lives (docs/rules/CODE.md)."""
    return f"{DOCS_URL}{code}.md"
