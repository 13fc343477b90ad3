"""What the rules read about one linted module: its checkpoint calls (and, later, regions)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ckptlint.calls import CheckpointCall
from ckptlint.finding import Fix, Site
from ckptlint.symbols import ModuleSymbols


@dataclass
class Analysis:
    module: ModuleSymbols
    calls: list[CheckpointCall] = field(default_factory=list)

    @staticmethod
    def site(call: CheckpointCall, chain: tuple[str, ...] = ()) -> Site:
        return Site(call.path, call.line, call.column, chain)

    def stochastic_note(self, call: CheckpointCall) -> str:
        """For CKP102: whether the region draws from torch's RNG (filled in by region analysis)."""
        return ""

    def fixes_for(self, call: CheckpointCall) -> tuple[Fix, ...]:
        return ()
