"""Which files can hold a checkpoint call, decided from their bytes before anything is parsed.

A call is recognised by what its callee denotes, and the callee can only denote a
checkpoint API through a name: the API's own (`checkpoint`, `_gradient_checkpointing_func`)
or a name the project binds to it (`ckpt = partial(checkpoint, ...)`, `import ... as ckpt`,
`self._ckpt = ...`). A checkpointing layer is a class whose bases name a layer class or a
project subclass of one (or an import's new name for one). So a file that mentions none of
those names, as a whole word, holds no checkpoint call: it is not parsed unless a region
reaches it.

The project's own names are found by analysing the files that do mention a name
(`derived_names`); the files that mention the new names are then analysed too, until
nothing new turns up. The same names prune call resolution inside a module: a call whose
callee mentions none of them is not resolved at all. Extra names only cost time; a missing
one would lose a call, which is why every binding that resolves to an API adds its name.
A project function that returns an API adds its own name (`get_checkpoint_fn`), and so do
a parameter defaulting to one and a keyword passed one (`activation_checkpoint_func=checkpoint`).
Not followed: an API looked up in a dict, as everywhere else in ckptlint.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ckptlint.catalogue import COMPOSITION_WORDS, LAYER_CLASS, Catalogue
from ckptlint.syntax import walk

# bytes -> the same bytes with every byte that `rb"\w"` does not match made a space: one
# `translate` and `split` list a file's words about twice as fast as `re.findall(rb"\w+")`
WORDS_ONLY = bytes(byte if chr(byte).isascii() and (chr(byte).isalnum() or byte == ord("_")) else ord(" ") for byte in range(256))



@dataclass
class Names:
    """Callee names (`functions`) and base-class names (`classes`) that can mean checkpointing."""

    functions: set[str] = field(default_factory=set)
    classes: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, catalogue: Catalogue) -> Names:
        names = cls()
        for api in catalogue.apis:
            for qualified in api.names:
                leaf = qualified.rpartition(".")[2]
                (names.classes if api.region_kind == LAYER_CLASS else names.functions).add(leaf)
        return names

    def words(self) -> frozenset[str]:
        """What makes a file a candidate: a name that can mean checkpointing, or a word of the
        code around a checkpointed model (catalogue.COMPOSITION_WORDS)."""
        return frozenset(self.functions | self.classes) | COMPOSITION_WORDS

    def copy(self) -> Names:
        return Names(set(self.functions), set(self.classes))

    def update(self, other: Names) -> Names:
        """Add `other`; return what was new."""
        new = Names(other.functions - self.functions, other.classes - self.classes)
        self.functions |= new.functions
        self.classes |= new.classes
        return new

    def function_pattern(self) -> re.Pattern[str] | None:
        """A regex for any function name as a whole word (rebuilt when names were added)."""
        key = len(self.functions)
        cached = getattr(self, "_pattern", None)
        if cached is None or cached[0] != key:
            words = sorted(self.functions, key=lambda n: (-len(n), n))
            pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, words)) + r")\b") if words else None
            cached = (key, pattern)
            self._pattern = cached
        return cached[1]

    def __bool__(self) -> bool:
        return bool(self.functions or self.classes)

    def mentioned_in_callee(self, callee: ast.expr) -> bool:
        """Whether a callee expression uses one of the function names (so it may resolve)."""
        functions = self.functions
        node = callee
        while True:  # the common shapes, `f`, `a.b.f` and `a.fs[i].g`, without a walk
            if node.__class__ is ast.Name:
                return node.id in functions
            if node.__class__ is ast.Subscript and node.slice.__class__ in (ast.Name, ast.Constant):
                if node.slice.__class__ is ast.Name and node.slice.id in functions:
                    return True
                node = node.value
                continue
            if node.__class__ is not ast.Attribute:
                break
            if node.attr in functions:
                return True
            node = node.value
        for child in walk(node):
            if isinstance(child, ast.Name):
                if child.id in functions:
                    return True
            elif isinstance(child, ast.Attribute) and child.attr in functions:
                return True
        return False

    def mentioned_in_bases(self, bases: Iterable[ast.expr]) -> bool:
        classes = self.classes
        for base in bases:
            for node in walk(base):
                if (isinstance(node, ast.Name) and node.id in classes) or (isinstance(node, ast.Attribute) and node.attr in classes):
                    return True
        return False


class Mentions:
    """Which names each file mentions as a whole word, each file read at most once per set
    of new names. A file the cache knows unchanged starts with what it mentioned of the
    names the cache knew, so a warm run reads nothing.

    Words are split out with one scan and intersected with the names: a regex
    alternation of the ~600 names a large project derives is about seven times slower."""

    def __init__(self, data: Callable[[str], bytes | None], recorded: dict[str, tuple[frozenset[str], frozenset[str]]]):
        self._data = data
        self._known = recorded  # path -> (names checked, names found among them)
        self._encoded: dict[frozenset[str], frozenset[bytes]] = {}  # most files miss the same names
        # (words, checked) -> words - checked, by identity: the files the cache knows share one
        # `checked`, and a run asks with a few `words`; a set difference per file and pass was
        # most of a warm run's selection (0.1 s on transformers)
        self._missing: dict[tuple[int, int], tuple[frozenset[str], frozenset[str], frozenset[str]]] = {}

    def of(self, path: str, words: frozenset[str]) -> frozenset[str]:
        checked, found = self._known.get(path, (frozenset(), frozenset()))
        missing = self._missing_of(words, checked) if checked else words
        if missing:
            data = self._data(path)
            if data is None:
                return frozenset()
            wanted = self._encoded.get(missing)
            if wanted is None:
                wanted = self._encoded[missing] = frozenset(name.encode() for name in missing)
            found = found | {word.decode() for word in whole_words(data, wanted)}
            self._known[path] = (words if checked <= words else checked | words, found)
        return found & words

    def _missing_of(self, words: frozenset[str], checked: frozenset[str]) -> frozenset[str]:
        """`words - checked`; the memo keeps both sets alive, so no other set takes their ids."""
        key = (id(words), id(checked))
        memo = self._missing.get(key)
        if memo is None:
            memo = self._missing[key] = (words, checked, words - checked)
        return memo[2]


_FEW_WORDS = 24  # up to this many names, a substring search per name beats splitting the file
_SPACE = ord(" ")  # what WORDS_ONLY maps every byte outside a word to


def whole_words(data: bytes, wanted: frozenset[bytes]) -> set[bytes]:
    """The `wanted` names that `data` spells as whole words (runs of ASCII letters, digits and
    `_`, as WORDS_ONLY splits them). A few names, as a later round of a run asks for, are found
    by substring search, which usually rules each out without splitting the file."""
    if len(wanted) > _FEW_WORDS:
        return set(wanted.intersection(data.translate(WORDS_ONLY).split()))
    return {word for word in wanted if word in data and _spelled(data, word)}


def _spelled(data: bytes, word: bytes) -> bool:
    """Whether `word` occurs in `data` not inside a longer word."""
    start = data.find(word)
    while start >= 0:
        end = start + len(word)
        if (start == 0 or WORDS_ONLY[data[start - 1]] == _SPACE) and (end == len(data) or WORDS_ONLY[data[end]] == _SPACE):
            return True
        start = data.find(word, start + 1)
    return False


def leaf(dotted: str) -> str:
    return dotted.rpartition(".")[2]
