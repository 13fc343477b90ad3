"""What every rule is: a code, a name, its explanation with examples, and a check.

Rules read analysis results (checkpoint calls, region effect summaries); they never
parse or walk trees themselves. The explanation and the bad/good examples live next
to the check, so `ckptlint rules CODE`, docs/rules/ and the tests share one source.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import replace
from typing import Iterable, Iterator

from ckptlint.calls import CheckpointCall
from ckptlint.finding import Finding, Fix, Site
from ckptlint.analysis.regions.summary import BUILT_BY, ONLY_WHEN, Effect
from ckptlint.rules.context import RuleContext
from ckptlint.symbols import ModuleSymbols

# what a rule file needs besides the vocabulary, the catalogue and findings
__all__ = ["CheckpointCall", "Effect", "RegionRule", "Rule", "RuleContext", "context_place", "finding_at"]


class Rule:
    code: str = ""
    name: str = ""  # kebab-case, as in docs URLs and SARIF
    summary: str = ""  # one line: what it flags
    explanation: str = ""  # markdown: why replay goes wrong
    bad: str = ""  # a program the rule flags
    good: str = ""  # the same program made safe; the rule is silent
    remedy: str = ""  # how to fix it by hand, or what --fix does
    under_contexts: str = ""  # markdown: what the hazard does under torch.compile / SAC (analysis/contexts/verdicts.py)
    level: str = "warning"
    fixable: bool = False
    options: dict[str, object] = {}  # configuration the rule needs to run (Config fields), for docs and tests
    # divergences the runtime companion can observe that confirm a finding of this rule
    # (categories of runtime/compare.py's reasons; rng-python / rng-torch tell RNG streams apart)
    confirmed_by: frozenset[str] = frozenset()

    def check(self, context: RuleContext) -> Iterator[Finding]:
        return iter(())

    def document(self) -> str:
        """The rule's page: what `ckptlint rules CODE` prints and docs/rules/CODE.md holds."""
        parts = [
            f"# {self.code}: {self.name}",
            "",
            self.summary,
            "",
            "## Why",
            "",
            textwrap.dedent(self.explanation).strip(),
            "",
            "## Bad",
            "",
            "```python",
            textwrap.dedent(self.bad).strip(),
            "```",
            "",
            "## Good",
            "",
            "```python",
            textwrap.dedent(self.good).strip(),
            "```",
            "",
            "## How to fix",
            "",
            textwrap.dedent(self.remedy).strip(),
            "",
            *(["## Under torch.compile / SAC", "", textwrap.dedent(self.under_contexts).strip(), ""] if self.under_contexts else []),
            "## Suppress",
            "",
            f"Add `# noqa: {self.code}` to the reported line, or list `{self.code}` under `ignore` or "
            "`per-file-ignores` in `[tool.ckptlint]`.",
        ]
        return "\n".join(parts) + "\n"


def context_place(context: RuleContext, call: CheckpointCall, node: ast.AST) -> str:
    """`line 12` of a node of the module being checked, or `train.py:12` when the finding is
    reported at a checkpoint call in another file."""
    line = getattr(node, "lineno", 0)
    return f"line {line}" if call.module is context.module else f"{context.module.source.display_path}:{line}"


def finding_at(
    module: ModuleSymbols,
    node: ast.AST,
    code: str,
    summary: str,
    sites: Iterable[Site] = (),
    fixes: Iterable[Fix] = (),
) -> Finding:
    """A finding spanning `node` in `module`, with code point columns."""
    source = module.source
    line = node.lineno  # type: ignore[attr-defined]  # effects and calls point at expressions, statements or keywords, which have positions
    end_line = getattr(node, "end_lineno", None) or line
    end_offset = getattr(node, "end_col_offset", None)
    column = source.column(line, node.col_offset)  # type: ignore[attr-defined]  # effects and calls point at expressions, statements or keywords, which have positions
    end_column = source.column(end_line, end_offset) if end_offset is not None else column
    return Finding(
        source.display_path,
        line,
        column,
        code,
        summary,
        end_line,
        end_column,
        tuple(sorted(set(sites))),
        tuple(fixes),
    )


class RegionRule(Rule):
    """A rule about what a checkpoint call's region does: reads the region's effects."""

    kinds: frozenset[str] = frozenset()
    messages: dict[str, str] = {}  # effect variant -> message template over the effect's facts
    # added when the region reaches the effect through a module whose class a builder or
    # registry chose with a key the analysis cannot know (every class it can build is followed)
    approximation = "for {built_for} built by {built_by}"

    def applies(self, call: CheckpointCall, effect: Effect) -> bool:
        return True

    def check(self, context: RuleContext) -> Iterator[Finding]:
        for call in context.calls:
            for effect in context.region_effects(call):
                if effect.kind in self.kinds and self.applies(call, effect):
                    site = context.site(call, effect.chain)
                    found = finding_at(effect.module, effect.node, self.code, self.describe(call, effect), (site,))
                    yield replace(found, condition=effect.fact_map.get(ONLY_WHEN, ""))

    def describe(self, call: CheckpointCall, effect: Effect) -> str:
        """The message: the rule's wording for the effect's variant, filled with its facts."""
        facts = {**effect.fact_map, **self.call_facts(call, effect)}
        text = self.messages[effect.variant].format_map(facts)
        if BUILT_BY in facts:
            text += f" ({self.approximation.format_map(facts)})"
        if ONLY_WHEN in facts:  # `if past_key_values is not None:`: true only for calls that pass one
            text += f" (only when {facts[ONLY_WHEN]})"
        return text

    def call_facts(self, call: CheckpointCall, effect: Effect) -> dict[str, str]:
        """Facts about the checkpoint call that the wording needs (its mode, say)."""
        return {}
