"""What the last run's index still answers for this one, and the index this run leaves.

A file's mentions, parse and findings stand while its content is unchanged. An analysis
also depends on every module its result was computed from (its `deps`): on their code, not
their comments (code_text.py), so a dependency whose code digest is the one recorded with its
old content leaves the analysis standing, its `deps` renewed. It depends on modules that
did not exist too: adding or removing a module can change what an unchanged import resolves to.
So an analysis is redone when a dependency's import could name an added or removed module
(the import edges say which; they are read only when files came or went), and nothing
stands when a package marker (`__init__.py`) came or went, which renames the modules below
it, or the import roots changed, which changes what top-level names mean. An analysis
that ran fewer rules than this run needs (cache.RuleSet), or described its calls without the
static cost hints this run wants (`ckptlint calls`), is redone. Whether an analysis's
key matches the names is the run's question (run.py): the names are grown there.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from ckptlint.code_text import code_digest, strip_comments
from ckptlint.context_prefilter import COMPILE_WORD, CONTEXT_WORDS, FLAG_WORD, OFFLOAD_WORDS, ContextFiles, context_stem
from ckptlint.engine.cache import Cache, CacheEntry, EntryKind, FrozenNames, Index, ModuleEdges, RuleSet
from ckptlint.engine.worker import Outcome
from ckptlint.engine.workspace import Workspace
from ckptlint.finding import Finding
from ckptlint.prefilter import Mentions, Names, whole_words
from ckptlint.project import code_words, import_root
from ckptlint.source import DecodeError, decode_source

CLASS_NAME = re.compile(rb"\bclass[\s\\]+(\w+)")  # `class \` then a new line too


class Reuse:
    """The loaded index seen from this run's files: which entries still hold, and the next index."""

    def __init__(
        self,
        cache: Cache | None,
        index: Index,
        workspace: Workspace,
        files: Sequence[str],
        roots: Sequence[str],
        rule_set: RuleSet = RuleSet.ALL,
        want_hints: bool = False,
    ) -> None:
        self.cache = cache  # None: nothing is written
        self.index = index
        self.workspace = workspace
        self.files = files
        self.roots = roots  # this run's import roots
        self.rule_set = rule_set  # the rules this run's analyses run: a cached one must cover them
        self.want_hints = want_hints  # this run describes static cost hints: a cached analysis must have them
        self._analyses: dict[str, CacheEntry | None] = {}  # memo of `analysis`
        self._edges: dict[str, ModuleEdges] | None = None  # the cache's, read when first needed
        self._new_edges: dict[str, ModuleEdges] = {}  # this run's workers'
        self._changed_files: set[str] = set()  # files added or removed since the cached run
        self._spelled_modules: list[str] | None = None  # memo of `_spelled`
        self._reaches: dict[tuple[str, str], bool] = {}  # (dependency, digest) -> `_dependency_may_import`
        self._same_code_memo: dict[tuple[str, str], bool] = {}  # (dependency, recorded digest) -> `_same_code`
        self._code_now: dict[str, str | None] = {}  # dependency -> its current code digest
        self._carried_edges: dict[str, ModuleEdges] = {}  # a dependency's edges under its new digest (same code)
        self._renewed: dict[str, dict[str, str]] = {}  # path -> the deps whose digest changed, not their code
        self._changed_modules = self._added_or_removed_modules()
        self._new_context: list[tuple[str, frozenset[str], frozenset[bytes]]] = []  # see `note_context_files`
        self._named_beside: list[tuple[str, frozenset[str]]] | None = None  # see `_named_beside_by_changed_files`
        self._class_names: dict[str, frozenset[bytes] | None] = {}  # module -> the class names its bytes spell
        self._new_words: dict[str, frozenset[bytes] | None] = {}  # memo of `_new_code_words`

    def note_context_files(self, found: ContextFiles) -> None:
        """This run's context files (context_prefilter.py), before any entry is asked for.
        An analysis reads a context file outside its module's directory only when the file
        spells the module's name (analysis/contexts/execution.py), and only then records it as
        a dependency; a context file that changed or came since the cached run may spell a
        name it did not. So each such file redoes the entries of the modules beside it and of
        those it now names, and one that spells the side-effect flag (global configuration)
        every entry under its import root."""
        self._analyses.clear()
        self._new_context = []
        for path, words in found:
            spelled = self._new_code_words(path)
            if spelled is not None:
                self._new_context.append((path, words, spelled))

    # -- what stands ----------------------------------------------------------------

    def recorded_mentions(self) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
        """path -> (the names the last run knew, those the file mentions), for each file whose
        content is unchanged: `Mentions` then reads only files that changed."""
        universe = self.index.names.words() | CONTEXT_WORDS  # saved with them: a warm run reads no file for either
        entries = self.index.entries.items()
        return {path: (universe, entry.hits) for path, entry in entries if entry.digest == self.workspace.digest(path)}

    def analysis(self, path: str) -> CacheEntry | None:
        """The file's cached analysis if its content and dependencies are unchanged."""
        if path not in self._analyses:
            self._analyses[path] = self._standing_analysis(path)
        return self._analyses[path]

    def syntax_checked(self, path: str) -> bool:
        """Whether the file was parsed (alone or analysed) with its current content."""
        entry = self._current(path)
        return entry is not None and entry.kind in (EntryKind.SYNTAX, EntryKind.ANALYSED)

    def findings(self, path: str) -> Sequence[Finding] | None:
        """The file's cached findings (an analysis's, or a parse's CKP000) if its content is unchanged."""
        entry = self._current(path)
        if entry is None or entry.kind is EntryKind.SKIPPED:
            return None
        return entry.findings

    def add_edges(self, edges: Mapping[str, ModuleEdges]) -> None:
        """Import edges this run's workers reported: newer than the cache's, and saved with it."""
        self._new_edges.update(edges)

    def _current(self, path: str) -> CacheEntry | None:
        entry = self.index.entries.get(path)
        return entry if entry is not None and entry.digest == self.workspace.digest(path) else None

    def _standing_analysis(self, path: str) -> CacheEntry | None:
        entry = self._current(path)
        if entry is None or entry.kind is not EntryKind.ANALYSED or self._changed_modules is None:
            return None
        if not entry.rules.covers(self.rule_set) or (self.want_hints and not entry.has_hints):
            return None
        if self._new_context and self._context_may_reach(path, entry):
            return None
        if any(changed not in entry.deps and not named.isdisjoint(entry.deps) for changed, named in self._named_beside_by_changed_files()):
            return None
        changed = [dep for dep, digest in entry.deps.items() if self.workspace.digest(dep) != digest]
        if not all(dep != path and self._same_code(dep, entry.deps[dep]) for dep in changed):
            return None
        if self._changed_modules and self._may_import(entry.deps, self._changed_modules):
            return None
        if changed:
            self._renewed[path] = {dep: digest for dep in changed if (digest := self.workspace.digest(dep)) is not None}
        return entry

    def _named_beside_by_changed_files(self) -> list[tuple[str, frozenset[str]]]:
        """(a file changed or added since the cached run, the modules beside it that it names
        with one of their classes). An analysis reads the modules beside a class's own that name
        the class and its module (analysis/semantics/modules_beside.py) and records those it
        read, not those it tested and passed over: a file that changed may name one now. So an
        entry that depends on a module a changed file beside it names, together with a class
        that module defines, and not on that file, is redone. Naming the module alone is not
        enough (transformers' `modeling_gguf_pytorch_utils.py` spells `__init__`, the stem of its
        package's initialiser, which defines no class: an edit of it redid the 212 entries that
        depend on the initialiser)."""
        if self._named_beside is None:
            self._named_beside = []
            by_directory: dict[str, list[str]] = {}
            for path in self.files:
                by_directory.setdefault(os.path.dirname(path), []).append(path)
            for path in self.files:
                spelled = self._new_code_words(path)
                if spelled is None:
                    continue
                named = frozenset(
                    other
                    for other in by_directory[os.path.dirname(path)]
                    if other != path and os.path.basename(other)[:-3].encode() in spelled and self._names_a_class_of(spelled, other)
                )
                if named:
                    self._named_beside.append((path, named))
        return self._named_beside

    def _names_a_class_of(self, spelled: frozenset[bytes], module: str) -> bool:
        """Whether `spelled` holds the name of a class `module` defines (any `class NAME` its
        bytes spell, comments and strings too: more names only redo more); yes when it cannot be read."""
        if module not in self._class_names:  # asked once per module, unreadable ones too
            data = self.workspace.data(module)
            self._class_names[module] = None if data is None else frozenset(CLASS_NAME.findall(data))
        classes = self._class_names[module]
        return classes is None or not classes.isdisjoint(spelled)

    def _new_code_words(self, path: str) -> frozenset[bytes] | None:
        """The words of the file's code if it is new since the cached run or its code changed;
        None otherwise (a comment edit cannot make it name anything) or when it cannot be read.
        Memoised: the context files are also among the project's files."""
        if path not in self._new_words:
            self._new_words[path] = None
            entry = self.index.entries.get(path)
            if entry is None or entry.digest != self.workspace.digest(path):
                recorded = self._recorded_edges(path, entry.digest) if entry is not None else None
                if recorded is None or recorded[3] is None or recorded[3] != self._current_code(path):
                    data = self.workspace.data(path)
                    self._new_words[path] = code_words(data) if data is not None else None
        return self._new_words[path]

    def _context_may_reach(self, path: str, entry: CacheEntry) -> bool:
        """Whether a context file that changed or came (`note_context_files`) and that the
        entry's analysis did not record can now say how the file's calls run."""
        directory = os.path.dirname(path)
        stem = context_stem(path).encode()
        for context, words, spelled in self._new_context:
            if context == path or context in entry.deps:
                continue  # its own, or recorded: its digest decides
            if FLAG_WORD in words and import_root(Path(context)) == import_root(Path(path)):
                return True
            if words & (OFFLOAD_WORDS | {COMPILE_WORD}) and (os.path.dirname(context) == directory or stem in spelled):
                return True
        return False

    def _same_code(self, dep: str, digest: str) -> bool:
        """Whether a dependency whose content changed from `digest` kept its code (only
        comments, or blank lines at its end, changed): the edges table holds the code digest
        of the content each dependency had when last read."""
        key = (dep, digest)
        found = self._same_code_memo.get(key)
        if found is None:
            recorded = self._recorded_edges(dep, digest)
            found = False
            if recorded is not None and recorded[3] is not None and recorded[3] == self._current_code(dep):
                found = True
                now = self.workspace.digest(dep)
                if now is not None:  # its imports are its code's: the same under the new digest
                    self._carried_edges.setdefault(dep, (now, *recorded[1:]))
            self._same_code_memo[key] = found
        return found

    def _recorded_edges(self, dep: str, digest: str) -> ModuleEdges | None:
        for table in (self._new_edges, self._loaded_edges()):
            known = table.get(dep)
            if known is not None and known[0] == digest:
                return known
        return None

    def _current_code(self, dep: str) -> str | None:
        if dep not in self._code_now:
            content = self.workspace.content(dep)
            code = None
            if content is not None:
                try:
                    code = strip_comments(decode_source(content) if isinstance(content, bytes) else content)
                except DecodeError:
                    pass
            self._code_now[dep] = code_digest(code)
        return self._code_now[dep]

    def _loaded_edges(self) -> dict[str, ModuleEdges]:
        """The cache's edges table, read when first needed (files came or went, or a dependency changed)."""
        if self._edges is None:
            self._edges = self.cache.load_edges() if self.cache is not None else {}
        return self._edges

    def _may_import(self, deps: Mapping[str, str], modules: list[str]) -> bool:
        """Whether a dependency's code names one of these (new or removed) modules; unknown
        edges count as yes."""
        self._loaded_edges()
        for dep, digest in deps.items():
            found = self._reaches.get((dep, digest))
            if found is None:  # most entries share most dependencies: each is asked once
                found = self._reaches[(dep, digest)] = self._dependency_may_import(dep, digest, modules)
            if found:
                return True
        return False

    def _dependency_may_import(self, dep: str, digest: str, modules: list[str]) -> bool:
        known = self._new_edges.get(dep) or (self._edges or {}).get(dep)
        if known is None or known[0] != digest or _imports_any(known[1], modules):
            return True
        return bool(known[2]) and _below_any(known[2], self._spelled(modules))

    def _spelled(self, modules: list[str]) -> list[str]:
        """The modules whose last name some project file other than their own spells (any case,
        as a whole word). A package used whole (`p = pkg`, `getattr(pkg, name)`) reaches a
        submodule only through an attribute or a string that names it, and the analysis reads
        no name it is not given: transformers' `getattr(transformers, c)` in pipelines/__init__.py
        no longer makes a scratch module beside a model a change for every file reaching it.
        Every project file is read once, and only when such a use meets an added or removed file."""
        if self._spelled_modules is None:
            wanted = frozenset(module.rpartition(".")[2].lower().encode() for module in modules)
            found: set[bytes] = set()
            for path in self.files:
                data = self.workspace.data(path) if path not in self._changed_files else None
                if data is not None:
                    found |= whole_words(data.lower(), wanted - found)
                if found == wanted:
                    break
            self._spelled_modules = [module for module in modules if module.rpartition(".")[2].lower().encode() in found]
        return self._spelled_modules

    def _added_or_removed_modules(self) -> list[str] | None:
        """Every name the modules added or removed since the cached run can be imported as;
        None when a package marker (`__init__.py`) came or went, which renames the modules
        below it, or when the import roots changed (a file came, went, or now spells its
        directory as a namespace package), which changes what top-level names mean."""
        if not self.index.files:
            return []
        changed = self._changed_files = set(self.index.files) ^ set(self.files)
        if any(Path(p).stem == "__init__" for p in changed):
            return None
        names: set[str] = set()
        if set(self.index.roots) != set(self.roots):
            heads = self._heads_of_changed_roots(changed)
            if heads is None:
                return None
            names.update(heads)
        if not changed:
            return []
        for path in changed:
            for root in self.roots:  # a directory without `__init__.py` is a namespace package from any root above it
                if path.startswith(root.rstrip(os.sep) + os.sep):
                    parts = list(Path(os.path.relpath(path, root)).with_suffix("").parts)
                    if parts and parts[-1] == "__init__":
                        parts.pop()
                    names.add(".".join(parts))
        return sorted(names)

    def _heads_of_changed_roots(self, changed: set[str]) -> set[str] | None:
        """The top-level names of the import roots that came or went with the files that did
        (a scratch file in a new folder is a root of its own), as modules added or removed; None
        when files that stayed lie below such a root (a module came to spell its folder as a
        namespace package: every module below is renamed), or when one of its names is also
        another root's (which root claims the name could change)."""
        old, new = set(self.index.roots), set(self.roots)
        heads: set[str] = set()
        for root in old ^ new:
            prefix = root.rstrip(os.sep) + os.sep
            if any(p.startswith(prefix) for p in self.files if p not in changed):
                return None  # files that stayed lie below it: their names may have changed
            inside = {Path(os.path.relpath(p, root)).parts[0] for p in changed if p.startswith(prefix)}
            if not inside:
                return None
            heads.update(map(_top_level_name, inside))
        for root in old & new:
            try:
                entries = os.listdir(root)
            except OSError:
                return None
            if heads & set(map(_top_level_name, entries)):
                return None
        return heads

    # -- what this run leaves -----------------------------------------------------------

    def save(
        self,
        outcomes: Mapping[str, Outcome],
        keys: Mapping[str, frozenset[str]],
        mentions: Mentions,
        names: Names,
        compile_calls: Mapping[str, tuple[str, bool]],
    ) -> None:
        """Write the next index (and the import edges) when it would differ from the loaded one.
        `keys` holds the key of every analysed outcome; `names` are the run's final names;
        `compile_calls` what context_prefilter read."""
        if self.cache is None or (not self._changed(outcomes, names) and compile_calls == self.index.compile_calls):
            return
        words = names.words() | CONTEXT_WORDS
        entries: dict[str, CacheEntry] = {}
        for path in self.files:
            digest = self.workspace.digest(path)
            if digest is not None:
                entries[path] = self._next_entry(path, digest, outcomes.get(path), keys, mentions.of(path, words))
        self.cache.save(Index(entries, self.workspace.stats(), FrozenNames.of(names), tuple(self.files), tuple(self.roots), dict(compile_calls)))
        if self._new_edges or self._carried_edges:
            edges = self._loaded_edges()
            edges.update(self._carried_edges)
            edges.update(self._new_edges)
            self.cache.save_edges(edges)

    def _changed(self, outcomes: Mapping[str, Outcome], names: Names) -> bool:
        """Whether the index would differ: something analysed, read, added or removed."""
        if outcomes or names.words() != self.index.names.words():
            return True
        if set(self.files) != set(self.index.files) or set(self.roots) != set(self.index.roots):
            return True
        return self.workspace.stats() != self.index.stats

    def _next_entry(
        self, path: str, digest: str, outcome: Outcome | None, keys: Mapping[str, frozenset[str]], hits: frozenset[str]
    ) -> CacheEntry:
        if outcome is not None and outcome.transient:  # a parse that timed out: asked again next run
            return CacheEntry(EntryKind.SKIPPED, digest, hits)
        if outcome is not None and outcome.analysed:
            findings, added, calls = tuple(outcome.findings), FrozenNames.of(outcome.names), tuple(outcome.calls)
            return CacheEntry(
                EntryKind.ANALYSED, outcome.digest, hits, findings, added, outcome.dependencies, keys[path], calls, self.rule_set
            )
        if outcome is not None:
            return CacheEntry(EntryKind.SYNTAX, outcome.digest, hits, tuple(outcome.findings))
        old = self.index.entries.get(path)
        if old is not None and old.digest == digest:
            renewed = self._renewed.get(path)
            return replace(old, hits=hits, deps={**old.deps, **renewed}) if renewed else replace(old, hits=hits)
        return CacheEntry(EntryKind.SKIPPED, digest, hits)


def _top_level_name(entry: str) -> str:
    """The module a root's entry is (`blocks` for `blocks.py` or the folder `blocks`)."""
    return entry[:-3] if entry.endswith(".py") else entry


def _imports_any(imports: Iterable[str], modules: list[str]) -> bool:
    """Whether a new or removed module could be what one of these imports loads (`a.b` for
    `import a.b`), or a package one goes through (`a.b` for `import a.b.c`). A module merely
    under an imported package is not: `from a.b import c` loads `a.b`, not `a.b.new` (a package
    that imports `a.b.new` changed when it did, and is its own dependency)."""
    for module in modules:
        inside = module + "."
        for name in imports:
            if name == module or name.startswith(inside):
                return True
    return False


def _below_any(packages: Iterable[str], modules: list[str]) -> bool:
    """Whether a new or removed module lies below a package some use reaches whole (`a.b.c`
    as `p.b.c` after `import a as p; q = p`)."""
    return any(module.startswith(package + ".") for package in packages for module in modules)
