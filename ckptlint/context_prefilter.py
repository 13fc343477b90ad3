"""Which project files can say how checkpoint calls run (analysis/contexts/execution.py), decided
from their bytes: a file that mentions none of `CONTEXT_WORDS` as a whole word compiles
nothing, sets no Dynamo flag and installs no offloading hook.

The words are kept with the run's names in the cache's mentions, so a warm run reads no file
for them. A file that mentions only `compile` must also spell a compile call
(`torch.compile`, `.compile(` on something other than `re`/`regex`, `from torch import ...
compile`) in its code, not a comment (code_text.py): `re.compile` alone is the common case and
is not read further.
"""

from __future__ import annotations

import os
import re
from typing import Callable, Iterable, Mapping

from ckptlint.code_text import strip_comments_bytes
from ckptlint.prefilter import Mentions

COMPILE_WORD = "compile"
FLAG_WORD = "skip_fwd_side_effects_in_bwd_under_checkpoint"
OFFLOAD_WORDS = frozenset({"save_on_cpu", "saved_tensors_hooks"})
CONTEXT_WORDS = frozenset({COMPILE_WORD, FLAG_WORD, *OFFLOAD_WORDS})
_COMPILE_SPELLING = re.compile(rb"\btorch\s*\.\s*compile\b|(?<!\bre)(?<!regex)\.compile\s*\(|\bimport\b[^\n]*\bcompile\b")

ContextFiles = tuple[tuple[str, frozenset[str]], ...]  # (path, the context words it mentions)


def context_files(
    paths: Iterable[str],
    mentions: Mentions,
    data: Callable[[str], bytes | None],
    digest: Callable[[str], str | None],
    known: Mapping[str, tuple[str, bool]],
) -> tuple[ContextFiles, dict[str, tuple[str, bool]]]:
    """The files of `paths` that can hold a context spelling, with the words each mentions;
    and, for each file read for a compile call, (its digest, whether it spells one): `known`
    is the last run's, so a warm run reads only the files that changed."""
    found: list[tuple[str, frozenset[str]]] = []
    compile_calls: dict[str, tuple[str, bool]] = {}
    for path in paths:
        words = mentions.of(path, CONTEXT_WORDS)
        if not words:
            continue
        if words == {COMPILE_WORD}:
            current = digest(path)
            if current is None:
                continue
            recorded = known.get(path)
            if recorded is None or recorded[0] != current:
                content = data(path)
                if content is None:
                    continue
                recorded = (current, _spells_compile(content))
            compile_calls[path] = recorded
            if not recorded[1]:
                continue
        found.append((path, words))
    return tuple(found), compile_calls


def _spells_compile(content: bytes) -> bool:
    """Whether the code spells a compile call; comments, stripped only when the bytes match
    (stripping can remove a match, never add one), do not count."""
    return _COMPILE_SPELLING.search(content) is not None and _COMPILE_SPELLING.search(strip_comments_bytes(content)) is not None


def context_stem(path: str) -> str:
    """The name a context file outside a module's directory must spell to be read for it: the
    module's file stem, or its package's for an `__init__.py` (the engine redoes a cached
    result when a changed context file spells it: engine/reuse.py)."""
    stem = os.path.basename(path)[:-3]
    return os.path.basename(os.path.dirname(path)) if stem == "__init__" else stem
