"""CKP000: a file that could not be decoded or parsed (emitted by the parsing stage)."""

from ckptlint.rules.base import Rule


class ParseError(Rule):
    code = "CKP000"
    name = "parse-error"
    summary = "A file could not be decoded or parsed, so nothing in it was checked."
    explanation = """
        ckptlint reads each file as Python reads it (PEP 263 encoding, the grammar of
        Python 3.0 to 3.14 whichever interpreter runs ckptlint: a file using newer syntax,
        such as PEP 695 generics on Python 3.11, is analysed, not reported). A file that is
        not valid text in its declared encoding, holds null bytes, or has a syntax error
        cannot be analysed: a hazard in it would go unseen, so the file is reported instead
        of skipped silently. The position and message are the error's as the running
        interpreter reports it (in a file that also uses newer syntax, that can be the
        first newer construct), or line 1. Brackets nested more than 200 levels deep,
        which no Python version reads, are reported at the bracket that opens level 201;
        where libcst's parser crashed on the file, the message says so.
    """
    bad = """
        def forward(self, x)
            return checkpoint(self.block, x, use_reentrant=False)
    """
    good = """
        def forward(self, x):
            return checkpoint(self.block, x, use_reentrant=False)
    """
    remedy = """
        Fix the syntax error or the encoding (save the file as UTF-8, or declare its
        encoding with a `# -*- coding: ... -*-` comment on the first or second line).
        If the position points at valid newer syntax, the error is elsewhere in the file:
        running ckptlint with the Python your project targets shows where.
    """
    level = "error"
