"""Read code written for a newer Python than the one running ckptlint.

A pre-commit environment often runs an older interpreter than the project targets, and
`ast` only knows the running interpreter's grammar. When `ast` rejects a file, libcst's
native parser (which reads Python 3.0-3.14 whatever interpreter runs it) decides whether
the file is valid newer Python; if it is, the newer constructs are rewritten ("lowered")
into text the running `ast` accepts, keeping every line and the UTF-8 byte column of
everything the analysis reports on, so findings point into the original file:

- PEP 695/696 type parameters (`def f[T = int](x: T)`, `class A[T](B)`): blanked;
- PEP 695 `type X[T] = v`: the assignment `X = v`, with `v` in place and `X` moved to
  where `type` stood;
- strings that the running grammar cannot read (PEP 701 f-strings with nested same
  quotes, backslashes, comments or line breaks in a replacement field; PEP 750
  t-strings): a tuple of their replacement expressions, each in place, the literal text
  blanked (so a hazard inside a replacement field is still seen);
- PEP 758 `except A, B:`: `except A| B:` (same length; which exceptions are caught does
  not matter to the analysis).

Blanked text becomes spaces, as many as its UTF-8 bytes (`ast` columns are byte offsets,
converted with the original line), and each blanked line break gets a backslash so the
statement stays one logical line. Nothing is executed.

Where the constructs are comes from one pass of libcst's code generator that records each
node's offsets (as libcst's own `PositionProvider` does, but as plain offsets and without
its visitor): a sixth of the cost of `PositionProvider` on typing.py.
"""

from __future__ import annotations

import ast
import contextlib
import warnings
from typing import Sequence

import libcst as cst
from libcst._nodes.internal import CodegenState  # what PositionProvider extends, too

# The node classes to rewrite, by name: libcst releases before 3.14 support lack some.
_STRINGS = frozenset({"ConcatenatedString", "FormattedString", "TemplatedString"})
_LOWERED = frozenset({"FunctionDef", "ClassDef", "TypeAlias", "ExceptHandler", "ExceptStarHandler"} | _STRINGS)
_LOWERED_CLASSES = frozenset(getattr(cst, name) for name in _LOWERED if hasattr(cst, name))
_FIELDS = frozenset({"FormattedStringExpression", "TemplatedStringExpression"})
_NO_POSITION = contextlib.nullcontext()


def lower(text: str) -> str | None:
    """`text` with newer syntax rewritten for the running `ast` (same lines, same byte
    columns), or None when libcst cannot parse it either (a real syntax error)."""
    try:
        module = cst.parse_module(text)
        state = _Offsets(text, default_indent=module.default_indent, default_newline=module.default_newline)
        module._codegen(state)
    except (cst.ParserSyntaxError, _OutOfStep, RecursionError, MemoryError):
        return None
    if state.offset != len(text):
        return None  # libcst did not reproduce the text: offsets would be wrong
    lowering = _Lowering(text, state.spans)
    for node in sorted(state.found, key=lambda node: (state.spans[node][0], -state.spans[node][1])):
        lowering.lower(node)
    return "".join(lowering.out)


class _OutOfStep(Exception):
    """libcst's code differs from the text by more than whitespace."""


class _Offsets(CodegenState):
    """Code generation that writes nothing and records each node's [start, end) offsets into
    `text` (including the whitespace the node owns, and its parentheses).

    libcst 1.9 does not always reproduce whitespace (`except (A) :` comes back as
    `except (A):`, `f"{x!s  }"` as `f"{x!s}"`), so each token is matched against the text
    and whitespace libcst dropped or added is stepped over; anything else is `_OutOfStep`."""

    def __init__(self, text: str, default_indent: str, default_newline: str):
        super().__init__(default_indent=default_indent, default_newline=default_newline)
        self.text = text
        self.offset = 0
        self.last = 0
        self.starts: list[int] = []
        self.spans: dict[cst.CSTNode, tuple[int, int]] = {}
        self.found: list[cst.CSTNode] = []

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.add_token(token)

    def add_token(self, value: str) -> None:
        if not self.text.startswith(value, self.offset):
            self.offset = self._in_step(value)
        self.offset += len(value)
        self.last = len(value)
        if not self.tokens:
            self.tokens.append(value)  # libcst asks only whether anything was written

    def pop_trailing_newline(self) -> None:
        if self.tokens:
            self.offset -= self.last  # the last token: the newline a file without one lacks

    def _in_step(self, value: str) -> int:
        """Where `value` starts in the text: after whitespace libcst dropped; where it is now
        less its length when `value` is whitespace the text lacks (it then takes up nothing)."""
        text, position = self.text, self.offset
        while position < len(text) and text[position] in " \t\f":
            position += 1
            if text.startswith(value, position):
                return position
        if not value.strip(" \t\f"):
            return self.offset - len(value)
        if self.offset == len(text) and value == self.default_newline:
            return self.offset  # the line break libcst writes, then takes back, at the end
        raise _OutOfStep(value)

    def before_codegen(self, node: cst.CSTNode) -> None:
        self.starts.append(self.offset)

    def after_codegen(self, node: cst.CSTNode) -> None:
        self.spans[node] = (self.starts.pop(), self.offset)
        if node.__class__ in _LOWERED_CLASSES:
            self.found.append(node)

    def record_syntactic_position(  # type: ignore[override]  # any context manager does
        self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None, end_node: cst.CSTNode | None = None
    ) -> contextlib.nullcontext[None]:
        return _NO_POSITION  # whitespace-inclusive offsets are enough: no generator per node


def _bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


class _Lowering:
    """Per-character replacements: `out[i]` is what stands for `text[i]`."""

    def __init__(self, text: str, spans: dict[cst.CSTNode, tuple[int, int]]):
        self.text = text
        self.out = list(text)
        self.spans = spans
        self.blanked: list[tuple[int, int]] = []  # type parameters: nothing inside is lowered
        self.done: set[int] = set()  # ids of strings lowered with their concatenation

    def lower(self, node: cst.CSTNode) -> None:
        start = self.spans[node][0]
        if id(node) in self.done or any(low <= start < high for low, high in self.blanked):
            return
        name = type(node).__name__
        if name in _STRINGS:
            self._string(node)
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            if node.type_parameters is not None:
                self.blank(*self.spans[node.type_parameters], remember=True)
        elif name == "TypeAlias":
            self._type_alias(node)
        elif name in ("ExceptHandler", "ExceptStarHandler"):
            self._unparenthesised_types(getattr(node, "type", None))

    # -- edits -------------------------------------------------------------------------------

    def blank(self, start: int, end: int, remember: bool = False) -> None:
        for index in range(start, end):
            character = self.text[index]
            self.out[index] = "\\\n" if character == "\n" else " " * _bytes(character)
        if remember:
            self.blanked.append((start, end))

    def put(self, index: int, replacement: str) -> None:
        """One ASCII character over the blanked character at `index` (before a line break)."""
        if self.text[index] == "\n":
            self.out[index] = replacement + self.out[index]
        else:
            self.out[index] = replacement + self.out[index][1:]

    # -- PEP 695 -----------------------------------------------------------------------------

    def _type_alias(self, node: cst.CSTNode) -> None:
        """`type X[T] = v` -> `X         = v`: the value in place, the name where `type` was."""
        name: cst.Name = getattr(node, "name")
        parameters: cst.CSTNode | None = getattr(node, "type_parameters")
        start = self.spans[node][0]
        after_name = self.spans[parameters if parameters is not None else name][1]
        value_start = self.spans[getattr(node, "value")][0]
        equals = self.text.index("=", after_name, value_start)
        self.blank(start, equals, remember=True)
        needed, taken, end = _bytes(name.value), 0, start
        while end < equals and taken < needed and self.text[end] != "\n":
            taken += _bytes(self.text[end])
            end += 1
        self.out[start] = name.value + " " * max(0, taken - needed)
        for index in range(start + 1, end):
            self.out[index] = ""

    # -- PEP 758 -----------------------------------------------------------------------------

    def _unparenthesised_types(self, types: object) -> None:
        """`except A, B:` -> `except A| B:`."""
        if not isinstance(types, cst.Tuple) or types.lpar:
            return
        elements = list(types.elements)
        for index, element in enumerate(elements):
            if isinstance(element.comma, cst.Comma):
                comma = self.text.index(",", self.spans[element.value][1])
                self.out[comma] = "|" if index + 1 < len(elements) else " "

    # -- PEP 701 / 750 -----------------------------------------------------------------------

    def _string(self, node: cst.CSTNode) -> None:
        """A string (or implicit concatenation) the running grammar cannot read -> a tuple of
        its replacement expressions, each at its own place, the rest blanked."""
        parts = _parts(node)
        self.done.update(id(part) for part in parts)
        start, end = self.spans[node]
        if _readable(self.text[start:end]):
            return
        self.blank(start, end)
        self.put(start, "(")
        self.put(end - 1, ")")
        for part in parts:
            self._fields(getattr(part, "parts", ()))

    def _fields(self, contents: Sequence[cst.CSTNode]) -> None:
        for content in contents:
            if type(content).__name__ in _FIELDS:
                expression: cst.BaseExpression = getattr(content, "expression")
                end = self.spans[expression][1]
                for index in range(self.spans[content][0] + 1, end):  # after `{`
                    self.out[index] = self.text[index]
                self.put(end, ",")
                self._fields(getattr(content, "format_spec", None) or ())


def _parts(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The strings of an implicit concatenation (the concatenations too), or the string."""
    if isinstance(node, cst.ConcatenatedString):
        return [node, *_parts(node.left), *_parts(node.right)]
    return [node]


def _readable(string: str) -> bool:
    """Whether the running `ast` reads this string expression as it stands."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(f"(\n{string}\n)", mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True
