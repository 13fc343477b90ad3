"""One process's share of a run: analyse files and say, for each, its raw findings, the names
it adds for checkpoint APIs, and which modules its result depends on.

The analysis state (parsed modules, type and effect memos) is shared by the files one
process analyses, so a block module reached from forty models is parsed once. When the state
grows past `MAX_MODULES`, which bounds memory, the analysis memos and every module but the
`HOT_MODULES` that most files of this state depended on are dropped: a package's core modules
(transformers' `modeling_utils`) are then parsed once per process, not once per state.
Findings do not depend on which files shared a state: every memo is a function of the modules
it read, and a kept module's tree and names are a function of its content.

A file's result depends on the modules its analysis could have read: those reachable from
it through import statements, and through what analyses read beside a module
(`Project.consult`: the files beside a class's module, a call's context files), among the
modules this state loaded (a module the state never loaded cannot have influenced anything). A package's `__init__.py` is analysed in a state of
its own: an initialiser re-exports its package, and once loaded here it would join every later
file to every module of the package this state holds. An import that binds a project module or package
reaches every loaded module below it, since attributes reach submodules however they are
spelled. That set, with each module's content digest, is
what the cache checks on the next run; it includes the installed libraries' modules the
analysis read, so editing one in place redoes the results that read it (installing or
upgrading a distribution changes the cache key instead: libraries.fingerprint).
"""

from __future__ import annotations

import bisect
import gc
import os
import sys
import traceback
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ckptlint.analysis.contexts.verdicts import with_contexts
from ckptlint.analysis.session import Analyses
from ckptlint.call_report import describe_call, describe_coverage
from ckptlint.calls import CallFinder, CheckpointCall
from ckptlint.catalogue import DEFAULT_CATALOGUE
from ckptlint.classes import ClassIndex
from ckptlint.code_text import code_digest
from ckptlint.config import Config
from ckptlint.contained_lowering import is_transient
from ckptlint.context_prefilter import ContextFiles
from ckptlint.engine.cache import ModuleEdges, RuleSet
from ckptlint.engine.edges import dependency_edges, module_edges
from ckptlint.engine.discovery import ExcludeMatcher
from ckptlint.finding import Finding
from ckptlint.prefilter import Names
from ckptlint.project import (
    LoadedModule,
    Project,
    content_digest,
    display_path,
    load_source,
    read_content,
)
from ckptlint.rules import ALL_RULES
from ckptlint.rules.context import RuleContext
from ckptlint.source import DecodeError, SourceFile
from ckptlint.syntax import parse, parse_error
from ckptlint.versions import NO_VERSIONS, Versions

MAX_MODULES = 300  # loaded modules before the state is dropped: transformers peaks at ~700 MB per process
HOT_MODULES = 100  # of those, the most depended-on that a drop keeps, if two files or more depended on them
RECURSION_LIMIT = 6000
ISSUES_URL = "https://github.com/ckptlint/ckptlint/issues"


@dataclass(frozen=True)
class Settings:
    """Everything a worker needs to analyse like the parent would (picklable, hashable)."""

    config: Config  # what the analysis depends on: Config.without_reporting()
    base: str
    rules: tuple[str, ...]  # codes of the rules to run
    want_fixes: bool = False
    rule_set: RuleSet = RuleSet.ALL  # which set `rules` is, for the cache
    overlays: tuple[tuple[str, bytes | str], ...] = ()
    libraries: tuple[str, ...] = ()  # installed libraries' directories, in import order (libraries.py)
    versions: Versions = NO_VERSIONS  # the library versions that decide modes (versions.py)
    context_files: ContextFiles = ()  # files that can say how calls run (context_prefilter.py)
    want_hints: bool = False  # describe each call's static cost hints and region coverage (`ckptlint calls`, `confirm --cost`: analysis/regions/cost_hints.py, coverage.py)


@dataclass
class Outcome:
    """What one file's analysis produced."""

    path: str  # absolute
    digest: str = ""
    findings: list[Finding] = field(default_factory=list)
    names: Names = field(default_factory=Names)
    dependencies: dict[str, str] = field(default_factory=dict)  # absolute path -> digest
    calls: list[dict[str, Any]] = field(default_factory=list)  # described checkpoint calls, always (the cache keeps them); hints only if wanted
    unreadable: str | None = None  # the OSError, for a file that could not be read
    internal_error: str | None = None
    analysed: bool = False  # False: only parsed (a named file that cannot hold a call)
    transient: bool = False  # it read a file whose parse timed out: reported, not cached


class WorkerState:
    """The analysis state of one process, for one set of settings."""

    def __init__(self, settings: Settings, names: Names):
        self.settings = settings
        self.base = Path(settings.base)
        self.names = names.copy()
        self.rules = [rule for rule in ALL_RULES if rule.code in settings.rules]
        self.levels = {rule.code: rule.level for rule in ALL_RULES}
        self.reported: set[str] = set()  # modules whose edges this process has reported
        self.edges: dict[str, ModuleEdges] = {}  # path -> (digest, module names it can reach, code digest), to report
        self.dependents: Counter[str] = Counter()  # path -> files of this state that depended on it
        self.project = self._fresh_project()
        self._fresh_analysis()

    def _fresh_project(self) -> Project:
        config = self.settings.config
        overlays = {Path(path): text for path, text in self.settings.overlays}
        return Project(
            is_excluded=ExcludeMatcher(config.all_excludes, config.root),
            overlays=overlays,
            base=self.base,
            libraries=self.settings.libraries,
        )

    def _fresh_analysis(self) -> None:
        """New memos (and a new count of what the state's files depend on) over `self.project`."""
        config = self.settings.config
        self.dependents.clear()
        catalogue = DEFAULT_CATALOGUE.extended(config.checkpoint_functions)
        classes = ClassIndex(self.project)
        self.finder = CallFinder(self.project, catalogue, classes, self.names, self.settings.versions)
        self.analyses = Analyses(self.project, classes, self.settings.context_files, record_calls=self.settings.want_hints, versions=self.settings.versions)
        self.fix_builder = None
        if self.settings.want_fixes:
            from ckptlint.fix_builder import FixBuilder

            self.fix_builder = FixBuilder()

    def add_roots(self, roots: list[str]) -> None:
        for root in roots:
            self.project.add_root(Path(root))

    def analyse(self, path: str) -> Outcome:
        if os.path.basename(path) == "__init__.py":
            return self._analyse_apart(path)
        return self._analyse_here(path)

    def _analyse_here(self, path: str) -> Outcome:
        outcome = Outcome(path)
        try:
            loaded = self.project.load(Path(path), display_path(path, self.base))
        except OSError as exc:
            outcome.unreadable = exc.strerror or str(exc)
            return outcome
        outcome.digest = loaded.digest
        outcome.analysed = True
        self.project.take_consulted()  # what an earlier file's analysis read is not this one's
        try:
            outcome.findings = self._findings(loaded, outcome)
            self._note_dependencies(outcome, loaded)
        except RecursionError:
            outcome.findings = [_too_deep(loaded)]
            self.reset()
            outcome.dependencies = {os.fspath(loaded.path): loaded.digest}
        except Exception:  # noqa: BLE001 - one file's bug must not lose the others' findings
            outcome.internal_error = traceback.format_exc(limit=-4)
            self.reset()
            return outcome
        self.dependents.update(outcome.dependencies.keys())
        if len(self.project.loaded()) > MAX_MODULES:
            self.shrink()
        return outcome

    def _analyse_apart(self, path: str) -> Outcome:
        """A package's `__init__.py` in a state of its own, dropped after. An initialiser
        re-exports its package: loaded into the shared state, it would link every later file
        that imports anything of the package (an import loads the parents first, and so do
        the dependencies) to every module of the package the state has loaded, and an edit of
        any of them would redo them all. Its own analysis rarely reads what the shared memos
        hold, and its findings do not depend on the state it runs in."""
        shared = (self.project, self.finder, self.analyses, self.fix_builder, self.dependents)
        roots = list(self.project.roots)
        self.project = self._fresh_project()
        for root in roots:
            self.project.add_root(root)
        self.dependents = Counter()
        self._fresh_analysis()
        try:
            return self._analyse_here(path)
        finally:
            self.project.release()
            self.project, self.finder, self.analyses, self.fix_builder, self.dependents = shared

    def _note_dependencies(self, outcome: Outcome, loaded: LoadedModule) -> None:
        """The modules the result was computed from, and the import edges of those not reported
        yet (inside the analysis's guard: reading them is reading files too)."""
        outcome.dependencies = dependencies(self.project, loaded)
        # modules the analysis read beside the file's imports (a class's callers next to it,
        # files whose compile or hooks cover its calls); `dependencies` reaches them, and their
        # imports, as edges from the module they were read for (`Project.read_beside`)
        outcome.dependencies.update(self.project.take_consulted())
        for path in outcome.dependencies:
            module = self.project.loaded_at(path)
            if module is None:
                continue
            outcome.transient = outcome.transient or is_transient(module.error)
            if path not in self.reported:
                self.reported.add(path)
                named, packages = module_edges(self.project, module)
                code = code_digest(module.source.stripped) if module.source is not None else None
                self.edges[path] = (module.digest, _external(named), _external(packages), code)

    def _findings(self, loaded: LoadedModule, outcome: Outcome) -> list[Finding]:
        if loaded.error is not None:
            return [loaded.error]
        symbols = loaded.symbols
        assert symbols is not None
        # exactly the run's names (plus the file's own): not names other files analysed here
        # added, so that the result is what the engine keys it by
        self.finder.names = self.names.copy()
        calls = self.finder.checkpoint_calls(symbols)
        assert symbols.checkpoint_names is not None  # checkpoint_calls sets it
        outcome.names = symbols.checkpoint_names
        composition = self.analyses.composition(symbols, calls, self.finder)
        context = RuleContext(symbols, self.analyses, calls, self.fix_builder, composition)
        findings: list[Finding] = []
        for rule in self.rules:
            findings.extend(rule.check(context))
        if self.settings.want_hints:
            cost = self.analyses.cost_hints(calls)
            regions = self.analyses.regions
            outcome.calls = [
                describe_call(call, [hint.to_dict() for hint in cost.hints(call)], describe_coverage(regions.region_calls(call))) for call in calls
            ]
        else:
            outcome.calls = [describe_call(call) for call in calls]
        return with_contexts(in_project(findings, self.project), calls, self.analyses.contexts, self.levels, self._calls_in)

    def _calls_in(self, display: str) -> list[CheckpointCall]:
        """The checkpoint calls of another loaded file (a finding's site there), found with the
        run's names as when that file is analysed on its own."""
        module = next((m.symbols for m in self.project.loaded() if m.source is not None and m.source.display_path == display), None)
        if module is None:
            return []
        own, self.finder.names = self.finder.names, self.names.copy()
        try:
            return self.finder.checkpoint_calls(module)
        finally:
            self.finder.names = own

    def reset(self) -> None:
        """Drop every parsed module and memo (after an error)."""
        roots = list(self.project.roots)
        self.project.release()
        self.project = self._fresh_project()
        self._fresh_analysis()
        for root in roots:
            self.project.add_root(root)

    def rename(self, names: Names) -> None:
        """Take the names of a later round. Only which calls are checkpoint calls depends on
        names (the finder takes them per file); modules, types and function summaries do not
        and stay, so a second round pays for the calls its new names add."""
        self.names = names.copy()
        self.analyses.forget_calls()

    def shrink(self) -> None:
        """Drop every memo and every module but the hottest (to bound memory)."""
        hot = [Path(path) for path, count in self.dependents.most_common(HOT_MODULES) if count > 1]
        self.project.evict(set(hot))
        self._fresh_analysis()


def check_syntax(path: str, settings: Settings) -> Outcome:
    """For a named file that cannot hold a checkpoint call: only whether it parses (CKP000)."""
    outcome = Outcome(path)
    overlays = dict(settings.overlays)
    try:
        content = read_content(Path(path), overlays.get(path))
    except OSError as exc:
        outcome.unreadable = exc.strerror or str(exc)
        return outcome
    outcome.digest = content_digest(content)
    outcome.dependencies = {path: outcome.digest}
    display = display_path(path, Path(settings.base))
    try:
        source = load_source(Path(path), display, content)
    except DecodeError as exc:
        outcome.findings = [parse_error(SourceFile(path, display, ""), exc.message, exc.line, exc.column)]
        return outcome
    tree = parse(source)
    if isinstance(tree, Finding):
        outcome.findings = [tree]
        outcome.transient = is_transient(tree)
    return outcome


def dependencies(project: Project, loaded: LoadedModule) -> dict[str, str]:
    """Modules reachable from `loaded` through imports and what was read beside them
    (`Project.read_beside`), among those loaded, with digests. Names are resolved to files as
    the analysis resolves them (a namespace package's `pkg.utils` is the file `pkg/utils.py`,
    whatever name that file has as a root of its own)."""
    loaded_paths: list[str] | None = None  # sorted, for the modules below a bound package
    seen = {loaded.path: loaded}
    seen_packages: set[str] = set()  # each package's modules are reached once, whoever binds it
    stack = [loaded]
    everything = len(project.loaded())
    while stack and len(seen) < everything:  # a package's files usually reach all that is loaded
        module = stack.pop()
        named, packages = dependency_edges(project, module)
        reached = [project.loaded_file(key) for key in project.import_targets(module, named)]
        reached.extend(project.loaded_at(path) for path in project.read_beside(module.path))  # what its code's analyses read beside it
        for package in packages:
            if package in seen_packages:
                continue
            seen_packages.add(package)
            directory = project.module_directory(package)
            if directory is None:
                continue
            loaded_paths = loaded_paths or sorted(os.fspath(m.path) for m in project.loaded())
            prefix = os.fspath(directory) + os.sep
            at = bisect.bisect_left(loaded_paths, prefix)
            while at < len(loaded_paths) and loaded_paths[at].startswith(prefix):
                reached.append(project.loaded_at(loaded_paths[at]))
                at += 1
        for found in reached:
            if found is not None and found.path not in seen:
                seen[found.path] = found
                stack.append(found)
    return {os.fspath(path): module.digest for path, module in seen.items()}


def in_project(findings: list[Finding], project: Project) -> list[Finding]:
    """Findings never lie in an installed library's file: region hazards are moved to the
    project line that reaches them as they are found (analysis/regions/libraries.py); anything else a
    rule places in a library (`preserve_rng_state=False` bound by a library's partial) is
    reported at the checkpoint call it is about, and dropped when it names none."""
    libraries = {m.source.display_path for m in project.loaded() if m.library and m.source is not None}
    if not libraries:
        return findings
    kept: list[Finding] = []
    for finding in findings:
        if finding.path not in libraries:
            kept.append(finding)
        elif finding.sites:
            site = finding.sites[0]
            kept.append(replace(finding, path=site.path, line=site.line, column=site.column, end_line=site.line, end_column=site.column))
    return kept


def _external(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted({external_name(name) for name in names}))


def external_name(name: str) -> str:
    """`train@1.blocks` -> `train.blocks`: the name as Python spells it (see project.py)."""
    head, dot, rest = name.partition(".")
    return head.partition("@")[0] + dot + rest


def _too_deep(loaded: LoadedModule) -> Finding:
    assert loaded.source is not None
    return parse_error(
        loaded.source,
        "cannot analyse file: expressions are nested more deeply than ckptlint follows, so nothing in it was checked",
    )


# -- process entry points ----------------------------------------------------------------

_STATE: WorkerState | None = None


def start_process() -> None:
    """Pool initializer: the cyclic collector costs a third of the time on millions of AST
    nodes that live until the state is dropped, where `reset` collects explicitly."""
    gc.disable()
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))


def run_job(
    settings: Settings, names: Names, roots: list[str], analyse: list[str], syntax_only: list[str]
) -> tuple[list[Outcome], dict[str, ModuleEdges]]:
    """Analyse `analyse` and check the syntax of `syntax_only`, in this process; also the
    import edges of modules the outcomes depend on that this process has not reported yet."""
    global _STATE
    if _STATE is None or _STATE.settings != settings:
        _STATE = WorkerState(settings, names)
    elif _STATE.names != names:
        _STATE.rename(names)
    _STATE.add_roots(roots)
    outcomes = [_STATE.analyse(path) for path in analyse]
    outcomes.extend(check_syntax(path, settings) for path in syntax_only)
    edges, _STATE.edges = _STATE.edges, {}
    return outcomes, edges


def forget() -> None:
    """Drop this process's analysis state (the in-process runner calls it after a run)."""
    global _STATE
    _STATE = None
