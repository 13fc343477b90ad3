"""Which stack frames are the user's: not torch, not ckptlint, not the decorator plumbing of
functools and contextlib. Both the call site of a checkpoint call (intercept.py) and the
stack the witness shows for an op (witness.py) are the first such frames."""

from __future__ import annotations

import contextlib
import functools
import os

import torch

LIBRARY_DIRS = (
    os.path.dirname(torch.__file__) + os.sep,
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,  # ckptlint itself
)
LIBRARY_FILES = frozenset({functools.__file__, contextlib.__file__})


def is_user_code(filename: str, extra_dirs: tuple[str, ...] = ()) -> bool:
    """`extra_dirs`: directories of in-house wrappers, whose callers are the call sites."""
    return not filename.startswith(LIBRARY_DIRS + extra_dirs) and filename not in LIBRARY_FILES and not filename.startswith("<frozen")
