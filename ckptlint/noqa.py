"""`# noqa` comments, as flake8 reads them.

`# noqa` silences every finding on its logical line; `# noqa: CKP101,CKP2` silences
codes by prefix. A comment on any physical line of a multi-line statement counts for
the whole statement. `# ckptlint: noqa` (optionally `: CODES`) on a line of its own
silences the file. Comments are found with `tokenize`, so `"# noqa"` in a string
does nothing.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field
from typing import Iterable

from ckptlint.finding import Edit, Finding
from ckptlint.source import SourceFile

_CODES = r"[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*"
NOQA = re.compile(rf"#\s*noqa(?::[\s]?(?P<codes>{_CODES}))?", re.IGNORECASE)
FILE_NOQA = re.compile(rf"#\s*ckptlint\s*:\s*noqa(?::[\s]?(?P<codes>{_CODES}))?\s*$", re.IGNORECASE)
_MENTIONS_NOQA = re.compile("noqa", re.IGNORECASE)
ALL = None  # a bare noqa: every code


@dataclass(frozen=True)
class NoqaComment:
    line: int  # where the comment is
    column: int
    codes: tuple[str, ...] | None  # None: bare `# noqa`
    text: str

    def covers(self, code: str) -> bool:
        return self.codes is None or any(code.startswith(prefix) for prefix in self.codes)


@dataclass
class Suppressions:
    """The noqa comments of one file and the logical line each covers."""

    file_codes: tuple[str, ...] | None | bool = False  # False: no file-level noqa
    by_line: dict[int, list[NoqaComment]] = field(default_factory=dict)
    used: dict[tuple[int, int], set[str]] = field(default_factory=dict)  # comment -> codes that matched

    def suppresses(self, finding: Finding) -> bool:
        if self.file_codes is None or (
            isinstance(self.file_codes, tuple) and any(finding.code.startswith(c) for c in self.file_codes)
        ):
            return True
        for comment in self.by_line.get(finding.line, ()):
            if comment.covers(finding.code):
                matched = self.used.setdefault((comment.line, comment.column), set())
                matched.update(c for c in comment.codes or () if finding.code.startswith(c))
                return True
        return False

    def unused(self) -> list[tuple[NoqaComment, list[str]]]:
        """ckptlint codes in `# noqa: ...` comments that silenced nothing (others are other tools')."""
        found = []
        for comment in self.comments():
            if comment.codes is None:
                continue
            used = self.used.get((comment.line, comment.column), set())
            idle = [code for code in comment.codes if code.startswith("CKP") and code not in used]
            if idle:
                found.append((comment, idle))
        return found

    def comments(self) -> list[NoqaComment]:
        unique = {(c.line, c.column): c for comments in self.by_line.values() for c in comments}
        return [unique[key] for key in sorted(unique)]


def _codes(match: re.Match[str]) -> tuple[str, ...] | None:
    codes = match.group("codes")
    if not codes:
        return ALL
    return tuple(code.upper() for code in re.split(r"[,\s]+", codes.strip()) if code)


def suppressions_for(source: SourceFile) -> Suppressions:
    result = Suppressions()
    if not _MENTIONS_NOQA.search(source.text):
        return result  # most files: no need to tokenize
    comments: list[tuple[int, int, str]] = []
    logical_ranges: list[tuple[int, int]] = []
    try:
        start: int | None = None
        for token in tokenize.generate_tokens(io.StringIO(source.parse_text).readline):
            kind = token.type
            if kind == tokenize.COMMENT:
                comments.append((token.start[0], token.start[1], token.string))
            if kind in (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING):
                continue
            if kind in (tokenize.NEWLINE, tokenize.ENDMARKER):
                if start is not None:
                    logical_ranges.append((start, token.end[0]))
                start = None
            elif start is None:
                start = token.start[0]
    except (tokenize.TokenError, SyntaxError):
        comments = [(n, line.find("#"), line[line.find("#"):]) for n, line in enumerate(source.lines, 1) if "#" in line]
        logical_ranges = []
    span_of: dict[int, tuple[int, int]] = {}
    for first, last in logical_ranges:
        if last > first:
            for line in range(first, last + 1):
                span_of[line] = (first, last)
    for line, column, text in comments:
        file_match = FILE_NOQA.match(text)
        if file_match is not None and source.line(line)[:column].strip() == "":
            result.file_codes = _codes(file_match)
            continue
        match = NOQA.search(text)
        if match is None:
            continue
        comment = NoqaComment(line, column + 1, _codes(match), match.group(0))
        first, last = span_of.get(line, (line, line))
        for covered in range(first, last + 1):
            result.by_line.setdefault(covered, []).append(comment)
    return result


def apply_suppressions(findings: Iterable[Finding], sources: dict[str, SourceFile]) -> tuple[list[Finding], dict[str, Suppressions]]:
    """Drop suppressed findings; returns the rest and the suppressions read per path."""
    kept: list[Finding] = []
    by_path: dict[str, Suppressions] = {}
    for finding in findings:
        source = sources.get(finding.path)
        if source is None:
            kept.append(finding)
            continue
        suppressions = by_path.get(finding.path)
        if suppressions is None:
            suppressions = by_path[finding.path] = suppressions_for(source)
        if not suppressions.suppresses(finding):
            kept.append(finding)
    return kept, by_path


def noqa_edits(source: SourceFile, findings: Iterable[Finding]) -> list[Edit]:
    """`--add-noqa`: a `# noqa: CODES` comment for each line with findings (merged into an
    existing `# noqa: ...`; a line inside a multi-line string gets it where the string ends)."""
    string_ends = _multiline_string_ends(source)
    codes_by_line: dict[int, set[str]] = {}
    for finding in findings:
        line = string_ends.get(finding.line, finding.line)
        codes_by_line.setdefault(line, set()).add(finding.code)
    existing = suppressions_for(source)
    edits = []
    for line, codes in sorted(codes_by_line.items()):
        text = source.line(line)
        comments = [c for c in existing.by_line.get(line, ()) if c.line == line]
        if comments:
            comment = comments[0]
            if comment.codes is None:
                continue  # a bare noqa already silences everything
            missing = sorted(codes - set(comment.codes))
            if not missing:
                continue
            start = comment.column - 1 + len(comment.text)
            merged = comment.text.rstrip() + "," + ",".join(missing)
            edits.append(Edit(line, comment.column, line, start + 1, merged))
            continue
        end = len(text) + 1
        edits.append(Edit(line, end, line, end, f"  # noqa: {','.join(sorted(codes))}"))
    return edits


def _multiline_string_ends(source: SourceFile) -> dict[int, int]:
    ends: dict[int, int] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source.parse_text).readline):
            if token.type == tokenize.STRING and token.end[0] > token.start[0]:
                for line in range(token.start[0], token.end[0]):
                    ends[line] = token.end[0]
    except (tokenize.TokenError, SyntaxError):
        pass
    return ends
