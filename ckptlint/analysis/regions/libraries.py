"""Hazards inside installed libraries, as the project sees them.

A library module is read-only context (project.py): the region's analysis follows calls
into it like project code, but a hazard found there is reported at the project line that
reaches it (the call into the library, or the checkpoint call when the region itself is a
library function), with the chain into the library and the hazard's place in it:
`via Block.forward -> ConvBN.forward (fakezoo/blocks.py:12)`. The user can act on their own
line (pick another block, wrap it, ignore it there); the library's line is where to look.
"""

from __future__ import annotations

import ast
from dataclasses import replace

from ckptlint.analysis.regions.summary import Effect
from ckptlint.symbols import ModuleSymbols


def reached_at(effect: Effect, module: ModuleSymbols, node: ast.AST) -> Effect:
    """`effect`, found in library code, moved to `node` in the project `module` that reaches it;
    the library file and line follow the last function of the chain. Unchanged when the
    effect already lies in project code (a library calling back into a project function)."""
    if not effect.module.library:
        return effect
    where = f"({effect.module.source.display_path}:{getattr(effect.node, 'lineno', 0)})"
    chain = (*effect.chain[:-1], f"{effect.chain[-1]} {where}") if effect.chain else (where,)
    return replace(effect, module=module, node=node, chain=chain)
