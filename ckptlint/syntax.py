"""Parse source text into a tree, or say in one CKP000 finding why it cannot be parsed.

Analysis uses the standard library's `ast`: it parses about ten times faster than
libcst's native parser and carries end positions on every node (see docs/design-notes.md).
libcst is used where a concrete tree pays: source-preserving fixes.
"""

from __future__ import annotations

import ast
import sys
import warnings

from ckptlint.finding import Finding
from ckptlint.source import SourceFile

PARSE_ERROR = "CKP000"


def parse_error(source: SourceFile, message: str, line: int = 1, column: int = 1) -> Finding:
    if source.text:
        line = max(1, min(line, len(source.lines)))
    line, column = max(1, line), max(1, column)
    return Finding(source.display_path, line, column, PARSE_ERROR, message, line, column)


def parse(source: SourceFile) -> ast.Module | Finding:
    """The module's tree, or a CKP000 finding; never raises for bad input."""
    null = source.text.find("\0")
    if null >= 0:
        line, column = source.position(null)
        return parse_error(source, "cannot parse file: it contains null bytes (is it a binary file?)", line, column)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like
            return ast.parse(source.parse_text, filename=source.display_path, type_comments=False)
    except SyntaxError as exc:
        line = exc.lineno or 1
        column = exc.offset or 1
        return parse_error(source, f"syntax error: {exc.msg} (Python {_python_version()} grammar)", line, column)
    except ValueError as exc:
        return parse_error(source, f"cannot parse file: {exc}")
    except (RecursionError, MemoryError):
        return parse_error(source, "cannot parse file: expressions nested too deeply for the Python parser")


def _python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"
