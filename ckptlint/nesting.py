"""How deeply a text nests, read from its tokens before libcst's native parser sees it.

libcst's parser is native code that recurses on the machine stack without a depth limit:
on an 8 MB stack 1,500 nested brackets end the process with SIGSEGV, which no `except`
catches, so one file would end the whole run. CPython's own parser (`ast`) is safe: it stops
at 200 nested brackets ("too many nested parentheses", in every Python from 3.8 to 3.14) and
guards its recursion, so only text `ast` rejected, and call texts for fixes, reach libcst.

`measure` tokenizes with the standard library's `tokenize` (pure Python on 3.11: about 2.5x
the time of `ast.parse`, paid only where libcst would run anyway, at 15x) and reports:

- the bracket past `MAX_BRACKET_DEPTH`: no Python reads the text, whatever libcst would do;
- the longest statement in tokens, which bounds how deep any parser recurses (indentation
  is limited to 100 levels by the tokenizer). Measured with libcst 1.9 in a thread with a
  1 MB stack: 152 nested brackets, 63 nested `lambda a=lambda a=...` defaults (7 tokens a
  level), 429 nested `lambda:`, 1,000 unary minuses. A statement of `IN_PROCESS_TOKENS`
  tokens with at most 200 nested brackets stays under 2 MB of stack, and under a second
  where libcst is quadratic (3,000 chained subscripts take 20 s). On 3.11 an f-string is one
  token whose fields libcst parses too, so it counts as many tokens as it has characters.
"""

from __future__ import annotations

import io
import tokenize
from dataclasses import dataclass

MAX_BRACKET_DEPTH = 200  # CPython's tokenizer limit (MAXLEVEL) in every version
IN_PROCESS_TOKENS = 500  # a statement libcst reads in under 2 MB of stack (8 MB on Linux, in threads too)
_OPENING = frozenset("([{")
_CLOSING = frozenset(")]}")
_LAYOUT = frozenset({tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT})
_ENDS = frozenset({tokenize.NEWLINE, tokenize.ENDMARKER})
_PREFIX_LETTERS = "rRbBuUfFtT"
_TOO_DEEP = "too many nested parentheses"  # the tokenizer's message from Python 3.12 on


@dataclass(frozen=True)
class Nesting:
    too_deep: tuple[int, int] | None  # 1-based line and column of the bracket past the limit
    longest: int  # tokens in the longest statement (see the module docstring for f-strings)
    longest_line: int  # where that statement starts
    complete: bool  # the tokenizer read the whole text (a file `ast` rejected may stop it)

    @property
    def safe_in_process(self) -> bool:
        """Whether libcst can read the text without the risk of a native crash."""
        return self.complete and self.too_deep is None and self.longest <= IN_PROCESS_TOKENS


def measure(text: str) -> Nesting:
    """The nesting of `text`; never raises for bad input (an untokenizable text is not complete)."""
    depth = size = longest = 0
    start = longest_line = 1
    previous: tokenize.TokenInfo | None = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            kind = token.type
            if kind in _ENDS:
                size = 0
                continue
            if kind in _LAYOUT:
                continue
            if kind == tokenize.OP:
                if token.string in _OPENING:
                    depth += 1
                    if depth > MAX_BRACKET_DEPTH:
                        return Nesting((token.start[0], token.start[1] + 1), longest, longest_line, complete=False)
                elif token.string in _CLOSING:
                    depth = max(0, depth - 1)
            if size == 0:
                start = token.start[0]
            size += len(token.string) if kind == tokenize.STRING and _has_fields(token, previous) else 1
            if size > longest:
                longest, longest_line = size, start
            previous = token
    except tokenize.TokenError as exc:  # from 3.12 the tokenizer stops at 200 nested brackets itself
        message, where = (exc.args + ("", None))[:2]
        if message == _TOO_DEEP and isinstance(where, tuple):
            return Nesting((where[0], max(1, where[1])), longest, longest_line, complete=False)
        return Nesting(None, longest, longest_line, complete=False)
    except SyntaxError:  # IndentationError, and errors of the 3.12+ tokenizer
        return Nesting(None, longest, longest_line, complete=False)
    return Nesting(None, longest, longest_line, complete=True)


def _has_fields(token: tokenize.TokenInfo, previous: tokenize.TokenInfo | None) -> bool:
    """Whether a STRING token may hold replacement fields libcst parses: an f-string, or
    (3.11 does not know the prefix, so `t"..."` is a name before a string) a t-string."""
    prefix = token.string[: len(token.string) - len(token.string.lstrip(_PREFIX_LETTERS))]
    if previous is not None and previous.type == tokenize.NAME and previous.end == token.start and not previous.string.strip(_PREFIX_LETTERS):
        prefix += previous.string
    return any(letter in prefix for letter in "fFtT")
