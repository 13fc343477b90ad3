"""One `Linter.lint_files` call: select, analyse, record, merge.

The selection loop grows the names that can mean checkpointing until no new one turns up
(see `Run`), taking what the cache still answers (reuse.py) and analysing the rest; the
merge scopes findings to the named files, applies `# noqa` and selection. The cache holds
findings before selection (its key leaves out select, ignore, per-file ignores and unused-noqa
reporting), so a new `--select` is a warm run.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from ckptlint.engine.cache import Cache, CacheEntry, Index, ModuleEdges, cache_key, no_collection
from ckptlint.engine.parallel import Workers
from ckptlint.engine.reuse import Reuse
from ckptlint.engine.run_inputs import RunInputs
from ckptlint.engine.schedule import Headers, Schedule, by_package, class_headers, predicted_classes
from ckptlint.engine.worker import ISSUES_URL, Outcome
from ckptlint.engine.workspace import Workspace
from ckptlint.finding import Finding, merge_findings
from ckptlint.context_prefilter import context_files
from ckptlint.noqa import apply_suppressions, suppressions_for
from ckptlint.prefilter import Mentions, Names
from ckptlint.project import display_path, import_root, load_source
from ckptlint.result import LintResult, PathProblem
from ckptlint.source import DecodeError, SourceFile

PREDICT_FROM = 64  # files to analyse from which a pass predicts layer classes (schedule.py)


class Run:
    """One `lint_files` call: select, analyse, record, merge.

    The names that can mean checkpointing grow from the catalogue's: a file that mentions
    a known name is a candidate, and analysing it can add names (its `own`). A candidate's
    analysis depends on the names only through those it mentions that it does not add
    itself (its `key`), so a cached analysis is reused when its content and dependencies
    are unchanged (`Reuse` says which are) and its key is what the names give now (checked
    here, where the names grow). Reuse follows the same growth from the catalogue as a run
    without a cache, so both reach the same names and the same results: a name is never
    taken from an entry whose file is not (yet) a candidate.
    """

    def __init__(self, linter: RunInputs, named: list[str], others: list[str]) -> None:
        self.linter = linter
        self.named = named
        self.named_set = set(named)
        self.files = [*named, *others]
        self.settings = linter.settings()
        cache = self._cache()
        index = cache.load() if cache is not None else Index()
        self.workspace = Workspace(linter.overlays, index.stats)
        # sorted: which root wins a top-level name two roots define must not depend on the named files
        self._roots: dict[str, Path] = {}
        self.roots = sorted({os.fspath(self._root(p)) for p in self.files})
        self.reuse = Reuse(cache, index, self.workspace, self.files, self.roots, self.settings.rule_set, self.settings.want_hints)
        self.mentions = Mentions(self.workspace.data, self.reuse.recorded_mentions())
        self.outcomes: dict[str, Outcome] = {}
        self.keys: dict[str, frozenset[str]] = {}  # candidate -> the key its result (fresh or cached) has
        self.reused: set[str] = set()  # candidates answered from the cache
        self.unreadable: set[str] = set()  # files that could not be read when analysed
        self.problems: list[PathProblem] = []
        self._headers: dict[str, Headers] | None = None  # each file's class headers, read once (schedule.py)

    def _cache(self) -> Cache | None:
        """None without a cache directory. The key holds what the analysis depends on, not
        the selection (`settings.config` has none, and which rules ran is kept per entry)."""
        directory = self.linter.cache_dir
        if directory is None:
            return None
        settings = self.settings
        fingerprint = self.linter.libraries.fingerprint  # what is installed where regions can be followed
        versions = settings.versions.key()  # they decide modes: pins change without any file the analysis reads
        return Cache(directory, cache_key(settings.config, settings.base, settings.want_fixes, fingerprint, versions))

    def execute(self) -> LintResult:
        names = Names.of(self.linter.catalogue)
        # which files compile, set Dynamo's flag or install hooks: what each call's context reads
        found, self.compile_calls = context_files(self.files, self.mentions, self.workspace.data, self.workspace.digest, self.reuse.index.compile_calls)
        self.settings = replace(self.settings, context_files=found)
        self.reuse.note_context_files(found)
        with Workers(self.linter.jobs) as workers:
            while True:  # until no new name turns up
                words = names.words()
                todo, waiting = self._select(words, names)
                if names.words() != words:
                    continue  # cached entries added names: take those in before analysing anything
                todo = todo or waiting  # an entry that never matched is redone once nothing else moves
                feed = self._feed(todo, names)
                # a file the feed may analyse is parsed there (a later pass parses it if it was not)
                syntax = [p for p in self.named if not self.mentions.of(p, words) and not self._syntax_known(p) and p not in feed]
                if not todo and not syntax:
                    break
                workers.execute(self.settings, self.roots, feed, syntax)
        words = names.words()  # one set: a new one per file made each file's test a set difference of every name (2 s on transformers)
        self.candidates = [p for p in self.files if self.mentions.of(p, words)]
        with no_collection():  # the trees an in-process analysis parsed are still alive
            result = self._merge()
            self.reuse.save(self.outcomes, self.keys, self.mentions, names, self.compile_calls)
        return result

    def _feed(self, todo: list[str], names: Names) -> RunFeed:
        """`todo`, and the files that mention only classes the class headers predict, in the
        order schedule.py gives: each after the files defining the predicted classes it mentions."""
        if len(todo) < PREDICT_FROM:  # reading every file's headers costs more than a later pass
            return RunFeed(self, names, Schedule(by_package(todo, self.workspace.size), {}), set(todo))
        if self._headers is None:  # the files' contents do not change during a run
            self._headers = self._class_headers()
        headers = self._headers
        definers = predicted_classes(headers, names.classes)
        predicted = frozenset(definers)
        words = names.words() | predicted
        mentioned = {path: spelled for path in self.files if (spelled := self.mentions.of(path, words) & predicted)}
        first = set(todo)
        later = [path for path in mentioned if path not in first and path not in self.outcomes and path not in self.reused]
        files = by_package(todo, self.workspace.size) + by_package(later, self.workspace.size)
        waits: dict[str, set[str]] = {}
        for path in files:
            defined = {name for name, _ in headers.get(path, ())}
            waits[path] = {definer for name in mentioned.get(path, set()) - defined for definer in definers[name]}
        return RunFeed(self, names, Schedule(files, waits), first)

    def _class_headers(self) -> dict[str, Headers]:
        """Every file's class headers: the cache's for a file whose digest they were read with,
        read again for the others (reading transformers' 2,912 files took 0.28 s of a warm
        run that re-analysed 80 files after an edit)."""
        cache = self.reuse.cache
        known = cache.load_headers() if cache is not None else {}
        kept: dict[str, tuple[str, Headers]] = {}
        found: dict[str, Headers] = {}
        read = False
        for path in self.files:
            digest = self.workspace.digest(path)
            if digest is None:
                continue
            recorded = known.get(path)
            if recorded is None or recorded[0] != digest:
                recorded = (digest, class_headers(self.workspace.data(path) or b""))
                read = True
            kept[path] = recorded
            if recorded[1]:
                found[path] = recorded[1]
        if cache is not None and (read or len(kept) != len(known)):
            cache.save_headers(kept)
        return found

    def _select(self, words: frozenset[str], names: Names) -> tuple[list[str], list[str]]:
        """Candidates to analyse now, and those whose cached entry may still match once more
        names are known; candidates whose entry matches are taken from the cache (their
        names join `names`)."""
        todo: list[str] = []
        waiting: list[str] = []
        for path in self.files:
            hits = self.mentions.of(path, words)
            if not hits:
                continue
            entry = self.reuse.analysis(path)
            key = hits - self._own(path, entry)
            if self.keys.get(path) == key:
                continue  # answered for these names already
            if entry is not None and path not in self.outcomes:
                if entry.key == key:
                    self.keys[path] = key
                    self.reused.add(path)
                    names.update(entry.names.thawed())
                    continue
                if key < entry.key:
                    waiting.append(path)
                    continue
            todo.append(path)
        return todo, waiting

    def _own(self, path: str, entry: CacheEntry | None) -> frozenset[str]:
        outcome = self.outcomes.get(path)
        if outcome is not None:
            return outcome.names.words()
        if entry is not None:
            return entry.names.words()
        return frozenset()

    def _syntax_known(self, path: str) -> bool:
        """Whether a named file's parse is already known: done in this run, or cached."""
        return path in self.outcomes or path in self.unreadable or self.reuse.syntax_checked(path)

    def _root(self, path: str) -> Path:
        """The file's import root, memoised per directory for this run only (a package marker
        added later, in a long-running language server, moves it)."""
        directory = os.path.dirname(path)
        root = self._roots.get(directory)
        if root is None:
            root = self._roots[directory] = import_root(Path(path))
        return root

    def _record(self, outcome: Outcome, words: frozenset[str]) -> None:
        """Keep an outcome; an analysis is keyed by the names it ran with (`words`)."""
        path = outcome.path
        if outcome.internal_error is not None:
            # its outcome is not kept, so the names it added are not its own when it is selected
            # again (`_own`): key it as `_select` will, or it is analysed again for ever
            self.keys[path] = self.mentions.of(path, words) - self._own(path, self.reuse.analysis(path))
        elif outcome.analysed:
            self.keys[path] = self.mentions.of(path, words) - outcome.names.words()
        if outcome.unreadable is not None:
            self.unreadable.add(path)
            if path in self.named_set:
                display = display_path(path, self.linter.base)
                self.problems.append(PathProblem(display, f"cannot read file: {outcome.unreadable}"))
            return
        if outcome.internal_error is not None:
            display = display_path(path, self.linter.base)
            last = outcome.internal_error.strip().splitlines()[-1]
            message = (
                f"internal error while analysing this file ({last}); its findings are missing. "
                f"Please report it at {ISSUES_URL} with this output:\n{outcome.internal_error.rstrip()}"
            )
            self.problems.append(PathProblem(display, message))
            return
        self.outcomes[path] = outcome
        self.reused.discard(path)
        for dependency, digest in outcome.dependencies.items():
            self.workspace.learn(dependency, digest)

    # -- results ----------------------------------------------------------------

    def _raw_findings(self) -> list[Finding]:
        """Each candidate's findings, and the parse errors of named files that are not one."""
        raw: list[Finding] = []
        candidates = set(self.candidates)
        for path in self.files:
            if path not in candidates and path not in self.named_set:
                continue
            outcome = self.outcomes.get(path)
            findings: Sequence[Finding] | None
            if outcome is not None:
                findings = outcome.findings
            elif path in candidates and path not in self.reused:
                continue  # its analysis failed (reported as a problem)
            else:
                findings = self.reuse.findings(path)
                if findings is None:
                    continue
            if path not in candidates:
                own = display_path(path, self.linter.base)
                findings = [f for f in findings if f.code == "CKP000" and f.path == own]
            raw.extend(findings)
        return raw

    def _merge(self) -> LintResult:
        linter = self.linter
        result = LintResult(problems=self.problems)
        unreadable = {problem.path for problem in self.problems}
        result.linted = [p for p in self.named if self.workspace.digest(p) is not None]
        result.files = len(result.linted)
        for path in self.named:
            if self.workspace.digest(path) is None and display_path(path, linter.base) not in unreadable:
                result.problems.append(PathProblem(display_path(path, linter.base), "cannot read file"))
        named_paths = {display_path(path, linter.base) for path in result.linted}
        in_scope = [
            f for f in merge_findings(self._raw_findings()) if f.path in named_paths or any(s.path in named_paths for s in f.sites)
        ]
        wanted = {f.path for f in in_scope} | {s.path for f in in_scope for s in f.sites}
        if linter.config.report_unused_noqa:
            wanted |= named_paths
        result.sources = self._sources(wanted)
        kept, result.suppressions = apply_suppressions(in_scope, result.sources)
        if linter.config.report_unused_noqa:
            kept.extend(_unused_noqa(named_paths, result))
        result.findings = sorted(f for f in kept if linter.selected(f.code, f.path))
        result.calls = [call for path in self.named for call in self._calls(path)]
        result.analysed = sum(1 for outcome in self.outcomes.values() if outcome.analysed)
        result.reused = len(self.reused)
        return result

    def _calls(self, path: str) -> Sequence[dict[str, object]]:
        """A named file's described checkpoint calls: this run's analysis, else the cache's."""
        outcome = self.outcomes.get(path)
        if outcome is not None:
            return outcome.calls
        if path in self.reused:
            entry = self.reuse.analysis(path)
            return entry.calls if entry is not None else ()
        return ()

    def _sources(self, display_paths: set[str]) -> dict[str, SourceFile]:
        sources: dict[str, SourceFile] = {}
        for display in display_paths:
            absolute = os.path.abspath(os.path.join(self.linter.base, display))
            content = self.workspace.content(absolute)
            if content is None:
                continue
            try:
                sources[display] = load_source(Path(absolute), display, content)
            except DecodeError:
                continue
        return sources


class RunFeed:
    """What one pass of the run's loop hands its workers (parallel.Feed): the schedule's files,
    the names as they grow, and each outcome recorded as its job ends."""

    def __init__(self, run: Run, names: Names, schedule: Schedule, first: set[str]) -> None:
        self.run = run
        self._names = names  # the run's: grown here as outcomes come
        self.schedule = schedule
        self.first = first  # selected by the loop; the others only if a name they mention came

    def __len__(self) -> int:
        return len(self.schedule)

    def __contains__(self, path: str) -> bool:
        return path in self.schedule

    def names(self) -> Names:
        return self._names

    def take(self, count: int) -> list[str]:
        return self.schedule.take(count, self._wanted)

    def _wanted(self, path: str) -> bool:
        """A file not selected is analysed here only as a new candidate without a cache entry
        (the loop's next pass takes cached entries and files whose names moved)."""
        if path in self.first:
            return True
        run = self.run
        return path not in run.outcomes and run.reuse.analysis(path) is None and bool(run.mentions.of(path, self._names.words()))

    def record(self, outcomes: list[Outcome], edges: dict[str, ModuleEdges], names: Names) -> None:
        """Keep a job's outcomes, keyed by the names it ran with; grow the names from them."""
        run = self.run
        run.reuse.add_edges(edges)
        words = names.words()
        for outcome in outcomes:
            run._record(outcome, words)
            if run.outcomes.get(outcome.path) is outcome:
                self._names.update(outcome.names)
        self.schedule.done(outcome.path for outcome in outcomes)

    def unblock(self) -> bool:
        return self.schedule.unblock()

    def retry(self, paths: list[str]) -> None:
        self.schedule.retry(paths)


def _unused_noqa(named_paths: set[str], result: LintResult) -> list[Finding]:
    findings = []
    for path in sorted(named_paths):
        source = result.sources.get(path)
        if source is None:
            continue
        suppressions = result.suppressions.get(path) or suppressions_for(source)
        for comment, codes in suppressions.unused():
            end = comment.column + len(comment.text)
            summary = f"unused `# noqa` for {', '.join(codes)}: no such finding on this line"
            findings.append(Finding(path, comment.line, comment.column, "CKP001", summary, comment.line, end))
    return findings

