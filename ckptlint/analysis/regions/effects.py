"""Region effects per checkpoint call: resolve the region, summarise, prefix the chain.

One per linter run (built by `analysis/session.py`), shared by every module, so each
(function, context) summary is computed once however many calls reach it.
"""

from __future__ import annotations

import ast
from dataclasses import replace

from ckptlint.analysis.flow.statements import enclosing_tests, function_scope
from ckptlint.analysis.regions.balanced_stacks import without_balanced_stacks
from ckptlint.analysis.regions.coverage import (
    INSTANCES_MERGED,
    REGION_UNKNOWN,
    RESOLVED,
    CallEdge,
    CallLog,
)
from ckptlint.analysis.regions.frozen_norms import FrozenNorms
from ckptlint.analysis.regions.interpreter import Summaries
from ckptlint.analysis.regions.libraries import reached_at
from ckptlint.analysis.regions.library_calls import own_running_statistics
from ckptlint.analysis.regions.resolve import (
    RegionEntry,
    RegionResolver,
    TorchModuleRegion,
)
from ckptlint.analysis.regions.summary import (
    RUNNING_STATS,
    TORCH_RANDOM,
    Effect,
    under_condition,
    with_note,
)
from ckptlint.analysis.semantics.run_arguments import mode_condition
from ckptlint.calls import CheckpointCall
from ckptlint.classes import ClassInfo


class RegionEffects:
    def __init__(self, summaries: Summaries, resolver: RegionResolver):
        self.effects = summaries
        self.resolver = resolver
        self.frozen_norms = FrozenNorms(resolver.inference)
        self._by_call: dict[int, list[Effect]] = {}

    def region_effects(self, call: CheckpointCall) -> list[Effect]:
        """Everything the call's region does, each with the chain of calls that reaches it."""
        cached = self._by_call.get(id(call.node))  # the node lives as long as its module
        if cached is not None:
            return cached
        found: list[Effect] = []
        owner = self.resolver.classes.enclosing_class(call.module, call.scope)
        mode = self._non_default_mode(call, owner) if owner is not None else ""
        if mode and not self.resolver.inference.versions.all_configurations:
            self._by_call[id(call.node)] = found
            return found
        seen: set[tuple[str, int]] = set()
        for entry in self.resolver.entries(call):
            for effect in self._entry_effects(entry, call):
                if effect.key not in seen:
                    seen.add(effect.key)
                    found.append(effect)
        if call.reentrant:  # the replay runs the whole region (a non-reentrant one stops after its last saved tensor)
            found = without_balanced_stacks(found)
        if mode:  # `--all-configurations`: the call runs only in that mode
            found = [under_condition(e, mode) for e in found]
        if owner is not None and any(_norm_call(e) for e in found) and self.frozen_norms.frozen(owner):
            found = [e for e in found if not _norm_call(e)]  # an owner's train() keeps them in eval mode
        self._by_call[id(call.node)] = found
        return found

    def _non_default_mode(self, call: CheckpointCall, owner: ClassInfo) -> str:
        """The test that puts the call on an arm only a non-default command-line mode takes (`if
        self.transformer_impl == 'transformer_engine':` with `--transformer-impl` defaulting to
        `'local'`), as a condition; "" on the default path. Not reported unless every
        configuration is asked for (`--all-configurations`), and then with that condition."""
        for test, taken in enclosing_tests(function_scope(call.scope).node, call.line):
            if self.resolver.inference.configuration_truth(owner, test) is (not taken):
                return mode_condition(test, taken)
        return ""

    def region_calls(self, call: CheckpointCall) -> list[CallEdge]:
        """Every call the region makes, directly or through its callees, each resolved or not
        (only when the summaries log calls: `Summaries.record_calls`)."""
        entries = self.resolver.entries(call)
        if not entries:  # a library module or function, or where the analysis stopped
            known = self.resolver.region_is_library_code(call)
            return [CallEdge(call.module, call.node, RESOLVED if known else REGION_UNKNOWN)]
        log = CallLog()
        for entry in entries:
            if isinstance(entry, RegionEntry):
                log.extend(self.effects.summary(entry.module, entry.scope, entry.context).calls)
        owner = self.resolver.classes.enclosing_class(call.module, call.scope)
        if owner is not None and self.resolver.inference.merged_instances(owner) > 1:
            log.add(CallEdge(call.module, call.node, INSTANCES_MERGED))
        return list(log.edges.values())

    def forget_calls(self) -> None:
        """Drop the effects kept per checkpoint call: with new names, a call can be recognised
        differently (worker.WorkerState.rename); summaries stay, they follow no names."""
        self._by_call.clear()

    def _entry_effects(self, entry: RegionEntry | TorchModuleRegion, call: CheckpointCall) -> list[Effect]:
        if isinstance(entry, TorchModuleRegion):
            if entry.random:
                return [Effect(TORCH_RANDOM, call.module, entry.node, "module", (("callee", ast.unparse(entry.node)), ("module_class", entry.name)))]
            return [Effect(RUNNING_STATS, call.module, entry.node, "region", (("module_class", entry.name),))]
        summary = self.effects.summary(entry.module, entry.scope, entry.context)
        own = [e for e in summary.effects if not (entry.statistics_reported and own_running_statistics(e))]
        effects = [with_note(replace(e, chain=(entry.name, *e.chain)) if e.chain else e, entry.note) for e in own]
        if entry.module.library:  # a library function is the region: its hazards are the checkpoint call's
            return [reached_at(replace(e, chain=e.chain or (entry.name,)), call.module, call.node) for e in effects]
        return effects


def _norm_call(effect: Effect) -> bool:
    """A norm module's call (or the norm that is the region) updating its running statistics."""
    return effect.kind == RUNNING_STATS and effect.variant in ("module", "region")
