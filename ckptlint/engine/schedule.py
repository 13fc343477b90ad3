"""The order a run analyses its files in: a file that mentions a layer class another file
defines waits for that file's analysis, so that it is analysed once, with the class's name known.

Most of the names a run grows (run.py) are layer classes, `class XDecoderLayer(GradientCheckpointingLayer)`,
added by the analysis of the file that defines them. A file that mentions one (a modular file
subclassing another model's layer) and was analysed before its definer would be analysed again
once the name turned up, after every other file of the round. Class headers predict those
names without parsing: the leaf names of a class's bases, closed over the files (on
transformers 5.24.0 exactly the 569 classes its analyses add). A prediction only orders the
work: a file is still analysed with the names analyses added, and the run's loop redoes any
file whose names moved after all (a predicted class that never came, a function's name, a cycle).
"""

from __future__ import annotations

import os
import re
from collections import deque
from typing import Callable, Iterable, Mapping

_CLASS_HEADER = re.compile(rb"^[ \t]*class[ \t]+(\w+)[ \t]*\(([^)]*)\)", re.MULTILINE)
_WORD = re.compile(rb"\w+")

Headers = list[tuple[str, frozenset[bytes]]]  # (class name, the words of its bases)


def class_headers(data: bytes) -> Headers:
    """The classes a file's text defines with bases, and the words those bases spell."""
    if b"class" not in data:
        return []
    return [(match.group(1).decode(), frozenset(_WORD.findall(match.group(2)))) for match in _CLASS_HEADER.finditer(data)]


def predicted_classes(headers: Mapping[str, Headers], known: Iterable[str]) -> dict[str, set[str]]:
    """Each class not in `known` whose bases name a known or predicted class, with the files that
    define it (a generated `modeling_x.py` and its `modular_x.py` both do)."""
    names = {name.encode() for name in known}
    definers: dict[str, set[str]] = {}
    grown = True
    while grown:
        grown = False
        for path, classes in headers.items():
            for name, bases in classes:
                if not bases.isdisjoint(names) and path not in definers.get(name, ()):
                    if name.encode() not in names:
                        names.add(name.encode())
                        grown = True
                    definers.setdefault(name, set()).add(path)
    known_set = set(known)
    return {name: paths for name, paths in definers.items() if name not in known_set}


class Schedule:
    """Files in order, each released once the files it waits for are done."""

    def __init__(self, files: list[str], waits_for: Mapping[str, set[str]]):
        self._ready: deque[str] = deque()
        self._waiting: dict[str, set[str]] = {}  # file -> the files it still waits for
        self._order = {path: index for index, path in enumerate(files)}
        self._dependents: dict[str, list[str]] = {}
        for path in files:
            needed = waits_for.get(path, set()) & self._order.keys()
            needed.discard(path)
            if needed:
                self._waiting[path] = set(needed)
                for other in needed:
                    self._dependents.setdefault(other, []).append(path)
            else:
                self._ready.append(path)

    def take(self, count: int, wanted: Callable[[str], bool]) -> list[str]:
        """Up to `count` released files that are `wanted` now; one that is not is done at once."""
        taken: list[str] = []
        while self._ready and len(taken) < count:
            path = self._ready.popleft()
            if wanted(path):
                taken.append(path)
            else:
                self.done([path])
        return taken

    def done(self, paths: Iterable[str]) -> None:
        """These files were analysed (or will not be): release what waited for them, first."""
        released = []
        for path in paths:
            for dependent in self._dependents.pop(path, ()):
                waiting = self._waiting.get(dependent)
                if waiting is None:
                    continue
                waiting.discard(path)
                if not waiting:
                    del self._waiting[dependent]
                    released.append(dependent)
        # just released: beside what was just analysed (its modules are still parsed), in file order
        self._ready.extendleft(sorted(released, key=self._order.__getitem__, reverse=True))

    def unblock(self) -> bool:
        """With nothing running and nothing released (files waiting on each other): release them
        all, in order; False when nothing waits."""
        if not self._waiting:
            return False
        waiting = sorted(self._waiting, key=self._order.__getitem__)
        self._waiting.clear()
        self._dependents.clear()
        self._ready.extend(waiting)
        return True

    def retry(self, paths: list[str]) -> None:
        """Released again, first: their job was lost with its worker."""
        self._ready.extendleft(reversed(paths))

    def __len__(self) -> int:
        return len(self._ready) + len(self._waiting)

    def __contains__(self, path: str) -> bool:
        """Whether the schedule holds the file (done or not)."""
        return path in self._order


def by_package(paths: list[str], size: Callable[[str], int]) -> list[str]:
    """Files of one directory together, so that a state parses the modules they share once
    (`configuration_x.py` for the model files beside it); directories with the largest file
    first, and largest first within each, so that the long files do not come last."""
    groups: dict[str, list[str]] = {}
    for path in sorted(paths, key=lambda p: (-size(p), p)):
        groups.setdefault(os.path.dirname(path), []).append(path)
    return [path for group in groups.values() for path in group]
