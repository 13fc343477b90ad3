"""The linted project: which file is which module, loaded lazily and once.

Module names come from the file system as Python's import system sees them: a
file's import root is the first ancestor directory without an `__init__.py`, or that
directory's parent when it is a namespace package its own packages import through
(`megatron/` in Megatron's wheel, which has no `megatron/__init__.py`).
Regions reach other modules through `import` statements; those modules are read
and parsed only when something asks for them.

Names that no project root holds are looked up in the installed libraries' directories
(libraries.py), after the project's roots as `sys.path` puts the script's directory first.
A library module is loaded and parsed like a project module, lazily, but marked `library`:
it is read-only context, never linted, and its hazards are reported at the project line
that reaches them (analysis/regions/libraries.py). Its display path is relative to its library
directory (`fakezoo/blocks.py`), as a message names it.

Two roots can hold the same top-level name (`examples/a/train.py` and
`examples/b/train.py`). Internally the first root to claim a name keeps it and later
ones get `train@1`, `train@2`; an absolute import resolves in the importing file's own
root first, as `sys.path[0]` makes Python do. Internal names never reach messages.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from pathlib import Path
from typing import AbstractSet, Callable, Iterable, Iterator

from ckptlint.code_text import strip_comments_bytes
from ckptlint.finding import Finding
from ckptlint.libraries import is_library_directory, never_read
from ckptlint.prefilter import WORDS_ONLY
from ckptlint.source import DecodeError, SourceFile, decode_source
from ckptlint.stubs import OVERRIDING_STUBS, STUBS
from ckptlint.symbols import CLASSDEF, DEF, Binding, ModuleSymbols
from ckptlint.syntax import parse, parse_error

_STAR_IMPORT = re.compile(rb"\bimport[ \t\\\n(]*\*")  # `from m import *`, however spaced


def display_path(path: Path | str, base: Path | None = None) -> str:
    """The path as the user should read it: relative to the working directory when inside it."""
    text = os.fspath(path)
    base = base or Path.cwd()
    try:
        relative = os.path.relpath(text, base)
    except ValueError:  # another drive on Windows
        return text
    if relative.startswith(os.pardir):
        return text
    return relative.replace(os.sep, "/")


def import_root(path: Path) -> Path:
    """The directory `sys.path` must hold for the file to import as its code spells it: above
    its regular packages (`__init__.py`), and above the namespace packages (PEP 420 directories
    without one) whose modules import through their names."""
    directory = path.parent
    while os.path.isfile(directory / "__init__.py") and directory.parent != directory:  # os.path: False, not an error, when unreadable
        directory = directory.parent
    return namespace_root(directory)


@functools.lru_cache(maxsize=1024)
def namespace_root(directory: Path) -> Path:
    """`directory` (no `__init__.py`), or the parent of the outermost namespace package it is
    part of: the longest chain `a/b` of directories without `__init__.py` whose dotted name
    (`a.b`) the modules in `directory` or in its packages import through. Megatron's wheel has no
    `megatron/__init__.py` and `megatron/core/__init__.py` says `import megatron.core.utils`; an
    application's `pkg/model.py` says `from pkg.blocks import Block`. A `src/` layout's packages
    never say `src.`, a `tests/` directory's modules import the package they test, not `tests.`,
    and a name `directory` itself holds (`reexport/reexport/`) is that module: those stay roots."""
    if directory.parent == directory:
        return directory
    chain = [directory]
    while len(chain) < _NAMESPACE_DEPTH and chain[-1].parent.parent != chain[-1].parent and not os.path.isfile(chain[-1].parent / "__init__.py"):
        chain.append(chain[-1].parent)
    spellings: list[tuple[bytes, ...]] = []  # by depth: how a module spells the chain's dotted name
    own, packages = _listing(directory)
    importable = {file.stem for file in own} | {package.name for package in packages}
    for depth, part in enumerate(chain):
        # `reexport/reexport/utils.py` saying `from reexport.utils import`: the name is the inner
        # package, importable from `directory` itself, not the outer folder
        if not part.name.isidentifier() or part.name in importable:
            break
        dotted = ".".join(p.name for p in reversed(chain[: depth + 1]))
        spellings.append((f"import {dotted}.".encode(), f"from {dotted}.".encode(), f"from {dotted} import".encode()))
    deepest = -1
    for head in _module_heads(own, packages) if spellings else ():
        deepest = max([deepest, *(depth for depth, spelled in enumerate(spellings) if any(s in head for s in spelled))])
        if deepest == len(spellings) - 1:
            break
    return directory if deepest < 0 else chain[deepest].parent


def _module_heads(own: list[Path], packages: list[Path]) -> Iterator[bytes]:
    """The first bytes of a directory's own modules, then of its packages' modules
    (`__init__.py` first), read as asked for: a match ends the search."""
    for file in own:
        yield from _head(file)
    for package in packages:
        files, _ = _listing(package)
        if package / "__init__.py" in files:
            yield from _head(package / "__init__.py")
            for file in files:
                if file.name != "__init__.py":
                    yield from _head(file)


def _listing(directory: Path) -> tuple[list[Path], list[Path]]:
    """A directory's `.py` files and its subdirectories, by name; none when it cannot be read."""
    files: list[Path] = []
    directories: list[Path] = []
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except OSError:
        return files, directories
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            if entry.name.endswith(".py") and entry.is_file():
                files.append(Path(entry.path))
            elif entry.is_dir():
                directories.append(Path(entry.path))
        except OSError:
            continue
    return files, directories


def _head(file: Path) -> Iterator[bytes]:
    try:
        with open(file, "rb") as handle:
            yield handle.read(_NAMESPACE_PROBE)
    except OSError:
        return


_NAMESPACE_DEPTH = 4  # directories without `__init__.py` a namespace package's name may span
_NAMESPACE_PROBE = 65536  # bytes of each module read for the namespace test


class LoadedModule:
    """A module read from disk (or an editor buffer): its symbols, or why it has none.
    `digest` identifies the content that was analysed (for the cache)."""

    __slots__ = ("path", "source", "symbols", "error", "digest", "name", "edges", "dependency_edges", "library")

    def __init__(
        self,
        path: Path,
        source: SourceFile | None,
        symbols: ModuleSymbols | None,
        error: Finding | None,
        digest: str = "",
        name: str = "",
    ):
        self.path = path
        self.source = source
        self.symbols = symbols
        self.error = error
        self.digest = digest
        self.name = name  # internal module name
        self.edges: tuple[tuple[str, ...], tuple[str, ...]] | None = None  # what its code can reach (engine/edges.module_edges)
        # what an analysis of it can have read, as of so many of its imports read (engine/edges.dependency_edges)
        self.dependency_edges: tuple[int, tuple[tuple[str, ...], tuple[str, ...]]] | None = None
        self.library = False  # an installed library's module: read-only context


def content_digest(content: bytes | str) -> str:
    data = content.encode("utf-8", "surrogatepass") if isinstance(content, str) else content
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def load_source(path: Path, display: str, content: bytes | str | None = None) -> SourceFile:
    """Read and decode a file (or an editor's buffer); raises OSError or DecodeError."""
    if content is None:
        content = path.read_bytes()
    text = decode_source(content) if isinstance(content, bytes) else content
    return SourceFile(os.fspath(path), display, text)


def read_content(path: Path, overlay: bytes | str | None = None) -> bytes | str:
    return path.read_bytes() if overlay is None else overlay


def file_words(path: str, overlays: dict[Path, bytes | str]) -> frozenset[bytes]:
    """The words of a file's code (an editor's unsaved text first; comments left out, as every
    text test does: code_text.py) as bytes: a text test for whether it can name something,
    without parsing it; decoding every word cost more than reading. Raises OSError when it
    cannot be read."""
    return code_words(file_data(path, overlays))


def file_data(path: str, overlays: dict[Path, bytes | str]) -> bytes:
    """A file's bytes (an editor's unsaved text first); OSError when it cannot be read."""
    content = read_content(Path(path), overlays.get(Path(os.path.abspath(path))))
    return content.encode() if isinstance(content, str) else content


def code_words(data: bytes) -> frozenset[bytes]:
    """The words of a module's code (comments left out), as bytes."""
    return frozenset(strip_comments_bytes(data).translate(WORDS_ONLY).split())


_NOTHING: frozenset[str] = frozenset()


class Project:
    """Module lookup by name and by path, with every module parsed at most once."""

    def __init__(
        self,
        roots: Iterable[Path] = (),
        is_excluded: Callable[[Path], bool] | None = None,
        overlays: dict[Path, bytes | str] | None = None,
        base: Path | None = None,
        libraries: Iterable[Path | str] = (),
    ):
        self._keys: dict[str, Path] = {}
        self.is_excluded = is_excluded or (lambda path: False)
        self.overlays = {self._key(p): text for p, text in (overlays or {}).items()}
        self.base = base or Path.cwd()
        self._by_path: dict[Path, LoadedModule] = {}
        self._path_by_name: dict[str, Path | None] = {}
        self._directory_by_name: dict[str, Path | None] = {}
        self._listings: dict[Path, frozenset[str]] = {}
        self._top_level: dict[Path, frozenset[str]] = {}  # names importable from each root
        self._head_index: dict[str, Path] | None = None  # internal top-level name -> root
        self._heads: dict[tuple[Path, str], str] = {}  # (root, top-level name) -> internal name
        self.roots: list[Path] = []
        self.library_roots = [self._key(directory) for directory in libraries]  # in import order
        self._library_heads: dict[str, Path] | None = None  # top-level name -> library directory
        self._library_root_of: dict[Path, Path] = {}  # a library module's file -> its library directory
        self._all_heads: dict[str, Path] | None = None  # both, the project's winning: asked for every name
        # what a dotted name resolves to, memoised until the roots change (see `_forget_names`)
        self._split: dict[str, tuple[ModuleSymbols, tuple[str, ...]] | None] = {}
        self._global: dict[str, tuple[ModuleSymbols, Binding] | None] = {}
        self._canonical: dict[str, str] = {}
        # the modules (ids) each canonical name was read through; None: through a star import
        # too. An eviction drops the answers read through a released module: a memo hit reads
        # no binding, and the reloaded module's imports would not count as read (edges.py)
        self._canonical_via: dict[str, tuple[int, ...] | None] = {}
        self._targets: dict[Path, tuple[tuple[str, ...], tuple[Path, ...]]] = {}  # a module's file -> (its import names, the files they load)
        self._consulted: dict[str, str] = {}  # modules read beside the analysed one (path -> digest)
        self._beside: dict[Path, set[str]] = {}  # module -> the modules consulted for its code (`consult`)
        for root in roots:
            self.add_root(root)

    def _key(self, path: Path | str) -> Path:
        text = os.fspath(path)
        key = self._keys.get(text)
        if key is None:
            key = self._keys[text] = Path(os.path.abspath(text))
        return key

    def has_overlay(self, path: Path) -> bool:
        return self._key(path) in self.overlays

    def add_root(self, root: Path) -> None:
        root = self._key(root)
        if root not in self.roots:
            self.roots.append(root)
            self._head_index = None
            self._all_heads = None
            self._path_by_name.clear()
            self._directory_by_name.clear()
            self._forget_names()

    def _forget_names(self) -> None:
        """A new root can make names resolvable that were not: drop what names resolved to
        (and the files modules' imports load)."""
        self._split.clear()
        self._global.clear()
        self._canonical.clear()
        self._canonical_via.clear()
        self._targets.clear()

    # -- reading beside the analysed file ----------------------------------------
    # Analyses never read files themselves: they ask here, and record here what they read
    # beside the file they analyse, which becomes that file's dependencies in the cache.

    def file_words(self, path: str) -> frozenset[bytes]:
        """The words of a file (an editor's unsaved text first), as bytes; OSError when unreadable."""
        return file_words(path, self.overlays)

    def file_data(self, path: str) -> bytes:
        """A file's bytes (an editor's unsaved text first); OSError when unreadable."""
        return file_data(path, self.overlays)

    def file_bytes(self, path: Path) -> bytes:
        """A file's bytes as they are on disk; OSError when unreadable."""
        return path.read_bytes()

    def python_files_under(self, directory: str, limit: int) -> list[str]:
        """Every `.py` file below a directory, sorted; none when there are more than `limit` (a
        package that large is not searched) or it cannot be listed."""
        found: list[str] = []
        for root, _, names in os.walk(directory):
            found.extend(os.path.join(root, name) for name in names if name.endswith(".py"))
            if len(found) > limit:
                return []
        return sorted(found)

    def module_files(self, directory: str) -> list[str]:
        """The `.py` files of a directory but `__init__.py`, by name, sorted; none when it cannot be listed."""
        try:
            return sorted(entry for entry in os.listdir(directory) if entry.endswith(".py") and entry != "__init__.py")
        except OSError:
            return []

    def consult(self, owner: str, consulted: dict[str, str]) -> None:
        """Record modules an analysis read beside the analysed one (path -> digest), for what
        `owner`'s code does (a class's users beside its module, the compile that covers a
        call's module). Kept per state too, as edges from `owner` that the dependencies follow
        as they follow imports (`read_beside`): an answer memoised in one file's analysis and
        used in another's is read there too, from any file whose imports reach `owner`."""
        self._consulted.update(consulted)
        key = self._key(owner)
        known = self._beside.get(key)
        if known is None:
            self._beside[key] = set(consulted)
        else:
            known.update(consulted)

    def read_beside(self, path: Path) -> AbstractSet[str]:
        """The modules consulted for `path`'s code in this state (`consult`)."""
        return self._beside.get(path, _NOTHING)

    def take_consulted(self) -> dict[str, str]:
        """The modules recorded by `consult` since the last call."""
        consulted, self._consulted = self._consulted, {}
        return consulted

    # -- loading --------------------------------------------------------------

    def load(self, path: Path, display: str | None = None) -> LoadedModule:
        """The module at `path`; read errors propagate (OSError), parse errors become `error`."""
        key = self._key(path)
        loaded = self._by_path.get(key)
        if loaded is not None:
            return loaded
        library_root = self._library_root_of.get(key)
        if library_root is not None:  # named by the directory Python finds it in, not the working directory
            display = os.path.relpath(key, library_root).replace(os.sep, "/")
        display = display or display_path(key, self.base)
        content = read_content(key, self.overlays.get(key))
        digest = content_digest(content)
        root = library_root or import_root(key)
        name, package = self._module_name(key, root)
        if self.module_path(name) not in (key, None):
            name += "@shadowed"  # `pkg/a.py` beside `pkg/a/__init__.py`: no import reaches it
        try:
            source = load_source(key, display, content)
        except DecodeError as exc:
            placeholder = SourceFile(os.fspath(key), display, "")
            error = parse_error(placeholder, exc.message, exc.line, exc.column)
            loaded = LoadedModule(key, None, None, error, digest, name)
            loaded.library = library_root is not None
            self._by_path[key] = loaded
            return loaded
        tree = parse(source)
        if isinstance(tree, Finding):
            loaded = LoadedModule(key, source, None, tree, digest, name)
        else:
            symbols = ModuleSymbols(
                name, source, tree, package, lambda target: self._internal_import(target, root), self._defines
            )
            symbols.library = library_root is not None
            loaded = LoadedModule(key, source, symbols, None, digest, name)
        loaded.library = library_root is not None
        self._by_path[key] = loaded
        return loaded

    def loaded_at(self, path: str) -> LoadedModule | None:
        return self._by_path.get(self._key(path))

    def import_targets(self, module: LoadedModule, names: tuple[str, ...]) -> tuple[Path, ...]:
        """The files that the dotted `names` (what `module` imports) load, as `loaded_file` keys;
        memoised per module (and its names: they grow as the module's imports are read)
        until a root is added: the dependencies of every linted file walk the same
        modules' imports again."""
        memo = self._targets.get(module.path)
        if memo is None or memo[0] != names:
            memo = self._targets[module.path] = (names, tuple(self._key(path) for path in map(self.module_path, names) if path is not None))
        return memo[1]

    def loaded_file(self, key: Path) -> LoadedModule | None:
        """`loaded_at` for a path that `import_targets` gave."""
        return self._by_path.get(key)

    def loaded(self) -> list[LoadedModule]:
        return list(self._by_path.values())

    def release(self) -> None:
        """Break the reference cycles between modules, scopes and this project, so that
        dropping a state frees its trees by reference counting, without a costly collection."""
        for loaded in self._by_path.values():
            _release(loaded)
        self._by_path.clear()
        self._beside.clear()
        self._forget_names()

    def evict(self, keep: set[Path]) -> None:
        """Release every loaded module but those at `keep`. What names resolve to stays
        memoised (it depends on the roots and the files' contents, not on what is loaded),
        except answers that hold a released module."""
        released: set[int] = set()
        for key, loaded in list(self._by_path.items()):
            if key not in keep:
                released.add(id(loaded.symbols))
                _release(loaded)
                del self._by_path[key]
        self._beside.clear()  # recorded again as the analyses that read them run again
        kept = {id(loaded.symbols) for loaded in self._by_path.values()}
        self._split = {name: found for name, found in self._split.items() if found is None or id(found[0]) in kept}
        for name, via in list(self._canonical_via.items()):
            if via is None or not released.isdisjoint(via):
                del self._canonical[name], self._canonical_via[name]
                self._global.pop(name, None)
        self._global = {name: found for name, found in self._global.items() if found is None or id(found[0]) in kept}

    def module_path(self, name: str) -> Path | None:
        """The file an import of this dotted name loads; None outside the project and its libraries."""
        if name not in self._path_by_name:
            self._path_by_name[name] = self._find_module(name)
        return self._path_by_name[name]

    def module_directory(self, name: str) -> Path | None:
        """The directory a dotted name denotes as a package (with or without `__init__.py`)."""
        if name not in self._directory_by_name:
            parts = name.split(".")
            root = self._root_of(parts[0]) if all(parts) else None
            directory = root.joinpath(parts[0].partition("@")[0], *parts[1:]) if root is not None else None
            self._directory_by_name[name] = directory if directory is not None and os.path.isdir(directory) else None
        return self._directory_by_name[name]

    def module_named(self, name: str) -> ModuleSymbols | None:
        """The module with this dotted name, parsed on first use; None outside the project and its libraries."""
        path = self.module_path(name)
        if path is None:
            return None
        try:
            return self.load(path).symbols
        except OSError:
            return None

    def _defines(self, module_name: str, name: str) -> bool:
        if self.never_read(module_name) and not name.startswith("_"):
            return True  # `from torch.distributed import *`: torch's source is never read, and a star import binds its public names
        path = self.module_path(module_name)
        if path is None or (self.loaded_at(os.fspath(path)) is None and not self._may_define(path, name)):
            return False
        module = self.module_named(module_name)
        return module is not None and (bool(module.lookup(module.scope, name)) or module.star_target(name) is not None)

    def _may_define(self, path: Path, name: str) -> bool:
        """Whether the file's text can bind `name`: it spells it, or re-exports with `import *`.
        A star search through a zoo's package (`transformers.UdopConfig`) would otherwise parse
        every model the package's `__init__` star-imports, to find the one that defines it."""
        try:
            content = read_content(path, self.overlays.get(self._key(path)))
        except OSError:
            return False
        data = content.encode() if isinstance(content, str) else content
        return name.encode() in data or _STAR_IMPORT.search(data) is not None

    def never_read(self, qualified_name: str) -> bool:
        """Whether the name's library is one whose source is never read (the standard library,
        torch, NumPy: described by the analysis's tables instead)."""
        return never_read(qualified_name.split(".")[0])

    def is_project_name(self, qualified_name: str) -> bool:
        """Could this dotted name live in the project? (Its first part is importable from a root.)"""
        return qualified_name.partition(".")[0] in self._namespace()

    def resolvable(self, qualified_name: str) -> bool:
        """Could this dotted name be read: in the project, or in an installed library?"""
        return qualified_name.partition(".")[0] in self._heads_and_libraries()

    def _root_of(self, head: str) -> Path | None:
        """The directory a top-level name is imported from: a project root, else a library directory."""
        return self._heads_and_libraries().get(head)

    def _heads_and_libraries(self) -> dict[str, Path]:
        heads = self._all_heads
        if heads is None:
            heads = self._all_heads = {**self._library_namespace(), **self._namespace()}
        return heads

    def _library_namespace(self) -> dict[str, Path]:
        """Top-level name -> the first library directory holding it, without those never read."""
        if self._library_heads is None:
            self._library_heads = {}
            for directory in [*self.library_roots, STUBS]:  # the stubs answer only for what is not installed
                for entry in self._entries(directory):
                    head = entry[:-3] if entry.endswith(".py") else entry
                    if head.isidentifier() and head not in self._library_heads and not never_read(head):
                        self._library_heads[head] = directory
        return self._library_heads

    def _namespace(self) -> dict[str, Path]:
        """Internal top-level name -> the root it lives in, claimed in root order."""
        if self._head_index is None:
            self._head_index = {}
            self._heads = {}
            for root in self.roots:
                for head in sorted(self._names_in(root)):
                    taken = sum(1 for r in self.roots if (r, head) in self._heads)
                    internal = head if taken == 0 else f"{head}@{taken}"
                    self._heads[(root, head)] = internal
                    self._head_index[internal] = root
        return self._head_index

    def _internal_head(self, root: Path, head: str) -> str | None:
        self._namespace()
        return self._heads.get((root, head))

    def _module_name(self, path: Path, root: Path) -> tuple[str, str]:
        """(internal module name, package for relative imports) of a file."""
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts and parts[-1] == "__init__":
            parts.pop()
        if parts:
            parts[0] = self._internal_head(root, parts[0]) or parts[0]
        name = ".".join(parts) or path.parent.name
        package = name if path.stem == "__init__" else ".".join(parts[:-1])
        return name, package

    def _internal_import(self, target: str, importer_root: Path) -> str:
        """An absolute import's internal name: the importing file's root first, then the others."""
        head, dot, rest = target.partition(".")
        internal = self._internal_head(importer_root, head)
        if internal is None:
            internal = next((self._heads[(r, head)] for r in self.roots if (r, head) in self._heads), None)
        return target if internal is None else internal + dot + rest

    def _names_in(self, root: Path) -> frozenset[str]:
        names = self._top_level.get(root)
        if names is None:
            try:
                entries = os.listdir(root)
            except OSError:
                entries = []
            for overlay in self.overlays:  # editor buffers and stdin need not exist on disk
                if overlay.is_relative_to(root):
                    entries.append(overlay.relative_to(root).parts[0])
            listed = set(entries)
            names = self._top_level[root] = frozenset(
                entry.rpartition(".")[0] if entry.endswith((".py", ".pyi")) else entry
                for entry in listed
                if not self._typing_stubs_only(root, entry, listed)
            )
        return names

    def _typing_stubs_only(self, root: Path, entry: str, entries: set[str]) -> bool:
        """A top-level `.pyi` module or package with no code beside it: type stubs for a library
        (xformers keeps `stubs/torch/nn/__init__.pyi` for mypy). Python never imports them, so
        they must not stand in for the library they describe (`torch.nn.Sequential` read as a
        stub's `...`)."""
        if entry.endswith(".pyi"):
            return entry[:-1] not in entries
        if "." in entry:
            return False
        inside = self._entries(root / entry)
        if "__init__.py" in inside:
            return False
        return "__init__.pyi" in inside or (any(n.endswith(".pyi") for n in inside) and not any(n.endswith(".py") for n in inside))

    def _find_module(self, name: str) -> Path | None:
        parts = name.split(".")
        if not all(parts):
            return None
        root = self._root_of(parts[0])
        if root is None:
            return None
        library = parts[0] not in self._namespace()
        # a builder whose installed code the analysis cannot follow: also when a package linted in
        # site-packages (an installed mmpretrain) made that directory a root beside mmcv
        if (library or is_library_directory(os.fspath(root))) and name in OVERRIDING_STUBS:
            stub = STUBS.joinpath(*parts).with_suffix(".py")
            self._library_root_of[stub] = STUBS
            return stub
        parts[0] = parts[0].partition("@")[0]
        directory, leaf = root.joinpath(*parts[:-1]), parts[-1]
        entries = self._entries(directory)
        package = directory / leaf
        package_entries = self._entries(package) if leaf in entries else frozenset()
        # a package wins over a module of the same name, as in Python's import system
        for candidate, present in (
            (package / "__init__.py", "__init__.py" in package_entries),
            (directory / f"{leaf}.py", f"{leaf}.py" in entries),
            (package / "__init__.pyi", "__init__.pyi" in package_entries),
            (directory / f"{leaf}.pyi", f"{leaf}.pyi" in entries),
        ):
            if library and present:  # the project's excludes are about the project's files
                self._library_root_of[candidate] = root
                return candidate
            if present and not self.is_excluded(candidate):
                return candidate
        return None

    def _entries(self, directory: Path) -> frozenset[str]:
        """A directory's entry names and the editor buffers in it, listed once: module
        lookups ask about many names that are not modules (`pkg.mod.Class`)."""
        entries = self._listings.get(directory)
        if entries is None:
            try:
                names = set(os.listdir(directory))
            except OSError:
                names = set()
            names.update(o.relative_to(directory).parts[0] for o in self.overlays if o != directory and o.is_relative_to(directory))
            entries = self._listings[directory] = frozenset(names)
        return entries

    # -- names across modules -------------------------------------------------

    # What a name resolves to depends only on the roots and the files' contents (modules load
    # lazily, but loading one changes no answer), so the three lookups below are memoised until
    # a root is added: the region analysis asks about the same few thousand names tens of
    # thousands of times (class bases, constructor sites, attribute types).

    def split_module(self, qualified_name: str) -> tuple[ModuleSymbols, tuple[str, ...]] | None:
        """The longest module prefix of a dotted name (project or library), and the attributes after it."""
        if qualified_name in self._split:
            return self._split[qualified_name]
        found = self._split[qualified_name] = self._split_module(qualified_name)
        return found

    def _split_module(self, qualified_name: str) -> tuple[ModuleSymbols, tuple[str, ...]] | None:
        if not self.resolvable(qualified_name):
            return None
        parts = qualified_name.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = self.module_named(".".join(parts[:cut]))
            if module is not None:
                return module, tuple(parts[cut:])
        return None

    def global_binding(self, qualified_name: str) -> tuple[ModuleSymbols, Binding] | None:
        """The module-level binding a dotted name refers to, after following re-exports."""
        if qualified_name in self._global:
            return self._global[qualified_name]
        found = self._global[qualified_name] = self._global_binding(qualified_name)
        return found

    def _global_binding(self, qualified_name: str) -> tuple[ModuleSymbols, Binding] | None:
        found = self.split_module(self.canonical_name(qualified_name))
        if found is None or len(found[1]) != 1:
            return None
        module, (name,) = found
        binding = module.binding(module.scope, name)
        return None if binding is None else (module, binding)

    def canonical_name(self, qualified_name: str) -> str:
        """Follow re-exports and aliases in project and library modules to the name's definition."""
        found = self._canonical.get(qualified_name)
        if found is None:
            via: list[int] | None = []
            found, via = self._canonical_name(qualified_name, via)
            self._canonical[qualified_name] = found
            self._canonical_via[qualified_name] = None if via is None else tuple(via)
        return found

    def _canonical_name(self, qualified_name: str, via: list[int] | None) -> tuple[str, list[int] | None]:
        seen: set[str] = set()
        name = qualified_name
        while name not in seen:
            seen.add(name)
            found = self.split_module(name)
            if found is None:
                return name, via
            module, rest = found
            if via is not None:
                via.append(id(module))
            binding = module.binding(module.scope, rest[0])
            if binding is None:  # `from .core import *` in a package's __init__ re-exports it
                star = module.star_target(rest[0])
                if star is None:
                    return name, via
                name, via = ".".join([star, *rest[1:]]), None  # read through the modules it star-imports
                continue
            if binding.kind in (DEF, CLASSDEF):
                return name, via
            resolved = module.binding_qualified_name(binding)
            own = f"{module.name}.{rest[0]}"
            if resolved is None or resolved.startswith(f"{own}."):
                return name, via  # `model = model.module` rebinds the name to a part of itself: no alias to follow
            name = ".".join([resolved, *rest[1:]])
        return name, via


def _release(loaded: LoadedModule) -> None:
    """Break a module's cycles between its scopes and the project (see `Project.release`)."""
    symbols = loaded.symbols
    if symbols is None:
        return
    for scope in symbols.iter_scopes():
        scope.parent = None
        scope.bindings = {}
    for scope in list(symbols.iter_scopes()):
        scope.children = []
    symbols.import_name = symbols.defines = None  # type: ignore[assignment]  # released to break reference cycles; never used again
