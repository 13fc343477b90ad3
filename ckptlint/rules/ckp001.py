"""CKP001: a `# noqa: CKPxxx` that silences nothing (reported with --report-unused-noqa)."""

from ckptlint.rules.base import Rule


class UnusedNoqa(Rule):
    code = "CKP001"
    name = "unused-noqa"
    summary = "A `# noqa` comment names a ckptlint code that has no finding on its line (only with --report-unused-noqa)."
    explanation = """
        Suppressions outlive the code they were written for: once a hazard is fixed, its
        `# noqa: CKP201` silences nothing and would silently hide the next one on that line.
        With `--report-unused-noqa` (or `report-unused-noqa = true` in `[tool.ckptlint]`)
        ckptlint reports each ckptlint code in a `# noqa` comment that suppressed no
        finding. Codes of other tools (`E501`) and bare `# noqa` are left alone.
    """
    bad = """
        from torch.utils.checkpoint import checkpoint


        def forward(block, x):
            return checkpoint(block, x, use_reentrant=False)  # noqa: CKP101
    """
    good = """
        from torch.utils.checkpoint import checkpoint


        def forward(block, x):
            return checkpoint(block, x, use_reentrant=False)
    """
    remedy = """
        Remove the code from the comment (or the whole comment).
    """
    options = {"report_unused_noqa": True}
