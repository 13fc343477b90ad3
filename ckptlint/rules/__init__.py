"""The rule registry: every rule ckptlint ships, by code."""

from __future__ import annotations

from ckptlint.rules.base import Rule
from ckptlint.rules.ckp000 import ParseError
from ckptlint.rules.ckp101 import ImplicitUseReentrant
from ckptlint.rules.ckp102 import RngStateNotPreserved

ALL_RULES: tuple[Rule, ...] = (
    ParseError(),
    ImplicitUseReentrant(),
    RngStateNotPreserved(),
)

RULES_BY_CODE: dict[str, Rule] = {rule.code: rule for rule in ALL_RULES}
ALL_CODES: tuple[str, ...] = tuple(RULES_BY_CODE)
