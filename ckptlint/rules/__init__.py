"""The rule registry: every rule ckptlint ships, by code."""

from __future__ import annotations

from ckptlint.rules.base import Rule
from ckptlint.rules.ckp000 import ParseError
from ckptlint.rules.ckp001 import UnusedNoqa
from ckptlint.rules.ckp101 import ImplicitUseReentrant
from ckptlint.rules.ckp102 import RngStateNotPreserved
from ckptlint.rules.ckp201 import UnsavedRandomDraw
from ckptlint.rules.ckp202 import ModuleStateMutation
from ckptlint.rules.ckp203 import OuterStateMutation
from ckptlint.rules.ckp204 import TensorStateMutation
from ckptlint.rules.ckp205 import DeviceMove
from ckptlint.rules.ckp206 import UnstableBranch

ALL_RULES: tuple[Rule, ...] = (
    ParseError(),
    UnusedNoqa(),
    ImplicitUseReentrant(),
    RngStateNotPreserved(),
    UnsavedRandomDraw(),
    ModuleStateMutation(),
    OuterStateMutation(),
    TensorStateMutation(),
    DeviceMove(),
    UnstableBranch(),
)

RULES_BY_CODE: dict[str, Rule] = {rule.code: rule for rule in ALL_RULES}
ALL_CODES: tuple[str, ...] = tuple(RULES_BY_CODE)

DOCS_URL = "https://github.com/ckptlint/ckptlint/blob/main/docs/rules/"


def rule_url(code: str) -> str:
    """Where a rule's page lives (docs/rules/CODE.md)."""
    return f"{DOCS_URL}{code}.md"
