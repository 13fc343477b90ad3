"""The result cache: each file's raw findings, kept until something they depend on changes.

One JSON index per configuration under `.ckptlint_cache/<version>/` in the project root
(or `--cache-dir`). An entry holds a file's content digest, its raw findings (including
those it causes in other files through its regions), the names it adds for checkpoint
APIs, and the digest of every module its result depends on (worker.py says which). An entry
is used when none of those changed; the run's checker also drops entries that a new or
removed module, or a newly derived API name, could change (run.py).

JSON, not pickle: a cache directory can come from anywhere (a checked-out repository), and
loading it must never run code. A corrupt or foreign index is ignored and rewritten. Writes
go to a temporary file and are renamed into place, so a concurrent run (an editor and
pre-commit) reads either the old index or the new one. Stat data (size, times, inode) lets an
unchanged file skip being read and hashed, as in git (workspace.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptlint import __version__

CACHE_DIR_NAME = ".ckptlint_cache"
FORMAT = 2
_TAG = "Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by ckptlint.\n"


def cache_key(*parts: Any) -> str:
    """A digest of everything that changes results besides the files themselves."""
    text = json.dumps([FORMAT, __version__, sys.version_info[:2], *parts], default=repr, sort_keys=True)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


@dataclass
class Index:
    """What one run leaves for the next."""

    entries: dict[str, dict[str, Any]] = field(default_factory=dict)  # absolute path -> entry
    stats: dict[str, list] = field(default_factory=dict)  # absolute path -> [size, mtime_ns, ctime_ns, inode, digest]
    names: list[list[str]] = field(default_factory=lambda: [[], []])  # the run's final names
    files: list[str] = field(default_factory=list)  # the project's files


class Cache:
    def __init__(self, directory: Path, key: str):
        self.directory = directory
        self.path = directory / __version__ / f"{key}.json"

    def load(self) -> Index:
        """The last run's index, or an empty one when it is missing, corrupt or foreign."""
        try:
            data = json.loads(self.path.read_bytes())
            if data.get("format") != FORMAT:
                return Index()
            index = Index(data["entries"], data["stats"], data["names"], data["files"])
            if _well_formed(index):
                return index
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            pass
        return Index()

    def save(self, index: Index) -> None:
        data = {"format": FORMAT, "entries": index.entries, "stats": index.stats, "names": index.names, "files": index.files}
        self._write(self.path, data)

    def load_edges(self) -> dict[str, list]:
        """path -> [digest, module names its code can reach]: consulted only when files were
        added or removed, so it lives in its own file, read only then."""
        try:
            data = json.loads(self.edges_path.read_bytes())
            return data["edges"] if data.get("format") == FORMAT and isinstance(data.get("edges"), dict) else {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}

    def save_edges(self, edges: dict[str, list]) -> None:
        self._write(self.edges_path, {"format": FORMAT, "edges": edges})

    @property
    def edges_path(self) -> Path:
        return self.path.with_suffix(".edges.json")

    def _write(self, path: Path, data: dict) -> None:
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


def _well_formed(index: Index) -> bool:
    """The shapes the engine relies on (a cache file can be truncated or hand-edited)."""
    if not (isinstance(index.entries, dict) and isinstance(index.stats, dict) and isinstance(index.files, list)):
        return False
    names = index.names
    if not (isinstance(names, list) and len(names) == 2 and all(isinstance(n, list) for n in names)):
        return False
    for stat in index.stats.values():
        if not (isinstance(stat, list) and len(stat) == 5 and isinstance(stat[4], str)):
            return False
    for entry in index.entries.values():
        if not isinstance(entry, dict) or not isinstance(entry.get("digest"), str):
            return False
        if entry.get("kind") == "analysed":
            found, derived, deps = entry.get("findings"), entry.get("names"), entry.get("deps")
            if not (isinstance(found, list) and isinstance(deps, dict) and isinstance(derived, list) and len(derived) == 2):
                return False
        elif entry.get("kind") == "syntax" and not isinstance(entry.get("findings"), list):
            return False
        for finding in entry.get("findings", ()):
            if not isinstance(finding, dict) or not _FINDING_KEYS <= finding.keys():
                return False
    return True


_FINDING_KEYS = frozenset({"path", "line", "column", "end_line", "end_column", "code", "summary"})


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
