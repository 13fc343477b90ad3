"""What a finding's hazard does in the context its checkpoint site runs in, and the severity
that follows (measured on torch 2.14 CPU, and on 2.13 where docs/contexts.md says it differs;
docs/regions.md "Execution contexts"):

| hazard | under compile | with the side-effect flag | under SAC |
| --- | --- | --- | --- |
| CKP101, CKP102 (the call's mode, RNG state) | no effect: compile runs non-reentrant and keeps RNG state (note) | | |
| CKP301-CKP303, CKP305, CKP306 (reentrant mode) | does not apply (note) | | |
| CKP202, CKP203 (Python side effects) | `fullgraph=True`: rejected by compile (error); otherwise replayed after a graph break (warning) | not replayed (note) | still replayed (warning) |
| CKP201 (a Python random draw) | torch 2.14+: traced once, compiled and eager differ (warning); 2.13: rejected with `fullgraph=True` (error), replayed after a graph break without (warning) | | a policy saving every op: neutralised by a saved op (note) |
| CKP205 (a device move) | | | a policy saving every op: neutralised by a saved op (note) |

Anything else keeps the rule's level; the context is still described. A finding's severity is
the most severe of its sites' (a site in plain eager counts with the rule's level), so a block
reached from an eager and a compiled model stays a warning.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from typing import Callable, Mapping

from ckptlint.calls import CheckpointCall
from ckptlint.finding import ERROR, NOTE, WARNING, Finding, Site, SiteContext, most_severe
from ckptlint.analysis.contexts.execution import ExecutionContext, ExecutionContexts
from ckptlint.sac_policy import EVERY_OP

CALL_MODE = frozenset({"CKP101", "CKP102"})
REENTRANT_ONLY = frozenset({"CKP301", "CKP302", "CKP303", "CKP305", "CKP306"})
SIDE_EFFECTS = frozenset({"CKP202", "CKP203"})
SAVED_OP_MASKS = frozenset({"CKP201", "CKP205"})  # value hazards a saved op's output hides


@dataclass(frozen=True)
class Verdict:
    consequence: str  # "rejected by compile"; "" where the hazard is as in eager
    severity: str  # "" the rule's own level
    because: str = ""


AS_IN_EAGER = Verdict("", "")


def verdict(code: str, context: ExecutionContext) -> Verdict:
    """What the hazard `code` does at a site running in `context`."""
    if context.compiled:
        if code in CALL_MODE:
            return Verdict("no effect under compile", NOTE, "compile runs the region non-reentrant and keeps RNG state")
        if code in REENTRANT_ONLY:
            return Verdict("does not apply when compiled", NOTE, "compile runs the region non-reentrant")
        if code in SIDE_EFFECTS:
            if context.skips_side_effects:
                return Verdict("not replayed", NOTE, "the side-effect flag skips it at recompute")
            if context.fullgraph is True:
                return Verdict("rejected by compile", ERROR, "fullgraph=True refuses the side effect")
            if context.fullgraph is False:
                return Verdict("replayed after a graph break", WARNING, "the region runs eager: the wrong result stays")
            return Verdict("rejected by compile with fullgraph=True, replayed after a graph break without", WARNING, "fullgraph is not a literal")
        if code == "CKP201":
            return _compiled_draw(context)
    saved = context.sac_saved_ops
    if saved is not None:
        if code in SIDE_EFFECTS:
            return Verdict("still replayed under SAC", WARNING, "a policy saves op outputs, never Python side effects")
        if code in SAVED_OP_MASKS and EVERY_OP in saved:
            return Verdict("neutralised by a saved op", NOTE, "the policy saves every op's output, so backward reads none recomputed")
        if code in SAVED_OP_MASKS and saved:
            ops = ", ".join(sorted(saved))
            return Verdict("masked only where backward reads nothing downstream of it but saved outputs", WARNING, f"the policy saves {ops}")
    return AS_IN_EAGER


def _compiled_draw(context: ExecutionContext) -> Verdict:
    """A Python random draw under compile: torch 2.14 traces it once; 2.13 refuses it
    (`Random.random` is skipped): rejected with fullgraph=True, a graph break without."""
    traced = Verdict("traced once under compile", WARNING, "the draw is a constant of the graph: compiled and eager runs differ")
    if context.traces_random_draws is True:
        return traced
    if context.traces_random_draws is False:
        if context.fullgraph is True:
            return Verdict("rejected by compile", ERROR, "torch before 2.14 refuses the draw under fullgraph=True")
        if context.fullgraph is False:
            return Verdict("replayed after a graph break", WARNING, "the region runs eager: the replay draws again")
    return Verdict(
        "traced once under compile (torch 2.14+), rejected or replayed after a graph break before", WARNING, "which depends on the torch version, not known here"
    )


def site_context(code: str, context: ExecutionContext, level: str) -> SiteContext:
    """The JSON and message form of `context` at one site of a finding of `code`."""
    found = verdict(code, context)
    return SiteContext(context.describe(), found.consequence, found.severity or level, context.to_dict(), found.because)


def with_contexts(
    findings: list[Finding],
    calls: list[CheckpointCall],
    contexts: ExecutionContexts,
    levels: Mapping[str, str] | None = None,
    calls_in: Callable[[str], list[CheckpointCall]] | None = None,
) -> list[Finding]:
    """`findings` with each site's context and the severity that follows. A finding without
    sites about a call of `calls` (CKP101 at the call, CKP102 at its keyword) takes the site
    of the innermost call around it when that call does not run plainly eager. A site in
    another file (CKP303 at the DDP call, whose checkpoint call is in the model's file) takes
    the context of the call `calls_in(path)` finds there: computed for that file on its own,
    whatever a worker analysed before, so that `--jobs` does not change the report."""
    levels = levels or {}
    by_site = {(call.path, call.line, call.column): call for call in calls}
    searched = {call.path for call in calls}
    annotated: list[Finding] = []
    for finding in findings:
        level = levels.get(finding.code, ERROR if finding.code == "CKP000" else WARNING)
        sites = finding.sites
        if not sites:
            call = _call_around(finding, calls)
            context = contexts.of(call) if call is not None else None
            if call is None or context is None or context.eager:
                annotated.append(replace(finding, severity=level))
                continue
            sites = (Site(call.path, call.line, call.column),)
        new_sites: list[Site] = []
        for site in sites:
            key = (site.path, site.line, site.column)
            if key not in by_site and calls_in is not None and site.path not in searched:
                searched.add(site.path)
                by_site.update({(c.path, c.line, c.column): c for c in calls_in(site.path)})
            call = by_site.get(key)
            context = contexts.of(call) if call is not None else None
            new_sites.append(replace(site, context=site_context(finding.code, context, level)) if context is not None else site)
        severity = most_severe(s.context.severity if s.context is not None else level for s in new_sites)
        annotated.append(replace(finding, sites=tuple(new_sites), severity=severity))
    return annotated


def _call_around(finding: Finding, calls: list[CheckpointCall]) -> CheckpointCall | None:
    """The innermost call of `calls` whose source span holds the finding's position."""
    best: CheckpointCall | None = None
    best_size = -1
    for call in calls:
        node = call.node
        if call.path != finding.path or isinstance(node, ast.ClassDef):
            continue
        start, end = node.lineno, getattr(node, "end_lineno", None) or node.lineno
        if not start <= finding.line <= end:
            continue
        if (finding.line, finding.column) < (call.line, call.column):
            continue
        size = end - start
        if best is None or size < best_size:
            best, best_size = call, size
    return best
