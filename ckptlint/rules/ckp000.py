"""CKP000: a file that could not be decoded or parsed (emitted by the parsing stage)."""

from ckptlint.rules.base import Rule


class ParseError(Rule):
    code = "CKP000"
    name = "parse-error"
    summary = "A file could not be decoded or parsed, so nothing in it was checked."
    explanation = """
        ckptlint reads each file as Python reads it (PEP 263 encoding, the running
        interpreter's grammar). A file that is not valid text in its declared encoding,
        holds null bytes, or has a syntax error cannot be analysed: a hazard in it
        would go unseen, so the file is reported instead of skipped silently. The
        position is the error's, or line 1.
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
        Code written for a newer Python than the one running ckptlint is reported as a
        syntax error: run ckptlint with the Python your project targets.
    """
    level = "error"
