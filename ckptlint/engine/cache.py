"""The result cache's storage: a typed index of each file's raw findings, read and written as JSON.

One JSON index per configuration of the analysis under `<cache directory>/<version>/`
(the selection is not part of it: findings are kept before `select`, `ignore` and per-file
ignores, which run.py applies after reading); the directory is chosen once for every
front-end (frontend.py: `--cache-dir`, CKPTLINT_CACHE_DIR, else `.ckptlint_cache` in the
project root). Each file has a `CacheEntry`: its content digest and the run's names it
mentions; a named file that was only parsed also keeps its CKP000; a candidate's analysis
also keeps its raw findings (including those it causes in other files through its regions),
the names it adds for checkpoint APIs, its key, the digest of every module its result
depends on (worker.py says which), its checkpoint calls as `ckptlint calls` prints them,
and which rules ran (`RuleSet`). Whether an entry still holds is decided in reuse.py.

JSON, not pickle: a cache directory can come from anywhere (a checked-out repository), and
loading it must never run code. Loading checks every shape the engine relies on (a file can
be truncated or hand-edited); a corrupt or foreign index is ignored and rewritten. Writes
go to a temporary file and are renamed into place, so a concurrent run (an editor and
pre-commit) reads either the old index or the new one. Stat data (size, times, inode) lets an
unchanged file skip being read and hashed, as in git (workspace.py).
"""

from __future__ import annotations

import functools
import gc
import hashlib
import json
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from ckptlint.version import __version__
from ckptlint.finding import Finding
from ckptlint.catalogue import COMPOSITION_WORDS
from ckptlint.prefilter import Names

CACHE_DIR_NAME = ".ckptlint_cache"
FORMAT = 7  # bump when the JSON layout changes: an index of another format is ignored (7: edges hold the code digest; compile_calls; deps numbered)
_TAG = "Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by ckptlint.\n"

StatRecord = tuple[int, int, int, int, str]  # size, mtime_ns, ctime_ns, inode, content digest
# a module's digest; every module name its imports and the attribute chains of the packages they bind
# can load (with their packages); the packages some use reaches whole (engine/edges.module_edges)
ModuleEdges = tuple[str, tuple[str, ...], tuple[str, ...], str | None]  # digest, imports, packages, code digest


class MalformedCache(ValueError):
    """A cache file whose shape is not what this version writes (truncated, hand-edited, foreign)."""


def cache_key(*parts: object) -> str:
    """A digest of everything that changes results besides the files themselves."""
    text = json.dumps([FORMAT, __version__, code_fingerprint(), sys.version_info[:2], *parts], default=repr, sort_keys=True)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A digest of ckptlint's own code: a checkout whose analysis changed, at the same version,
    must not be answered by its old results (warm output equals cold output). Reading the
    package's ~200 modules costs a few milliseconds."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.blake2b(digest_size=16)
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode())
        try:
            digest.update(path.read_bytes())
        except OSError:
            continue
    return digest.hexdigest()


class RuleSet(StrEnum):
    """Which rules an analysis ran. The cache is kept before selection: an analysis that ran
    every rule answers any `--select`; one run for a selection of call-level rules only
    (CKP101, CKP102: no region effects, a third of a cold run's time on diffusers) answers
    only such selections, and is redone when a region rule is wanted."""

    CALLS = "calls"  # the rules that read the checkpoint calls, not their regions' effects
    ALL = "all"

    def covers(self, needed: RuleSet) -> bool:
        return self is RuleSet.ALL or needed is RuleSet.CALLS


class EntryKind(StrEnum):
    ANALYSED = "analysed"  # a candidate: its analysis
    SYNTAX = "syntax"  # a named file that cannot hold a call: only parsed (its CKP000, if any)
    SKIPPED = "skipped"  # neither: only its digest and what it mentions


@dataclass(frozen=True)
class FrozenNames:
    """Callee and base-class names as the index keeps them (`Names`, which grows, frozen)."""

    functions: frozenset[str] = frozenset()
    classes: frozenset[str] = frozenset()

    @classmethod
    def of(cls, names: Names) -> FrozenNames:
        return cls(frozenset(names.functions), frozenset(names.classes))

    def words(self) -> frozenset[str]:
        return self.functions | self.classes | COMPOSITION_WORDS  # as Names.words()

    def thawed(self) -> Names:
        return Names(set(self.functions), set(self.classes))

    def to_json(self) -> list[list[str]]:
        return [sorted(self.functions), sorted(self.classes)]

    @classmethod
    def from_json(cls, data: object) -> FrozenNames:
        if not (type(data) is list and len(data) == 2):
            raise MalformedCache("names: not a pair of lists")
        functions, classes = data
        if functions == [] and classes == []:
            return _NO_NAMES  # most files add none: share one
        return cls(_strings(functions), _strings(classes))


_NO_NAMES = FrozenNames()


@dataclass(frozen=True)
class CacheEntry:
    """One file's record: what its last analysis (or parse) found, and what that depended on.

    `names`, `deps`, `key`, `calls` and `rules` are an analysis's (empty for the other kinds):
    the names the file adds, the digest of every module its result depends on, the names it
    mentions that it does not add itself (the run's names reach the analysis only through
    those), its checkpoint calls as `ckptlint calls` describes them, and which rules ran."""

    kind: EntryKind
    digest: str  # the file's content digest
    hits: frozenset[str]  # the run's names the file mentions
    findings: tuple[Finding, ...] = ()
    names: FrozenNames = FrozenNames()
    deps: Mapping[str, str] = field(default_factory=dict)  # absolute path -> content digest
    key: frozenset[str] = frozenset()
    calls: tuple[dict[str, object], ...] = ()
    rules: RuleSet = RuleSet.ALL

    @property
    def has_hints(self) -> bool:
        """Whether its calls were described with their static cost hints (a run of `ckptlint
        calls`): a lint describes them without, and `ckptlint calls` then redoes the analysis once."""
        return all("hints" in call and "coverage" in call for call in self.calls)

    def to_dict(self, modules: dict[tuple[str, str], int] | None = None) -> dict[str, object]:
        """As JSON; with `modules` (the index's table of (path, digest) pairs, grown here) each
        dependency is its number in the table: most files share most dependencies, which were
        nine tenths of transformers' index as path-digest objects per entry."""
        data: dict[str, object] = {"kind": self.kind.value, "digest": self.digest}
        if self.kind is not EntryKind.SKIPPED:
            data["findings"] = [finding.to_dict() for finding in self.findings]
        if self.kind is EntryKind.ANALYSED:
            data["names"] = self.names.to_json()
            data["deps"] = dict(self.deps) if modules is None else [modules.setdefault(pair, len(modules)) for pair in self.deps.items()]
            data["key"] = sorted(self.key)
            data["calls"] = list(self.calls)
            data["rules"] = self.rules.value
        data["hits"] = sorted(self.hits)
        return data

    @classmethod
    def from_dict(cls, data: object, modules: Sequence[tuple[str, str]] | None = None) -> CacheEntry:
        """The entry `to_dict` wrote (with the same `modules` table); MalformedCache for any other shape.

        An index holds thousands, so each check is the cheapest that keeps the engine from
        tripping: the items of `hits` and `key` and the digests in `deps` are only compared
        with the run's names and digests, where one of another type reads as a change."""
        if type(data) is not dict:
            raise MalformedCache("entry: not an object")
        try:
            kind, digest, hits = _KINDS[data["kind"]], data["digest"], data["hits"]
            if type(digest) is not str or type(hits) is not list:
                raise MalformedCache("entry: digest or hits of the wrong type")
            if kind is EntryKind.SKIPPED:
                return cls(kind, digest, frozenset(hits))
            findings = data["findings"]
            findings = () if findings == [] else _findings(findings)
            if kind is EntryKind.SYNTAX:
                return cls(kind, digest, frozenset(hits), findings)
            deps, key, calls = data["deps"], data["key"], data["calls"]
            if modules is not None:
                if type(deps) is not list:
                    raise MalformedCache("entry: deps not a list of numbers")
                deps = dict(modules[number] for number in deps)  # IndexError, TypeError: malformed
            if type(deps) is not dict or type(key) is not list:
                raise MalformedCache("entry: deps or key of the wrong type")
            names = FrozenNames.from_json(data["names"])
            described = () if calls == [] else _calls(calls)
            return cls(kind, digest, frozenset(hits), findings, names, deps, frozenset(key), described, _RULE_SETS[data["rules"]])
        except (KeyError, TypeError, IndexError) as exc:  # a missing field, an unknown kind, an unhashable item, no such dependency
            raise MalformedCache(f"entry: {exc!r}") from exc


_KINDS = {kind.value: kind for kind in EntryKind}
_RULE_SETS = {rules.value: rules for rules in RuleSet}


@dataclass(frozen=True)
class Index:
    """What one run leaves for the next."""

    entries: Mapping[str, CacheEntry] = field(default_factory=dict)  # absolute path -> entry
    stats: Mapping[str, StatRecord] = field(default_factory=dict)  # absolute path -> stat data and digest
    names: FrozenNames = FrozenNames()  # the run's final names
    files: tuple[str, ...] = ()  # the project's files
    roots: tuple[str, ...] = ()  # their import roots (which depend on what the modules spell: project.namespace_root)
    compile_calls: Mapping[str, tuple[str, bool]] = field(default_factory=dict)  # path -> (digest, whether its code spells a compile call)

    def to_dict(self) -> dict[str, object]:
        modules: dict[tuple[str, str], int] = {}
        entries = {path: entry.to_dict(modules) for path, entry in self.entries.items()}
        return {
            "format": FORMAT,
            "modules": [list(pair) for pair in modules],  # (path, digest) pairs the entries' deps number
            "entries": entries,
            "stats": dict(self.stats),
            "names": self.names.to_json(),
            "files": list(self.files),
            "roots": list(self.roots),
            "compile_calls": dict(self.compile_calls),
        }

    @classmethod
    def from_dict(cls, data: object) -> Index:
        """The index `to_dict` wrote; MalformedCache for any other shape or format."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise MalformedCache("not an index of this format")
        entries, stats, files = data.get("entries"), data.get("stats"), data.get("files")
        if not (isinstance(entries, dict) and isinstance(stats, dict)):
            raise MalformedCache("index: entries or stats is not an object")
        modules = _modules(data.get("modules"))
        return cls(
            {path: CacheEntry.from_dict(entry, modules) for path, entry in entries.items()},
            {path: _stat(stat) for path, stat in stats.items()},
            FrozenNames.from_json(data.get("names")),
            _string_tuple(files),
            _string_tuple(data.get("roots")),
            _compile_calls(data.get("compile_calls")),
        )


class Cache:
    """The index file of one configuration, and beside it the files read only when needed:
    import edges and code digests (files came or went, a dependency changed), class headers
    (many files to analyse)."""

    def __init__(self, directory: Path, key: str):
        self.directory = directory
        self.path = directory / __version__ / f"{key}.json"

    def load(self) -> Index:
        """The last run's index, or an empty one when it is missing, corrupt or foreign."""
        try:
            with no_collection():
                return Index.from_dict(json.loads(self.path.read_bytes()))
        except (OSError, ValueError, RecursionError):  # ValueError: bad JSON, or MalformedCache
            return Index()

    def save(self, index: Index) -> None:
        self._write(self.path, index.to_dict())

    def load_edges(self) -> dict[str, ModuleEdges]:
        """path -> its module edges and code digest: consulted only when files were added or
        removed, or a dependency changed, so they live in their own file, read only then. Empty when missing or malformed (an unknown
        edge counts as one that may import anything)."""
        try:
            data = json.loads(self.edges_path.read_bytes())
            if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("edges"), dict):
                return {}
            return {path: _edges(record) for path, record in data["edges"].items()}
        except (OSError, ValueError, RecursionError):
            return {}

    def save_edges(self, edges: Mapping[str, ModuleEdges]) -> None:
        self._write(self.edges_path, {"format": FORMAT, "edges": edges})

    @property
    def edges_path(self) -> Path:
        return self.path.with_suffix(".edges.json")

    def load_headers(self) -> dict[str, tuple[str, list[tuple[str, frozenset[bytes]]]]]:
        """path -> (digest, its class headers) as schedule.class_headers read them: consulted
        only when a run has many files to analyse, so they live in their own file. Empty when
        missing or malformed (each file is then read again)."""
        try:
            data = json.loads(self.headers_path.read_bytes())
            if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("headers"), dict):
                return {}
            return {path: _headers(record) for path, record in data["headers"].items()}
        except (OSError, ValueError, RecursionError, TypeError, AttributeError):
            return {}

    def save_headers(self, headers: Mapping[str, tuple[str, list[tuple[str, frozenset[bytes]]]]]) -> None:
        records = {
            path: [digest, [[name, sorted(word.decode("latin-1") for word in words)] for name, words in found]]
            for path, (digest, found) in headers.items()
        }
        self._write(self.headers_path, {"format": FORMAT, "headers": records})

    @property
    def headers_path(self) -> Path:
        return self.path.with_suffix(".headers.json")

    def _write(self, path: Path, data: Mapping[str, object]) -> None:
        """Write atomically; a cache that cannot be written is silently skipped."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _mark(self.directory)
            handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".index-", suffix=".tmp")
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                stream.write(json.dumps(data, separators=(",", ":")))  # dumps: the C encoder
            os.replace(temporary, path)
        except OSError:
            return


@contextmanager
def no_collection() -> Iterator[None]:
    """The cyclic collector paused: building an entry per file right after parsing the index
    set off collections that rescanned the whole parse, a fifth of the load time; building the
    next index after an in-process analysis rescanned every tree the analysis parsed (2 s of a
    one-file run in transformers). Nothing built here holds a cycle."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# -- shapes --------------------------------------------------------------------------------


def _strings(value: object) -> frozenset[str]:
    return frozenset(_string_tuple(value))


def _string_tuple(value: object) -> tuple[str, ...]:
    if type(value) is not list:
        raise MalformedCache("not a list of strings")
    try:
        "".join(value)  # fails unless every item is a str: the fastest check of a long list
    except TypeError:
        raise MalformedCache("not a list of strings") from None
    return tuple(value)


def _stat(value: object) -> StatRecord:
    """Only the digest is used as such; the sizes and times are compared with the file's,
    so a wrong one only makes the file read again."""
    if not (type(value) is list and len(value) == 5 and type(value[4]) is str):
        raise MalformedCache("stat: not [size, mtime, ctime, inode, digest]")
    return (value[0], value[1], value[2], value[3], value[4])


def _modules(value: object) -> list[tuple[str, str]]:
    if type(value) is not list or not all(type(pair) is list and len(pair) == 2 and type(pair[0]) is str and type(pair[1]) is str for pair in value):
        raise MalformedCache("modules: not a list of [path, digest]")
    return [(pair[0], pair[1]) for pair in value]


def _compile_calls(value: object) -> dict[str, tuple[str, bool]]:
    if not isinstance(value, dict) or not all(type(v) is list and len(v) == 2 and type(v[0]) is str and type(v[1]) is bool for v in value.values()):
        raise MalformedCache("compile_calls: not {path: [digest, bool]}")
    return {path: (record[0], record[1]) for path, record in value.items()}


def _headers(value: object) -> tuple[str, list[tuple[str, frozenset[bytes]]]]:
    if not (type(value) is list and len(value) == 2 and type(value[0]) is str and type(value[1]) is list):
        raise MalformedCache("headers: not [digest, [[class, [base words]], ...]]")
    found = [(name, frozenset(word.encode("latin-1") for word in words)) for name, words in value[1]]
    if not all(type(name) is str for name, _ in found):
        raise MalformedCache("headers: a class name that is not a string")
    return value[0], found


def _edges(value: object) -> ModuleEdges:
    if not (type(value) is list and len(value) == 4 and type(value[0]) is str and (value[3] is None or type(value[3]) is str)):
        raise MalformedCache("edges: not [digest, imported modules, bound packages, code digest]")
    return value[0], _string_tuple(value[1]), _string_tuple(value[2]), value[3]


def _findings(value: object) -> tuple[Finding, ...]:
    """Parsed at load: few files have findings, and a malformed one must reject the index."""
    if type(value) is not list:
        raise MalformedCache("findings: not a list")
    try:
        findings = tuple(Finding.from_dict(data) for data in value)
    except (KeyError, TypeError, AttributeError) as exc:
        raise MalformedCache(f"finding: {exc!r}") from exc
    if not all(_well_typed(finding) for finding in findings):
        raise MalformedCache("finding: a field of the wrong type")
    return findings


# a described call's fields and their types (call_report.describe_call), as `ckptlint calls` reads them;
# `hints` (a list of {"kind": str, "message": str}) and `coverage` only when the run described them
_CALL_FIELDS: dict[str, type] = {"path": str, "line": int, "column": int, "api": str, "region": str, "mode": str, "mode_defaulted": bool, "mode_source": str}
_HINT_FIELDS = frozenset({"kind", "message"})
_UNRESOLVED_FIELDS: dict[str, type] = {"path": str, "line": int, "column": int, "callee": str, "reason": str}


def _calls(value: object) -> tuple[dict[str, object], ...]:
    if type(value) is not list:
        raise MalformedCache("calls: not a list")
    for call in value:
        if type(call) is not dict or call.keys() - {"hints", "coverage"} != _CALL_FIELDS.keys():
            raise MalformedCache("call: not an object with the fields describe_call gives")
        if not all(type(call[name]) is kind for name, kind in _CALL_FIELDS.items()):
            raise MalformedCache("call: a field of the wrong type")
        if "hints" in call and not _hints(call["hints"]):
            raise MalformedCache("call: hints not a list of {kind, message} texts")
        if "coverage" in call and not _coverage(call["coverage"]):
            raise MalformedCache("call: coverage not {calls, resolved, unresolved} as describe_coverage gives")
    return tuple(value)


def _coverage(value: object) -> bool:
    if type(value) is not dict or value.keys() != {"calls", "resolved", "unresolved"}:
        return False
    if type(value["calls"]) is not int or type(value["resolved"]) is not int or type(value["unresolved"]) is not list:
        return False
    return all(type(call) is dict and call.keys() == _UNRESOLVED_FIELDS.keys() and all(type(call[k]) is t for k, t in _UNRESOLVED_FIELDS.items()) for call in value["unresolved"])


def _hints(value: object) -> bool:
    return type(value) is list and all(
        type(hint) is dict and hint.keys() == _HINT_FIELDS and all(type(text) is str for text in hint.values()) for hint in value
    )


def _well_typed(finding: Finding) -> bool:
    """What `Finding.from_dict` takes on trust: every position an int, every text a str."""
    texts = (finding.path, finding.code, finding.summary, finding.severity)
    positions = (finding.line, finding.column, finding.end_line, finding.end_column)
    if not (all(isinstance(t, str) for t in texts) and all(type(p) is int for p in positions)):
        return False
    for site in finding.sites:
        if not (isinstance(site.path, str) and type(site.line) is int and type(site.column) is int):
            return False
        if not all(isinstance(step, str) for step in site.chain):
            return False
        context = site.context
        if context is not None and not all(isinstance(t, str) for t in (context.description, context.consequence, context.severity, context.because)):
            return False
    for fix in finding.fixes:
        if not (isinstance(fix.applicability, str) and isinstance(fix.description, str)):
            return False
        for edit in fix.edits:
            if not (isinstance(edit.content, str) and all(type(p) is int for p in (edit.line, edit.column, edit.end_line, edit.end_column))):
                return False
    return True


def _mark(directory: Path) -> None:
    """A `.gitignore` that ignores the directory itself, and a CACHEDIR.TAG for backup tools."""
    gitignore = directory / ".gitignore"
    if not gitignore.exists():
        gitignore.write_text("# created by ckptlint\n*\n")
    tag = directory / "CACHEDIR.TAG"
    if not tag.exists():
        tag.write_text(_TAG)


def clean(directory: Path) -> bool:
    """Remove a cache directory; True when there was one. Refuses a directory that is not one."""
    if not directory.is_dir():
        return False
    if not (directory / "CACHEDIR.TAG").is_file() or _TAG.splitlines()[0] not in (directory / "CACHEDIR.TAG").read_text():
        raise OSError(f"{directory} is not a ckptlint cache (no CACHEDIR.TAG); not removing it")
    shutil.rmtree(directory)
    return True
