"""What the rules read about one linted module: its checkpoint calls and their regions' effects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckptlint.calls import CheckpointCall
from ckptlint.finding import Fix, Site
from ckptlint.regions.interpreter import TORCH_RANDOM, Effect
from ckptlint.symbols import ModuleSymbols

if TYPE_CHECKING:
    from ckptlint.fix_builder import FixBuilder
    from ckptlint.regions.effects import RegionEffects


@dataclass
class RuleContext:
    module: ModuleSymbols
    regions: RegionEffects
    calls: list[CheckpointCall] = field(default_factory=list)
    fix_builder: FixBuilder | None = None  # None: no fixes wanted (text output), libcst not needed

    @staticmethod
    def site(call: CheckpointCall, chain: tuple[str, ...] = ()) -> Site:
        return Site(call.path, call.line, call.column, chain)

    def region_effects(self, call: CheckpointCall) -> list[Effect]:
        return self.regions.region_effects(call)

    def stochastic_note(self, call: CheckpointCall) -> str:
        """For CKP102: whether the region draws from torch's RNG, which decides if gradients change."""
        random_ops = [e for e in self.region_effects(call) if e.kind == TORCH_RANDOM]
        if random_ops:
            first = random_ops[0]
            where = f"{first.module.source.display_path}:{first.node.lineno}"  # type: ignore[attr-defined]
            more = f" and {len(random_ops) - 1} more" if len(random_ops) > 1 else ""
            return f"; the region has stochastic torch ops ({first.detail} at {where}{more}), so gradients change"
        return "; no stochastic torch op was found in the region, so today only speed is affected"

    def fixes_for(self, call: CheckpointCall) -> tuple[Fix, ...]:
        """CKP101's fixes for the call (computed with libcst, only for calls that need them)."""
        if self.fix_builder is None:
            return ()
        source = call.module.source
        node = call.node
        span = (
            node.lineno,  # type: ignore[attr-defined]
            source.column(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            node.end_lineno,  # type: ignore[attr-defined]
            source.column(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )
        return self.fix_builder.use_reentrant(source.text, span, call.api.use_reentrant_position)
