"""Which project files can say how checkpoint calls run (analysis/contexts/execution.py), decided
from their bytes: a file that mentions none of `CONTEXT_WORDS` as a whole word compiles
nothing, sets no Dynamo flag and installs no offloading hook.

The words are kept with the run's names in the cache's mentions, so a warm run reads no file
for them. A file that mentions only `compile` must also spell a compile call
(`torch.compile`, `.compile(` on something other than `re`/`regex`, `from torch import ...
compile`): `re.compile` alone is the common case and is not read further.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable

from ckptlint.prefilter import Mentions

COMPILE_WORD = "compile"
FLAG_WORD = "skip_fwd_side_effects_in_bwd_under_checkpoint"
OFFLOAD_WORDS = frozenset({"save_on_cpu", "saved_tensors_hooks"})
CONTEXT_WORDS = frozenset({COMPILE_WORD, FLAG_WORD, *OFFLOAD_WORDS})
_COMPILE_SPELLING = re.compile(rb"\btorch\s*\.\s*compile\b|(?<!\bre)(?<!regex)\.compile\s*\(|\bimport\b[^\n]*\bcompile\b")

ContextFiles = tuple[tuple[str, frozenset[str]], ...]  # (path, the context words it mentions)


def context_files(paths: Iterable[str], mentions: Mentions, data: Callable[[str], bytes | None]) -> ContextFiles:
    """The files of `paths` that can hold a context spelling, with the words each mentions."""
    found: list[tuple[str, frozenset[str]]] = []
    for path in paths:
        words = mentions.of(path, CONTEXT_WORDS)
        if not words:
            continue
        if words == {COMPILE_WORD}:
            content = data(path)
            if content is None or _COMPILE_SPELLING.search(content) is None:
                continue
        found.append((path, words))
    return tuple(found)
