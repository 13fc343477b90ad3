"""Which files to lint: walk the given paths, skip excluded ones, survive bad file systems.

Directories yield `.py` and `.pyi` files; files named explicitly are always linted
(unless `force_exclude`), as ruff does. Symlinked directories are followed once;
a loop is reported and skipped. Problems become `PathProblem`s, never exceptions.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ckptlint.result import PathProblem

PYTHON_SUFFIXES = (".py", ".pyi")
PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


@dataclass(frozen=True)
class Discovered:
    files: list[Path]
    problems: list[PathProblem]


class ExcludeMatcher:
    """gitignore-like globs: `build` matches any component, `src/gen/*.py` a relative path."""

    def __init__(self, patterns: Iterable[str], root: Path):
        patterns = list(patterns)
        self.root = Path(os.path.abspath(root))
        self._root_text = os.fspath(self.root)
        self.component_patterns = [p.rstrip("/") for p in patterns if "/" not in p.rstrip("/")]
        self.path_patterns = [p.strip("/") for p in patterns if "/" in p.rstrip("/")]
        # fnmatch's own translation, joined: one regex match per component instead of one per pattern
        self._component = _any_of(self.component_patterns)
        self._path = _any_of([*self.path_patterns, *(p + "/*" for p in self.path_patterns)])

    def __call__(self, path: Path | str) -> bool:
        relative = self._relative(os.path.abspath(path))
        if self._component is not None and any(self._component.match(part) for part in relative.split(os.sep) if part):
            return True
        return self._path is not None and self._path.match(relative.replace(os.sep, "/")) is not None

    def _relative(self, absolute: str) -> str:
        """Only components below the configuration root (or the working directory) count:
        a project that lives under a folder called `build` is not excluded. (Strings, not
        `Path`s: this runs for every entry of every walked directory.)"""
        for base in (self._root_text, os.getcwd()):
            if absolute == base:
                return ""
            if absolute.startswith(base.rstrip(os.sep) + os.sep):
                return absolute[len(base.rstrip(os.sep)) + 1 :]
        return os.path.basename(absolute)


def _any_of(globs: list[str]) -> re.Pattern[str] | None:
    return re.compile("|".join(f"(?:{fnmatch.translate(glob)})" for glob in globs)) if globs else None


def discover(paths: Iterable[Path], is_excluded: ExcludeMatcher, force_exclude: bool = False) -> Discovered:
    files: list[Path] = []
    problems: list[PathProblem] = []
    seen_files: set[Path] = set()
    for path in paths:
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            message = "broken symlink" if os.path.islink(path) else "no such file or directory"
            problems.append(PathProblem(str(path), message))
            continue
        except OSError as exc:  # a directory above it that may not be searched, a name too long
            problems.append(PathProblem(str(path), f"cannot read: {exc.strerror or exc}"))
            continue
        if force_exclude and is_excluded(path):
            continue
        if stat.S_ISDIR(mode):
            _walk(path, is_excluded, files, problems)
        elif stat.S_ISREG(mode):
            files.append(path)  # an unreadable one is reported when it is read (run.py)
        else:
            problems.append(PathProblem(str(path), "not a regular file or directory"))
    unique = []
    for file in files:
        key = Path(os.path.abspath(file))
        if key not in seen_files:
            seen_files.add(key)
            unique.append(file)
    return Discovered(unique, problems)


def _walk(top: Path, is_excluded: ExcludeMatcher, files: list[Path], problems: list[PathProblem]) -> None:
    """Depth-first, sorted. A directory symlink is followed when it leads out of `top`; one to
    a directory inside `top` is an alias (its files are linted under their own path) and is
    skipped, one to an enclosing directory is a loop and is reported."""
    visited: set[tuple[int, int]] = set()
    top_real = os.path.realpath(top)
    stack = [top]
    found: list[Path] = []
    while stack:
        directory = stack.pop()
        try:
            status = directory.stat()
        except OSError as exc:
            problems.append(PathProblem(str(directory), f"cannot read directory: {exc.strerror or exc}"))
            continue
        identity = (status.st_dev, status.st_ino)
        if identity in visited:
            problems.append(PathProblem(str(directory), "symlink loop: directory already visited, skipped", fatal=False))
            continue
        visited.add(identity)
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:  # mode 000, or removed while walking
            problems.append(PathProblem(str(directory), f"cannot read directory: {exc.strerror or exc}"))
            continue
        if directory != top and any(entry.name == "pyvenv.cfg" and _is_file(entry) for entry in entries):
            continue  # a virtual environment, whatever it is called
        subdirectories = []
        for entry in entries:
            path = Path(entry.path)
            if is_excluded(path):
                continue
            try:
                is_dir = entry.is_dir()  # follows symlinks
            except OSError:
                is_dir = False
            if is_dir:
                if entry.is_symlink():
                    target = os.path.realpath(path)
                    here = os.path.realpath(directory)
                    if target == here or here.startswith(target + os.sep):
                        problems.append(PathProblem(str(path), "symlink loop: it points to an enclosing directory, skipped", fatal=False))
                        continue
                    if target.startswith(top_real + os.sep):
                        continue  # an alias of a directory linted under its own path
                subdirectories.append(path)
            elif entry.name.endswith(PYTHON_SUFFIXES):
                if entry.is_symlink() and not os.path.exists(path):
                    problems.append(PathProblem(str(path), "broken symlink"))
                    continue
                found.append(path)
        stack.extend(reversed(subdirectories))
    files.extend(sorted(found))


def _is_file(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file()
    except OSError:
        return False


def find_project_root(start: Path) -> Path | None:
    """The nearest directory at or above `start` that looks like a project's top."""
    found = find_project_marker(start)
    return None if found is None else found[0]


def find_project_marker(start: Path) -> tuple[Path, str] | None:
    """The nearest directory at or above `start` holding a project marker, and the first
    marker found there (for `-v` to say why it is the project root)."""
    directory = Path(os.path.abspath(start))
    if not os.path.isdir(directory):  # os.path's tests say False where one cannot look, pathlib's raise
        directory = directory.parent
    for candidate in (directory, *directory.parents):
        for marker in PROJECT_MARKERS:
            if os.path.exists(candidate / marker):
                return candidate, marker
    return None
