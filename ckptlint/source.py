"""Turn a file's bytes into text the parser accepts, and map parser offsets to columns.

Decoding follows PEP 263 (BOM, coding cookie, UTF-8 default). A file that cannot be
decoded is a CKP000 finding, never an exception.
"""

from __future__ import annotations

import bisect

import io
import re
import tokenize
from dataclasses import dataclass, field
from functools import cached_property

from ckptlint.code_text import strip_comments

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class DecodeError(Exception):
    """The bytes are not text in the declared encoding."""

    def __init__(self, message: str, line: int = 1, column: int = 1):
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


def decode_source(data: bytes) -> str:
    """Decode Python source bytes as the interpreter would (PEP 263, PEP 3120)."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        raise DecodeError(f"cannot decode file: {exc.msg if hasattr(exc, 'msg') else exc}") from None
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise DecodeError(
            f"cannot decode file as {encoding}: byte 0x{data[exc.start]:02x} at offset {exc.start}",
            line,
            column,
        ) from None
    except LookupError:
        raise DecodeError(f"cannot decode file: unknown encoding {encoding!r}") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return text


@dataclass
class SourceFile:
    """The text of one Python file and how to address positions in it."""

    path: str  # the file system path, as the linter opened it
    display_path: str  # the path shown to the user
    text: str
    _byte_lines: dict[int, bytes] = field(default_factory=dict, repr=False)
    _word_lines: dict[str, list[int]] = field(default_factory=dict, repr=False)

    @cached_property
    def lines(self) -> list[str]:
        """Physical lines without their line breaks, split as Python's tokenizer does (a
        text without `\\r` splits on `\\n` alone, several times faster than the regex)."""
        return _split_lines(self.text)

    @cached_property
    def stripped(self) -> str | None:
        """The text without its comments, lines kept; None where comments cannot be told
        apart (code_text.py)."""
        return strip_comments(self.text)

    @property
    def code(self) -> str:
        """What text tests read (`stripped`, else the text), so that a comment never changes
        an analysis of another file."""
        stripped = self.stripped
        return self.text if stripped is None else stripped

    @cached_property
    def _code_lines(self) -> list[str]:
        return _split_lines(self.code)

    @cached_property
    def parse_text(self) -> str:
        """The text with every line break as `\\n`, which the parser handles everywhere."""
        return _LINE_BREAK.sub("\n", self.text) if "\r" in self.text else self.text

    def mentions(self, word: str, node: object) -> bool:
        """Whether a line of `node` (a statement or expression; a module: all of them) holds
        `word` as code (comments left out): lets a pass skip a node whose syntax cannot name
        what it looks for, cheaper than walking it. The lines are found once per word per file."""
        first = getattr(node, "lineno", None)
        if first is None:
            return self.lines_between(word, 1, len(self.lines))
        return self.lines_between(word, first, getattr(node, "end_lineno", None) or first)

    def lines_between(self, word: str, first: int, last: int) -> bool:
        """Whether a line in `first..last` holds `word`."""
        hits = self._word_lines.get(word)
        if hits is None:
            hits = self._word_lines[word] = [number for number, line in enumerate(self._code_lines, 1) if word in line]
        at = bisect.bisect_left(hits, first)
        return at < len(hits) and hits[at] <= last

    def position(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a code point offset into `text`."""
        lines = _LINE_BREAK.split(self.text[:offset])
        return len(lines), len(lines[-1]) + 1

    def line(self, lineno: int) -> str:
        if 1 <= lineno <= len(self.lines):
            return self.lines[lineno - 1]
        return ""

    def column(self, lineno: int, utf8_offset: int) -> int:
        """1-based code point column from the parser's 0-based UTF-8 byte offset."""
        text = self.line(lineno)
        if text.isascii():
            return utf8_offset + 1
        encoded = self._byte_lines.get(lineno)
        if encoded is None:
            encoded = self._byte_lines[lineno] = text.encode("utf-8", "surrogatepass")
        return len(encoded[:utf8_offset].decode("utf-8", "replace")) + 1


def _split_lines(text: str) -> list[str]:
    """Physical lines as Python's tokenizer splits them (`\r\n`, `\r`, `\n`)."""
    return _LINE_BREAK.split(text) if "\r" in text else text.split("\n")
