"""The pipeline: discover -> prefilter -> analyse (in parallel, or from the cache) -> merge ->
scope -> suppress -> select.

`Linter` is what the CLI, the flake8 plugin and the language server use. It never
raises for bad input: unreadable paths become `problems`, unparsable files CKP000, and
an internal error in one file is a problem naming the file while the others' findings
are still reported.

Scope: a region hazard usually lives in another file than the call that replays it
(a block's module vs the model's). With a project root, checkpoint calls are looked
for in the whole project, and a finding is reported when it lies in a file the user
named or is reached from a checkpoint call in one. So `pre-commit` on a changed
block file, `flake8` (one file at a time) and a full run agree.

Only files that can hold a checkpoint call are analysed (prefilter.py); the names they
add for checkpoint APIs can make more files eligible, so selection and analysis repeat
until no new name turns up. Named files that cannot hold a call are only parsed (CKP000).
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from ckptlint.cache import Cache, Index, cache_key
from ckptlint.catalogue import DEFAULT_CATALOGUE, Catalogue
from ckptlint.config import Config
from ckptlint.discovery import ExcludeMatcher, PathProblem, discover
from ckptlint.finding import Finding, merge_findings
from ckptlint.noqa import Suppressions, apply_suppressions, suppressions_for
from ckptlint.parallel import execute
from ckptlint.prefilter import ByteFilter, Names
from ckptlint.project import display_path, import_root, load_source
from ckptlint.rules import ALL_RULES, Rule
from ckptlint.source import DecodeError, SourceFile
from ckptlint.worker import ISSUES_URL, Outcome, Settings, external_name
from ckptlint.workspace import Workspace

ANALYSED, SYNTAX, SKIPPED = "analysed", "syntax", "skipped"


@dataclass
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    problems: list[PathProblem] = field(default_factory=list)
    files: int = 0
    calls: list[dict] = field(default_factory=list)  # described checkpoint calls of the named files
    suppressions: dict[str, Suppressions] = field(default_factory=dict)
    sources: dict[str, SourceFile] = field(default_factory=dict)  # by display path, for files with findings
    linted: list[str] = field(default_factory=list)  # absolute paths of the named files read
    analysed: int = 0  # files analysed in this run (the rest came from the cache or were not needed)

    @property
    def fatal(self) -> bool:
        return any(problem.fatal for problem in self.problems)


class Linter:
    """Lints files of one project with one configuration."""

    def __init__(
        self,
        config: Config,
        overlays: dict[Path, bytes | str] | None = None,
        base: Path | None = None,
        jobs: int = 1,
        cache_dir: Path | None = None,
        want_fixes: bool = False,
        want_calls: bool = False,
    ):
        self.config = config
        self.base = base or Path.cwd()
        self.is_excluded = ExcludeMatcher(config.all_excludes, config.root)
        self.catalogue: Catalogue = DEFAULT_CATALOGUE.extended(config.checkpoint_functions)
        self.overlays = {os.path.abspath(path): text for path, text in (overlays or {}).items()}
        self.jobs = max(1, jobs)
        self.cache_dir = cache_dir
        self.want_fixes = want_fixes
        self.want_calls = want_calls
        self.rules: list[Rule] = [rule for rule in ALL_RULES if self.selected(rule.code)]

    def has_overlay(self, path: Path) -> bool:
        return os.path.abspath(path) in self.overlays

    # -- selection ------------------------------------------------------------

    def selected(self, code: str, path: str | None = None) -> bool:
        """flake8's decision: the most specific matching prefix of select vs ignore wins."""
        config = self.config
        chosen = _longest_prefix(code, config.select + config.extend_select)
        ignored = _longest_prefix(code, config.ignore + self._file_ignores(path))
        return chosen > ignored

    def _file_ignores(self, path: str | None) -> tuple[str, ...]:
        if path is None or not self.config.per_file_ignores:
            return ()
        absolute = Path(os.path.abspath(self.base / path))
        try:
            relative = absolute.relative_to(Path(os.path.abspath(self.config.root))).as_posix()
        except ValueError:
            relative = absolute.as_posix()
        codes: list[str] = []
        for pattern, pattern_codes in self.config.per_file_ignores:
            if fnmatch.fnmatchcase(relative, pattern) or fnmatch.fnmatchcase(absolute.name, pattern):
                codes.extend(pattern_codes)
        return tuple(codes)

    # -- linting --------------------------------------------------------------

    def lint_paths(self, paths: Sequence[Path], force_exclude: bool = False, project_root: Path | None = None) -> LintResult:
        discovered = discover(paths, self.is_excluded, force_exclude)
        return self.lint_files(discovered.files, discovered.problems, project_root)

    def lint_files(
        self, files: Iterable[Path], problems: Iterable[PathProblem] = (), project_root: Path | None = None
    ) -> LintResult:
        """Lint `files`; with `project_root`, also follow checkpoint calls in the rest of the project."""
        named = list(dict.fromkeys(os.path.abspath(file) for file in files))
        named_set = set(named)
        others = [p for p in dict.fromkeys(os.path.abspath(f) for f in self._project_files(project_root)) if p not in named_set]
        run = _Run(self, named, others)
        result = run.execute()
        result.problems = sorted([*problems, *result.problems], key=lambda p: p.path)
        return result

    def settings(self) -> Settings:
        codes = tuple(rule.code for rule in self.rules)
        overlays = tuple(sorted(self.overlays.items()))
        return Settings(self.config, os.fspath(self.base), codes, self.want_fixes, self.want_calls, overlays)

    def _project_files(self, project_root: Path | None) -> list[Path]:
        if project_root is None:
            return []
        return discover([project_root], self.is_excluded).files


class _Run:
    """One `lint_files` call: which files to analyse, what the cache answers, the merge."""

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
        self.roots = list(dict.fromkeys(os.fspath(_root(Path(p))) for p in self.files))
        self.outcomes: dict[str, Outcome] = {}
        self.analysed_with: dict[str, Names] = {}  # names a fresh analysis ran with
        self.problems: list[PathProblem] = []
        self._filters: dict[tuple[frozenset, frozenset], ByteFilter] = {}
        self.edges: dict[str, list] | None = None  # path -> [digest, module names], from the cache
        self.new_edges: dict[str, list] = {}  # the same, from this run's workers

    def execute(self) -> LintResult:
        names = self._starting_names()
        previous = Names(set(self.index.names[0]), set(self.index.names[1]))
        changed_modules = self._added_or_removed_modules()
        while True:
            byte_filter = ByteFilter(names)
            gained = Names(names.functions - previous.functions, names.classes - previous.classes)
            candidates = [p for p in self.files if self._wants(p, byte_filter, names == previous)]
            todo = [p for p in candidates if self._needs_analysis(p, names, gained, changed_modules)]
            syntax = [p for p in self.named if p not in set(candidates) and not self._syntax_cached(p)]
            if not todo and not syntax:
                break
            snapshot = names.copy()
            outcomes, edges = execute(self.settings, names, self.roots, todo, syntax, self.linter.jobs, self.workspace.size)
            self.new_edges.update(edges)
            for outcome in outcomes:
                self._record(outcome, snapshot)
            for path in todo:
                outcome = self.outcomes.get(path)
                if outcome is not None:
                    names.update(outcome.names)
            if names == snapshot:
                break
        final_filter, same = ByteFilter(names), names == previous
        self.candidates = [p for p in self.files if self._wants(p, final_filter, same)]
        result = self._merge()
        if self.cache is not None and self._changed(names, previous):
            self._save(names)
        return result

    def _changed(self, names: Names, previous: Names) -> bool:
        """Whether the index would differ: something analysed, read, added or removed."""
        if self.outcomes or names != previous or set(self.files) != set(self.index.files):
            return True
        return self.workspace.stats() != self.index.stats

    # -- selection and the cache ------------------------------------------------

    def _starting_names(self) -> Names:
        names = Names.of(self.linter.catalogue)
        for path, entry in self.index.entries.items():
            if entry.get("kind") == ANALYSED and entry.get("wants") and self.workspace.digest(path) == entry.get("digest"):
                names.functions.update(entry["names"][0])
                names.classes.update(entry["names"][1])
        return names

    def _wants(self, path: str, byte_filter: ByteFilter, same_names: bool) -> bool:
        if path in self.analysed_with:  # names only grow within a run
            return True
        entry = self.index.entries.get(path)
        digest = self.workspace.digest(path)
        if digest is None:
            return False
        if same_names and entry is not None and entry.get("digest") == digest and "wants" in entry:
            return bool(entry["wants"])
        data = self.workspace.data(path)
        return data is not None and byte_filter.wants(data)

    def _needs_analysis(self, path: str, names: Names, gained: Names, changed_modules: list[str]) -> bool:
        if path in self.analysed_with:  # analysed in this run: again only for names it did not know
            known = self.analysed_with[path]
            fresh = Names(names.functions - known.functions, names.classes - known.classes)
            return bool(fresh) and self._mentions(path, fresh)
        entry = self.index.entries.get(path)
        if entry is None or entry.get("kind") != ANALYSED or entry.get("digest") != self.workspace.digest(path):
            return True
        if any(self.workspace.digest(dep) != digest for dep, digest in entry["deps"].items()):
            return True
        if changed_modules and self._may_import(entry["deps"], changed_modules):
            return True
        return bool(gained) and self._mentions(path, gained)

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

    def _mentions(self, path: str, names: Names) -> bool:
        key = (frozenset(names.functions), frozenset(names.classes))
        byte_filter = self._filters.get(key)
        if byte_filter is None:
            byte_filter = self._filters[key] = ByteFilter(names)
        data = self.workspace.data(path)
        return data is not None and byte_filter.wants(data)

    def _syntax_cached(self, path: str) -> bool:
        if path in self.outcomes:
            return True
        entry = self.index.entries.get(path)
        return entry is not None and entry.get("kind") in (SYNTAX, ANALYSED) and entry.get("digest") == self.workspace.digest(path)

    def _added_or_removed_modules(self) -> list[str]:
        if not self.index.files:
            return []
        before, now = set(self.index.files), set(self.files)
        return sorted({_module_name(Path(p)) for p in before ^ now})

    def _record(self, outcome: Outcome, names: Names) -> None:
        path = outcome.path
        if outcome.unreadable is not None:
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
        if outcome.analysed:
            self.analysed_with[path] = names

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
        result.analysed = len(self.analysed_with)
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

    def _save(self, names: Names) -> None:
        entries: dict[str, dict] = {}
        candidates = set(self.candidates)
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
                }
            elif outcome is not None:
                entry = {"kind": SYNTAX, "digest": outcome.digest, "findings": [f.to_dict() for f in outcome.findings]}
            elif old is not None and old.get("digest") == digest:
                entry = dict(old)
            else:
                entry = {"kind": SKIPPED, "digest": digest}
            entry["wants"] = path in candidates
            entries[path] = entry
        assert self.cache is not None
        self.cache.save(Index(entries, self.workspace.stats(), [sorted(names.functions), sorted(names.classes)], self.files))
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


_ROOTS: dict[str, Path] = {}


def _root(path: Path) -> Path:
    directory = os.fspath(path.parent)
    root = _ROOTS.get(directory)
    if root is None:
        root = _ROOTS[directory] = import_root(path)
    return root


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(_root(path)).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return external_name(".".join(parts))


def _longest_prefix(code: str, prefixes: Iterable[str]) -> int:
    return max((len(p) for p in prefixes if code.startswith(p)), default=-1)


def lint_source(text: str, path: str = "example.py", config: Config | None = None) -> list[Finding]:
    """Lint one module given as text (it is never written to disk): for tests, docs and tools."""
    base = Path.cwd()
    config = config or Config(root=base)
    target = base / path
    linter = Linter(config, overlays={target: text}, base=base)
    return linter.lint_files([target]).findings
