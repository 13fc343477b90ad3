"""What the rules read about one linted module: its checkpoint calls and, through the run's
analyses (`analysis/session.py`), what their regions do and how the code around them uses them.
At run time it imports only the records rules read (`regions/summary.py`, `usage/facts.py`)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckptlint.analysis.regions.summary import Effect, UntrackedOutput
from ckptlint.analysis.usage.facts import (
    NoGradInput,
    UntrackedTensor,
    reentrant_because,
    takes_use_reentrant,
)
from ckptlint.calls import CheckpointCall
from ckptlint.finding import Fix, Site
from ckptlint.symbols import ModuleSymbols

if TYPE_CHECKING:
    from ckptlint.analysis.contexts.execution import ExecutionContext
    from ckptlint.analysis.session import Analyses
    from ckptlint.analysis.usage.composition import Composition
    from ckptlint.fix_builder import FixBuilder


@dataclass
class RuleContext:
    module: ModuleSymbols
    analyses: Analyses
    calls: list[CheckpointCall] = field(default_factory=list)
    fix_builder: FixBuilder | None = None  # None: no fixes wanted (text output), libcst not needed
    composition: Composition | None = None  # how the module's code uses checkpointed models (analysis/usage/composition.py)

    def execution_context(self, call: CheckpointCall) -> ExecutionContext | None:
        """How `call` runs (analysis/contexts/execution.py)."""
        return self.analyses.contexts.of(call)

    @staticmethod
    def site(call: CheckpointCall, chain: tuple[str, ...] = ()) -> Site:
        return Site(call.path, call.line, call.column, chain)

    def region_effects(self, call: CheckpointCall) -> list[Effect]:
        """What the call's region does, with the chain that reaches each effect (analysis/regions/effects.py)."""
        return self.analyses.regions.region_effects(call)

    def no_grad_inputs(self, call: CheckpointCall) -> list[NoGradInput]:
        """CKP301: the positional inputs of a reentrant call, when none of them can require grad
        (analysis/usage/grad_flow.py)."""
        return self.analyses.grad_flow.no_grad_inputs(call, self.calls)

    def untracked_tensors(self, call: CheckpointCall) -> list[UntrackedTensor]:
        """CKP302: tensors reaching a reentrant region other than as positional inputs
        (analysis/usage/grad_flow.py)."""
        return self.analyses.grad_flow.untracked_tensors(call, self.calls)

    def untracked_output(self, call: CheckpointCall) -> UntrackedOutput | None:
        """CKP306: the reentrant region's container output, when every path it can take returns one
        (analysis/regions/outputs.py)."""
        if call.reentrant is not True:
            return None  # the default mode of most calls: no region to resolve for this
        return self.analyses.region_outputs.untracked(call, self.analyses.resolver.entries(call))

    def reentrant_because(self, call: CheckpointCall) -> str:
        """What made the call reentrant, for messages."""
        return reentrant_because(call)

    def gradients_fail(self, call: CheckpointCall) -> bool:
        """Gradients already go wrong in today's reentrant mode (CKP301 or CKP302 at the call):
        keeping that mode is no fix."""
        return bool(self.no_grad_inputs(call) or self.untracked_tensors(call))

    def non_reentrant_fix(self, call: CheckpointCall) -> tuple[Fix, ...]:
        """`use_reentrant=False` at the call (unsafe: it changes how gradients flow), when the
        call's API selects its implementation with that argument."""
        if not takes_use_reentrant(call):
            return ()
        return tuple(fix for fix in self.fixes_for(call) if "use_reentrant=False" in fix.description)

    def fixes_for(self, call: CheckpointCall) -> tuple[Fix, ...]:
        """CKP101's fixes for the call (computed with libcst, only for calls that need them)."""
        if self.fix_builder is None:
            return ()
        source = call.module.source
        node = call.node
        end_line = node.end_lineno or node.lineno
        end_column = node.end_col_offset if node.end_col_offset is not None else node.col_offset
        span = (node.lineno, source.column(node.lineno, node.col_offset), end_line, source.column(end_line, end_column))
        return self.fix_builder.use_reentrant(source.text, span, call.api.use_reentrant_position)

    def use_reentrant_false(self, call: CheckpointCall) -> tuple[Fix, ...]:
        """The unsafe `use_reentrant=False` fix alone, for a call in this module and torch's
        `use_reentrant` argument (CKP303/CKP304 edit the checkpoint call, not the reported line)."""
        if call.module is not self.module or not call.api.checks_use_reentrant:
            return ()
        return tuple(fix for fix in self.fixes_for(call) if "use_reentrant=False" in fix.description)

    def keyword_fix(self, module: ModuleSymbols, node: ast.Call, keyword: str, value: str, safe: bool, description: str) -> tuple[Fix, ...]:
        """A fix that adds `keyword=value` to a call of this module (CKP305's gradient_checkpointing_kwargs)."""
        if self.fix_builder is None or module is not self.module:
            return ()
        source = module.source
        end_line = node.end_lineno or node.lineno
        end_column = node.end_col_offset if node.end_col_offset is not None else node.col_offset
        span = (node.lineno, source.column(node.lineno, node.col_offset), end_line, source.column(end_line, end_column))
        return self.fix_builder.add_keyword(source.text, span, keyword, value, safe, description)
