"""Where the installed libraries a project calls into are: the import path of an interpreter.

A region's block is often built by a library (a timm `ConvNormAct`, an mmcv `ConvModule`);
its norm layer is a hazard only the library's source shows. ckptlint reads that source,
never imports it, and only in the places Python would find it: the site-packages and
dist-packages entries of the import path of the interpreter the project runs with, as
pyright and mypy find theirs. By default that is the interpreter running ckptlint, whose
path is read in this process; `--python PATH` (or `python = "PATH"`) names another, which
is asked once (`PATH -c "import sys, json; ..."`: it runs the interpreter, never the linted
code) and remembered per interpreter file and modification time.

Some packages are never read: torch is described by tables (analysis/knowledge/torch_api.py), and so
are NumPy and Python's `random`; reading them would cost time and find nothing the tables
do not say. The standard library is not in site-packages anyway.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

# top-level packages whose source is never read: described by analysis/knowledge/torch_api.py, or
# (typing_extensions) a backport of the standard library that holds no model code
NEVER_READ: frozenset[str] = frozenset(
    {"torch", "torchgen", "functorch", "torchvision", "torchaudio", "triton", "numpy", "typing_extensions"}
)
LIBRARY_DIRECTORIES = ("site-packages", "dist-packages")
QUERY = "import sys, json; print(json.dumps(sys.path))"
QUERY_TIMEOUT_S = 30

_ASKED: dict[tuple[str, int], tuple[str, ...]] = {}  # (interpreter, mtime) -> its library directories


class PythonError(Exception):
    """An interpreter given with `--python` / `python =` that cannot say its import path (one line)."""


@dataclass(frozen=True)
class Libraries:
    """The library directories of one run, in import order, and a fingerprint of what is
    installed there (the cache key includes it: installing, upgrading or removing a
    distribution renames its `*.dist-info` directory)."""

    paths: tuple[str, ...] = ()
    fingerprint: str = ""


NO_LIBRARIES = Libraries()


def never_read(head: str) -> bool:
    """Whether a top-level name is one whose installed source is never read."""
    return head in NEVER_READ or head in sys.stdlib_module_names


def is_library_directory(entry: str) -> bool:
    return os.path.basename(os.path.normpath(entry)) in LIBRARY_DIRECTORIES


def library_directories(python: str | None) -> tuple[str, ...]:
    """The site-packages and dist-packages entries of the interpreter's import path, as
    absolute paths in its order; `python` None is the interpreter running ckptlint.
    Raises PythonError when `python` cannot be run or answers with something else."""
    if python is None:
        return _kept(sys.path)
    if os.sep not in python and (os.altsep is None or os.altsep not in python):
        python = shutil.which(python) or python  # a command name, as a shell would find it
    try:
        stat = os.stat(python)
    except OSError as exc:
        raise PythonError(_cannot(python, exc.strerror or str(exc))) from None
    key = (os.path.abspath(python), stat.st_mtime_ns)
    if key not in _ASKED:
        _ASKED[key] = _kept(_ask(python))
    return _ASKED[key]


def _ask(python: str) -> list[str]:
    try:
        completed = subprocess.run(
            [python, "-c", QUERY], capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise PythonError(_cannot(python, f"no answer in {QUERY_TIMEOUT_S} s")) from None
    except (OSError, subprocess.SubprocessError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise PythonError(_cannot(python, reason)) from None
    if completed.returncode != 0:
        last = (completed.stderr.strip().splitlines() or [f"exit code {completed.returncode}"])[-1]
        raise PythonError(_cannot(python, last))
    try:
        path = json.loads(completed.stdout)
    except ValueError:
        path = None
    if not isinstance(path, list) or not all(isinstance(entry, str) for entry in path):
        raise PythonError(_cannot(python, "it did not print its import path (is it a Python interpreter?)"))
    return path


def _cannot(python: str, reason: str) -> str:
    return f"cannot ask the Python interpreter {python} for its installed libraries: {reason}"


def _kept(path: list[str]) -> tuple[str, ...]:
    kept: list[str] = []
    for entry in path:
        if entry and is_library_directory(entry) and os.path.isdir(entry):
            absolute = os.path.abspath(entry)
            if absolute not in kept:
                kept.append(absolute)
    return tuple(kept)


def libraries(python: str | None, enabled: bool = True) -> Libraries:
    """The run's libraries: the interpreter's library directories and their fingerprint."""
    if not enabled:
        return NO_LIBRARIES
    paths = library_directories(python)
    return Libraries(paths, fingerprint(paths))


def fingerprint(paths: tuple[str, ...]) -> str:
    """A digest of each directory's entries: what can be imported from it, and which
    distribution versions are installed (`name-1.2.dist-info`). A file edited in place is
    caught by its own digest, as a dependency of the results that read it."""
    digest = hashlib.blake2b(digest_size=16)
    for path in paths:
        try:
            entries = sorted(os.listdir(path))
        except OSError:
            entries = []
        digest.update(json.dumps([path, entries]).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()
