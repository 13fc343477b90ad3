"""The analyses of one run, built together so that they share their memos.

One `Analyses` per worker state and project: the type evaluator is shared by region
resolution, effect summaries, gradient flow, region outputs and execution contexts, so a
class's attribute types or a function's summary are computed once however many files and
rules ask. Per linted module it makes the usage checks (`composition`) and, when wanted, the
cost hints.
The analyses read no file themselves: the project model reads for them and records what
they read beside the analysed file (`Project.consult`), for the cache.
"""

from __future__ import annotations

from typing import Sequence

from ckptlint.analysis.contexts.execution import ExecutionContexts
from ckptlint.analysis.regions.cost_hints import RegionCost
from ckptlint.analysis.regions.effects import RegionEffects
from ckptlint.analysis.regions.interpreter import Summaries
from ckptlint.analysis.regions.mutability import Mutability
from ckptlint.analysis.regions.outputs import RegionOutputs
from ckptlint.analysis.regions.resolve import RegionResolver
from ckptlint.analysis.semantics.evaluator import TypeInference
from ckptlint.analysis.usage.composition import Composition
from ckptlint.analysis.usage.grad_flow import GradFlow
from ckptlint.calls import CallFinder, CheckpointCall
from ckptlint.classes import ClassIndex
from ckptlint.context_prefilter import ContextFiles
from ckptlint.project import Project
from ckptlint.symbols import ModuleSymbols
from ckptlint.versions import NO_VERSIONS, Versions


class Analyses:
    def __init__(self, project: Project, classes: ClassIndex, context_files: ContextFiles, record_calls: bool = False, versions: Versions = NO_VERSIONS):
        self.inference = TypeInference(project, classes, versions)
        self.resolver = RegionResolver(classes, self.inference)
        # record_calls: summaries log each call's resolution, for `ckptlint calls --unresolved`
        summaries = Summaries(project, classes, self.inference, Mutability(classes), record_calls)
        self.regions = RegionEffects(summaries, self.resolver)  # CKP2xx, 401/402, 501, 504: what the replay does
        self.grad_flow = GradFlow(classes, self.inference)  # CKP301/CKP302: what reaches a reentrant region
        self.region_outputs = RegionOutputs(classes, self.inference)  # CKP306: what leaves it
        self.contexts = ExecutionContexts(project, self.inference, context_files)  # compile, SAC, offload

    def composition(self, module: ModuleSymbols, calls: list[CheckpointCall], finder: CallFinder) -> Composition:
        """How one module's code uses its checkpointed models (CKP303-305, 403-405, 502/503/505)."""
        return Composition(module, calls, finder, self.inference)

    def cost_hints(self, calls: Sequence[CheckpointCall]) -> RegionCost:
        """Where what each of one module's checkpoint calls buys is known from the code."""
        return RegionCost(self.inference, calls)

    def forget_calls(self) -> None:
        """With new names a call can be recognised differently: drop what is kept per call."""
        self.regions.forget_calls()
