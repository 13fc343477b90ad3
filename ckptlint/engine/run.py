"""One `Linter.lint_files` call: which files to analyse, what the cache answers, the merge.

The selection loop grows the names that can mean checkpointing until no new one turns up
(see `Run`); the merge scopes findings to the named files, applies `# noqa` and selection.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from ckptlint.engine.cache import Cache, Index, cache_key
from ckptlint.engine.parallel import execute
from ckptlint.engine.worker import ISSUES_URL, Outcome
from ckptlint.engine.workspace import Workspace
from ckptlint.finding import Finding, merge_findings
from ckptlint.noqa import apply_suppressions, suppressions_for
from ckptlint.prefilter import Mentions, Names
from ckptlint.project import display_path, import_root, load_source
from ckptlint.result import LintResult, PathProblem
from ckptlint.source import DecodeError, SourceFile

if TYPE_CHECKING:
    from ckptlint.engine.linter import Linter

ANALYSED, SYNTAX, SKIPPED = "analysed", "syntax", "skipped"


class Run:
    """One `lint_files` call: which files to analyse, what the cache answers, the merge.

    The names that can mean checkpointing grow from the catalogue's: a file that mentions
    a known name is a candidate, and analysing it can add names (its `own`). A candidate's
    analysis depends on the names only through those it mentions that it does not add
    itself (its `key`), so a cached analysis is reused when its content, its dependencies
    and its key are what they would be now. Reuse follows the same growth from the
    catalogue as a run without a cache, so both reach the same names and the same results:
    a name is never taken from an entry whose file is not (yet) a candidate.
    """

    def __init__(self, linter: Linter, named: list[str], others: list[str]):
        self.linter = linter
        self.named = named
        self.named_set = set(named)
        self.files = [*named, *others]
        self.settings = linter.settings()
        use_cache = linter.cache_dir is not None and not linter.want_calls
        self.cache = Cache(linter.cache_dir, cache_key(self.settings.config, self.settings.base, self.settings.rules, self.settings.want_fixes)) if use_cache else None  # type: ignore[arg-type]
        self.index = self.cache.load() if self.cache is not None else Index()
        self.workspace = Workspace(linter.overlays, self.index.stats)
        self.mentions = Mentions(self.workspace.data, self._recorded_mentions())
        # sorted: which root wins a top-level name two roots define must not depend on the named files
        self._roots: dict[str, Path] = {}
        self.roots = sorted({os.fspath(self._root(p)) for p in self.files})
        self.outcomes: dict[str, Outcome] = {}
        self.keys: dict[str, frozenset[str]] = {}  # candidate -> the key its result (fresh or cached) has
        self.reused: set[str] = set()  # candidates answered from the cache
        self.unreadable: set[str] = set()  # files that could not be read when analysed
        self._valid: dict[str, dict | None] = {}  # memo of _entry
        self.problems: list[PathProblem] = []
        self.edges: dict[str, list] | None = None  # path -> [digest, module names], from the cache
        self.new_edges: dict[str, list] = {}  # the same, from this run's workers
        self.changed_modules = self._added_or_removed_modules()

    def execute(self) -> LintResult:
        names = Names.of(self.linter.catalogue)
        while True:
            words = names.words()
            todo, waiting = self._select(words, names)
            if names.words() != words:
                continue  # cached entries added names: take those in before analysing anything
            todo = todo or waiting  # an entry that never matched is redone once nothing else moves
            syntax = [p for p in self.named if not self.mentions.of(p, words) and not self._syntax_cached(p)]
            if not todo and not syntax:
                break
            outcomes, edges = execute(self.settings, names, self.roots, todo, syntax, self.linter.jobs, self.workspace.size)
            self.new_edges.update(edges)
            for outcome in outcomes:
                self._record(outcome, words)
            for path in todo:
                outcome = self.outcomes.get(path)
                if outcome is not None:
                    names.update(outcome.names)
        self.names = names
        self.candidates = [p for p in self.files if self.mentions.of(p, names.words())]
        result = self._merge()
        if self.cache is not None and self._changed():
            self._save()
        return result

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
            entry = self._entry(path)
            key = hits - self._own(path, entry)
            if self.keys.get(path) == key:
                continue  # answered for these names already
            if entry is not None and path not in self.outcomes:
                cached = frozenset(entry["key"])
                if cached == key:
                    self.keys[path] = key
                    self.reused.add(path)
                    names.update(Names(set(entry["names"][0]), set(entry["names"][1])))
                    continue
                if key < cached:
                    waiting.append(path)
                    continue
            todo.append(path)
        return todo, waiting

    def _own(self, path: str, entry: dict | None) -> frozenset[str]:
        outcome = self.outcomes.get(path)
        if outcome is not None:
            return outcome.names.words()
        if entry is not None:
            return frozenset(entry["names"][0]) | frozenset(entry["names"][1])
        return frozenset()

    def _changed(self) -> bool:
        """Whether the index would differ: something analysed, read, added or removed."""
        if self.outcomes or self.names.words() != frozenset(self.index.names[0]) | frozenset(self.index.names[1]):
            return True
        if set(self.files) != set(self.index.files):
            return True
        return self.workspace.stats() != self.index.stats

    # -- the cache ----------------------------------------------------------------

    def _recorded_mentions(self) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
        universe = frozenset(self.index.names[0]) | frozenset(self.index.names[1])
        recorded = {}
        for path, entry in self.index.entries.items():
            if "hits" in entry and self.workspace.digest(path) == entry.get("digest"):
                recorded[path] = (universe, frozenset(entry["hits"]))
        return recorded

    def _entry(self, path: str) -> dict | None:
        """The cached analysis of this file if its content and dependencies are unchanged."""
        if path not in self._valid:
            self._valid[path] = self._valid_entry(path)
        return self._valid[path]

    def _valid_entry(self, path: str) -> dict | None:
        entry = self.index.entries.get(path)
        if entry is None or entry.get("kind") != ANALYSED or entry.get("digest") != self.workspace.digest(path):
            return None
        if self.changed_modules is None:
            return None
        if any(self.workspace.digest(dep) != digest for dep, digest in entry["deps"].items()):
            return None
        if self.changed_modules and self._may_import(entry["deps"], self.changed_modules):
            return None
        return entry

    def _may_import(self, deps: dict[str, str], modules: list[str]) -> bool:
        """Whether a dependency's code names one of these (new or removed) modules; unknown
        edges count as yes. The edges table is read only when files were added or removed."""
        if self.edges is None:
            self.edges = self.cache.load_edges() if self.cache is not None else {}
        for dep, digest in deps.items():
            known = self.new_edges.get(dep) or self.edges.get(dep)
            if known is None or known[0] != digest or _imports_any(known[1], modules):
                return True
        return False

    def _syntax_cached(self, path: str) -> bool:
        if path in self.outcomes or path in self.unreadable:
            return True
        entry = self.index.entries.get(path)
        return entry is not None and entry.get("kind") in (SYNTAX, ANALYSED) and entry.get("digest") == self.workspace.digest(path)

    def _added_or_removed_modules(self) -> list[str] | None:
        """Every name the modules added or removed since the cached run can be imported as;
        None when a package marker (`__init__.py`) came or went, which renames the modules
        below it, or when the import roots changed, which changes what top-level names mean."""
        changed = set(self.index.files) ^ set(self.files)
        if not self.index.files or not changed:
            return []
        if any(Path(p).stem == "__init__" for p in changed):
            return None
        if {os.fspath(self._root(p)) for p in self.index.files} != set(self.roots):
            return None
        names: set[str] = set()
        for path in changed:
            for root in self.roots:  # a directory without `__init__.py` is a namespace package from any root above it
                if path.startswith(root.rstrip(os.sep) + os.sep):
                    parts = list(Path(os.path.relpath(path, root)).with_suffix("").parts)
                    if parts and parts[-1] == "__init__":
                        parts.pop()
                    names.add(".".join(parts))
        return sorted(names)

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
        if outcome.analysed or outcome.internal_error is not None:
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

    # -- results ----------------------------------------------------------------

    def _raw_findings(self) -> list[Finding]:
        """Each candidate's findings, and the parse errors of named files that are not one."""
        raw: list[Finding] = []
        candidates = set(self.candidates)
        for path in self.files:
            if path not in candidates and path not in self.named_set:
                continue
            outcome = self.outcomes.get(path)
            if outcome is not None:
                findings = outcome.findings
            elif path in candidates and path not in self.reused:
                continue  # its analysis failed (reported as a problem)
            else:
                entry = self.index.entries.get(path)
                if entry is None or entry.get("kind") == SKIPPED or entry.get("digest") != self.workspace.digest(path):
                    continue
                findings = [Finding.from_dict(data) for data in entry["findings"]]
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
        result.calls = [call for path in self.named for call in (self.outcomes[path].calls if path in self.outcomes else ())]
        result.analysed = sum(1 for outcome in self.outcomes.values() if outcome.analysed)
        return result

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

    def _save(self) -> None:
        entries: dict[str, dict] = {}
        words = self.names.words()
        for path in self.files:
            digest = self.workspace.digest(path)
            if digest is None:
                continue
            outcome = self.outcomes.get(path)
            old = self.index.entries.get(path)
            if outcome is not None and outcome.analysed:
                entry = {
                    "kind": ANALYSED,
                    "digest": outcome.digest,
                    "findings": [f.to_dict() for f in outcome.findings],
                    "names": [sorted(outcome.names.functions), sorted(outcome.names.classes)],
                    "deps": outcome.dependencies,
                    "key": sorted(self.keys[path]),
                }
            elif outcome is not None:
                entry = {"kind": SYNTAX, "digest": outcome.digest, "findings": [f.to_dict() for f in outcome.findings]}
            elif old is not None and old.get("digest") == digest:
                entry = dict(old)
            else:
                entry = {"kind": SKIPPED, "digest": digest}
            entry["hits"] = sorted(self.mentions.of(path, words))
            entries[path] = entry
        assert self.cache is not None
        names = [sorted(self.names.functions), sorted(self.names.classes)]
        self.cache.save(Index(entries, self.workspace.stats(), names, self.files))
        if self.new_edges:
            edges = self.edges if self.edges is not None else self.cache.load_edges()
            edges.update(self.new_edges)
            self.cache.save_edges(edges)


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


def _imports_any(imports: Iterable[str], modules: list[str]) -> bool:
    """Whether a new or removed module could be one of these imports or under one of them."""
    for name in imports:
        for module in modules:
            if name == module or name.startswith(module + ".") or module.startswith(name + "."):
                return True
    return False
