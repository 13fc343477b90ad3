"""Columns in the units each consumer counts: code points (ours), UTF-16 code units (LSP's
default, GitHub), UTF-8 bytes. A finding after non-ASCII text must land on the right character."""

from __future__ import annotations


def convert_column(line_text: str, column: int, encoding: str = "utf-16") -> int:
    """0-based column in `encoding` units for a 1-based code point column on `line_text`."""
    prefix = line_text[: max(0, column - 1)]
    if encoding == "utf-8":
        return len(prefix.encode("utf-8", "surrogatepass"))
    if encoding == "utf-16":
        return len(prefix) + sum(1 for character in prefix if ord(character) > 0xFFFF)
    return len(prefix)


def to_code_points(line_text: str, column: int, encoding: str = "utf-16") -> int:
    """1-based code point column for a 0-based column in `encoding` units."""
    if encoding == "utf-32":
        return column + 1
    units = 0
    for index, character in enumerate(line_text):
        if units >= column:
            return index + 1
        units += len(character.encode("utf-8")) if encoding == "utf-8" else (2 if ord(character) > 0xFFFF else 1)
    return len(line_text) + 1
