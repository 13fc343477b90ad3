"""A module's text without its comments: all that other files' analyses may read of it.

An analysis reads the modules its file depends on through their syntax trees and, for quick
text tests (does this module spell `torch.compile`?), through this text. Comments reach
neither, so a comment edited in a dependency cannot change a dependent's result, and the
cache keeps the dependent (`code_digest`, engine/reuse.py): editing a docstring's neighbour
comment in a hub module does not redo every model that imports it.

Comments are found by a scan that skips string literals (prefixes, triple quotes, escapes)
as Python 3.11's tokenizer does. Python 3.12 lets an f-string's braces reuse its quote
(`f"{d["k"]}"`), which this scan would split; a file with an f-string whose braces do not
balance is therefore not stripped (`None`), and its digest is its content's.
"""

from __future__ import annotations

import hashlib
import re
from typing import Iterator

_STRING = r"""[A-Za-z]{0,2}(?:\"\"\"(?:\\.|[^\\])*?\"\"\"|'''(?:\\.|[^\\])*?'''|"(?:\\.|[^"\\\r\n])*+"|'(?:\\.|[^'\\\r\n])*+')"""
# code up to the next comment (strings whole: a `#` inside one is not a comment), then the comment
_PIECE = r"""((?:[^"'\#A-Za-z]++|[A-Za-z]++(?!["'])|""" + _STRING + r""")*+)(\#[^\r\n]*+)?"""
_PIECES = re.compile(_PIECE, re.S)
_PIECES_BYTES = re.compile(_PIECE.encode(), re.S)
_F_STRING_BODY = re.compile(_STRING, re.S)
_BRACE = re.compile(r"[{}]")


def strip_comments(text: str) -> str | None:
    """`text` with every comment (and the blanks before it) removed, lines kept; None when an
    f-string uses Python 3.12's nested quotes, which the scan cannot follow."""
    if "#" not in text:
        return text
    if not _f_strings_balanced(text):
        return None
    return "".join(code.rstrip(" \t") if comment else code for code, comment in _PIECES.findall(text))


def strip_comments_bytes(data: bytes) -> bytes:
    """`strip_comments` for raw bytes (a file's words, read without decoding); the bytes
    themselves where the scan cannot follow them (an encoding that is not ASCII-based, or
    Python 3.12's nested f-string quotes)."""
    if b"#" not in data or b"\x00" in data or not _f_strings_balanced(data.decode("latin-1")):
        return data
    return b"".join(code.rstrip(b" \t") if comment else code for code, comment in _PIECES_BYTES.findall(data))


def code_digest(code: str | None) -> str | None:
    """A digest of what other analyses can read of a module: its text without comments
    (`strip_comments`), less the blank lines that end it; None for a text not stripped."""
    if code is None:
        return None
    return hashlib.blake2b(code.rstrip().encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _f_strings_balanced(text: str) -> bool:
    """Whether every f-string literal the scan sees has balanced braces (`{{`/`}}` literal):
    in 3.11 syntax they always do; a 3.12 `f"{d["k"]}"` is seen as `f"{d["`, which does not."""
    for start in _f_string_starts(text):
        body = _F_STRING_BODY.match(text, start)
        if body is None:
            return False
        if not _braces_balance(body.group()):
            return False
    return True


def _f_string_starts(text: str) -> Iterator[int]:
    """Where each f-string prefix (`f`, `rf`, `fr`, any case) before a quote begins, found with
    `str.find` (a regex scan cost as much as stripping the comments)."""
    for needle in ('f"', "f'", 'F"', "F'", 'r"', "r'", 'R"', "R'"):
        at = text.find(needle)
        while at != -1:
            start = at
            if needle[0] in "rR":
                start = at - 1 if at > 0 and text[at - 1] in "fF" else -1
            elif at > 0 and text[at - 1] in "rR":
                start = at - 1
            if start == 0 or (start > 0 and not (text[start - 1].isalnum() or text[start - 1] in "_\"'")):
                yield start
            at = text.find(needle, at + 1)


def _braces_balance(literal: str) -> bool:
    depth = 0
    skip = -1  # the second brace of a literal `{{` or `}}`
    for brace in _BRACE.finditer(literal):
        at = brace.start()
        if at == skip:
            continue
        if brace.group() == "{":
            if depth == 0 and literal.startswith("{", at + 1):
                skip = at + 1
            else:
                depth += 1
        elif depth > 0:
            depth -= 1
        elif literal.startswith("}", at + 1):
            skip = at + 1
        else:
            return False
    return depth == 0
