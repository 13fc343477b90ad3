"""CKP101's fixes, written with libcst and handed around as text edits.

libcst parses only the files that need a fix (it is about ten times slower than `ast`, and
importing it costs a quarter of a second, so nothing else imports this module), rewrites
the one call, and the edit replaces the call's text: comments and layout inside the call
are kept because libcst keeps them.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ckptlint.finding import SAFE, UNSAFE, Edit, Fix
from ckptlint.fixes import line_starts


class FixBuilder:
    """Fixes for one linter run; each file is parsed by libcst at most once."""

    def __init__(self) -> None:
        self._parsed: dict[str, tuple[cst.Module, dict] | None] = {}

    def use_reentrant(self, key: str, text: str, span: tuple[int, int, int, int], position: int | None) -> tuple[Fix, ...]:
        """The CKP101 fixes for the call at `span` (1-based line, column, end line, end column in
        code points): safe (`use_reentrant=True`, today's behaviour) and unsafe
        (`use_reentrant=False`, the recommended mode, which changes behaviour)."""
        parsed = self._parse(key, text)
        if parsed is None:
            return ()
        module, positions = parsed
        node = _call_at(positions, span)
        if node is None:
            return ()
        fixes = []
        for value, applicability, description in (
            ("True", SAFE, "Pass use_reentrant=True (keeps today's reentrant behaviour)"),
            ("False", UNSAFE, "Pass use_reentrant=False (recommended; changes how the region is replayed)"),
        ):
            new = _with_use_reentrant(node, value, position)
            if new is None:
                return ()
            start, end = positions[node].start, positions[node].end
            edit = Edit(start.line, start.column + 1, end.line, end.column + 1, _rendered(module, node, new, text, start, end))
            fixes.append(Fix(applicability, description, (edit,)))
        return tuple(fixes)

    def _parse(self, key: str, text: str) -> tuple[cst.Module, dict] | None:
        if key not in self._parsed:
            try:
                module = cst.parse_module(text)
                positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
                self._parsed[key] = (module, positions)
            except (cst.ParserSyntaxError, RecursionError, ValueError):
                self._parsed[key] = None
        return self._parsed[key]


def _rendered(module: cst.Module, old: cst.Call, new: cst.Call, text: str, start, end) -> str:  # noqa: ANN001
    """The new call's text as it appears in the whole module (with the block's indentation):
    render the module with the call replaced and cut out what changed."""
    code = module.deep_replace(old, new).code  # type: ignore[union-attr]
    starts = line_starts(text)
    prefix = starts[start.line - 1] + start.column
    suffix = len(text) - (starts[end.line - 1] + end.column)
    return code[prefix : len(code) - suffix]


def _call_at(positions: dict, span: tuple[int, int, int, int]) -> cst.Call | None:
    """The libcst Call covering exactly `span`; several calls can start at one place
    (`checkpoint(use_reentrant=None)(fn)(x)`), only one also ends there."""
    line, column, end_line, end_column = span
    for node, where in positions.items():
        if (
            isinstance(node, cst.Call)
            and (where.start.line, where.start.column + 1) == (line, column)
            and (where.end.line, where.end.column + 1) == (end_line, end_column)
        ):
            return node
    return None


def _with_use_reentrant(call: cst.Call, value: str, position: int | None) -> cst.Call | None:
    """The call with `use_reentrant=<value>`: the existing argument changed, or one added."""
    replacement = cst.Name(value)
    args = list(call.args)
    for index, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == "use_reentrant":
            args[index] = arg.with_changes(value=replacement)
            return call.with_changes(args=args)
        if arg.star == "**" and isinstance(arg.value, cst.Dict):
            elements = list(arg.value.elements)
            for position_in_dict, element in enumerate(elements):
                key = getattr(element, "key", None)
                if isinstance(key, cst.SimpleString) and key.evaluated_value == "use_reentrant":
                    elements[position_in_dict] = element.with_changes(value=replacement)
                    args[index] = arg.with_changes(value=arg.value.with_changes(elements=elements))
                    return call.with_changes(args=args)
    positional = [arg for arg in args if arg.keyword is None and not arg.star]
    if position is not None and position < len(positional):  # checkpoint_sequential(fns, 2, x, None)
        index = args.index(positional[position])
        args[index] = args[index].with_changes(value=replacement)
        return call.with_changes(args=args)
    if any(arg.star == "**" for arg in args):
        return None  # **kwargs may carry it: adding the keyword could raise "multiple values"
    keyword = cst.Arg(
        keyword=cst.Name("use_reentrant"),
        value=replacement,
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    return call.with_changes(args=_appended(call, args, keyword))


def _appended(call: cst.Call, args: list[cst.Arg], new: cst.Arg) -> list[cst.Arg]:
    """Append an argument in the layout of the call: one per line stays one per line, and a
    comment after the last argument stays on that argument's line."""
    if not args:
        return [new]
    last = args[-1]
    trailing = last.comma if isinstance(last.comma, cst.Comma) else None
    previous = args[-2].comma.whitespace_after if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else call.whitespace_before_args
    if trailing is None:
        before_paren = last.whitespace_after_arg
        if isinstance(before_paren, cst.ParenthesizedWhitespace) and isinstance(previous, cst.ParenthesizedWhitespace):
            # `f(\n    b\n)`: the new argument on its own line, `)` where it was
            last = last.with_changes(whitespace_after_arg=cst.SimpleWhitespace(""), comma=cst.Comma(whitespace_after=previous))
            return [*args[:-1], last, new.with_changes(whitespace_after_arg=before_paren)]
        return [*args, new]  # `f(a, b)` -> `f(a, b, use_reentrant=True)`
    closing = trailing.whitespace_after
    if isinstance(closing, cst.ParenthesizedWhitespace) and isinstance(previous, cst.ParenthesizedWhitespace):
        # one argument per line: indent the new one like the others, `)` keeps its place
        last = last.with_changes(comma=trailing.with_changes(whitespace_after=closing.with_changes(last_line=previous.last_line)))
        end = cst.ParenthesizedWhitespace(
            first_line=cst.TrailingWhitespace(newline=closing.first_line.newline),
            empty_lines=[],
            indent=closing.indent,
            last_line=closing.last_line,
        )
        return [*args[:-1], last, new.with_changes(comma=trailing.with_changes(whitespace_after=end, whitespace_before=cst.SimpleWhitespace("")))]
    # `f(a, b,)` or a comment after the trailing comma: the new argument goes on the same line
    return [*args[:-1], last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), new.with_changes(comma=trailing)]
