"""Fixes that edit one call (CKP101's `use_reentrant`, CKP305's `gradient_checkpointing_kwargs`), written with libcst and handed around as text edits.

libcst parses only the files that need a fix (it is about ten times slower than `ast`, and
importing it costs a quarter of a second, so nothing else imports this module), rewrites
the one call, and the edit replaces the call's text: comments and layout inside the call
are kept because libcst keeps them.
"""

from __future__ import annotations

import re

import libcst as cst

from ckptlint.finding import SAFE, UNSAFE, Edit, Fix
from ckptlint.fixes import line_starts
from ckptlint.nesting import measure


class FixBuilder:
    """Fixes for one linter run.

    Only the call's own text is parsed (as an expression), not its module: libcst parses about
    ten thousand lines a second, and a fix must not cost a minute in a generated 5 MB file.
    Layout inside the call (line breaks, indentation, comments) is part of that text. A call
    libcst's native parser might crash on (nesting.py: over 500 tokens) gets no fix: `ast`
    reads 600 nested `lambda a=` defaults, on which libcst overflows the stack."""

    def add_keyword(self, text: str, span: tuple[int, int, int, int], keyword: str, value: str, safe: bool, description: str) -> tuple[Fix, ...]:
        """One fix adding `keyword=value` (value as source text) to the call at `span`; none when
        the call already passes the keyword or `**kwargs` that may carry it."""
        node = self._call_at(text, span)
        if node is None or any(arg.star == "**" or (arg.keyword is not None and arg.keyword.value == keyword) for arg in node.args):
            return ()
        try:
            parsed = cst.parse_expression(value)
        except cst.ParserSyntaxError:
            return ()
        new = cst.Arg(
            keyword=cst.Name(keyword),
            value=parsed,
            equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
        )
        renderer = cst.Module(body=[], default_newline=_newline(text))
        line, column, end_line, end_column = span
        code = renderer.code_for_node(node.with_changes(args=_appended(node, list(node.args), new)))
        return (Fix(SAFE if safe else UNSAFE, description, (Edit(line, column, end_line, end_column, code),)),)

    def _call_at(self, text: str, span: tuple[int, int, int, int]) -> cst.Call | None:
        line, column, end_line, end_column = span
        starts = line_starts(text)
        if not (0 < line <= end_line <= len(starts)):
            return None
        call_text = text[starts[line - 1] + column - 1 : starts[end_line - 1] + end_column - 1]
        if not measure(call_text).safe_in_process:  # libcst's native parser could crash the run: no fix
            return None
        try:
            node = cst.parse_expression(call_text, config=cst.PartialParserConfig(default_newline=_newline(text)))
        except (cst.ParserSyntaxError, RecursionError, ValueError):
            return None
        return node if isinstance(node, cst.Call) else None

    def use_reentrant(self, text: str, span: tuple[int, int, int, int], position: int | None) -> tuple[Fix, ...]:
        """The CKP101 fixes for the call at `span` (1-based line, column, end line, end column in
        code points): safe (`use_reentrant=True`, today's behaviour) and unsafe
        (`use_reentrant=False`, the recommended mode, which changes behaviour)."""
        node = self._call_at(text, span)
        if node is None:
            return ()
        line, column, end_line, end_column = span
        renderer = cst.Module(body=[], default_newline=_newline(text))
        fixes = []
        for value, applicability, description in (
            ("True", SAFE, "Pass use_reentrant=True (keeps today's reentrant behaviour)"),
            ("False", UNSAFE, "Pass use_reentrant=False (recommended; changes how the region is replayed)"),
        ):
            new = _with_use_reentrant(node, value, position)
            if new is None:
                return ()
            edit = Edit(line, column, end_line, end_column, renderer.code_for_node(new))
            fixes.append(Fix(applicability, description, (edit,)))
        return tuple(fixes)


def _newline(text: str) -> str:
    match = _FIRST_NEWLINE.search(text)
    return match.group(0) if match else "\n"


_FIRST_NEWLINE = re.compile(r"\r\n|\r|\n")


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
