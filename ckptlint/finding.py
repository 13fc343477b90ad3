"""The one currency between stages: a frozen, sortable, serialisable `Finding`.

Positions are 1-based lines and 1-based columns counted in code points, as
flake8 prints them. End positions are exclusive.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable


SITES_IN_MESSAGE = 3  # checkpoint calls a message names; JSON's `checkpoint_sites` lists all

# finding severities, least severe first: what reporters map to their levels
NOTE = "note"
WARNING = "warning"
ERROR = "error"
SEVERITIES = (NOTE, WARNING, ERROR)


def most_severe(severities: Iterable[str]) -> str:
    """The most severe of `severities` ("" when there is none)."""
    return max(severities, key=lambda s: SEVERITIES.index(s) if s in SEVERITIES else -1, default="")


@dataclass(frozen=True)
class SiteContext:
    """How a checkpoint site runs (analysis/contexts/execution.py) and what that does to the
    finding's hazard there: `consequence` is "" where it is as in eager; `facts` is the
    context as JSON (`ExecutionContext.to_dict`)."""

    description: str  # "eager", "under torch.compile(fullgraph=True) at train.py:5"
    consequence: str = ""  # "rejected by compile", "not replayed", "neutralised by a saved op", ...
    severity: str = ""  # NOTE / WARNING / ERROR at this site; "" the rule's own level
    facts: dict[str, Any] = field(default_factory=dict, hash=False)
    because: str = ""  # why the consequence holds

    @property
    def eager(self) -> bool:
        return self.description == "eager"

    def describe(self) -> str:
        if not self.consequence:
            return self.description
        return f"{self.description}: {self.consequence}" + (f", as {self.because}" if self.because else "")

    def to_dict(self) -> dict[str, Any]:
        return {**self.facts, "description": self.description, "consequence": self.consequence, "because": self.because, "severity": self.severity}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SiteContext:
        named = ("description", "consequence", "because", "severity")
        facts = {k: v for k, v in data.items() if k not in named}
        return cls(data["description"], data.get("consequence", ""), data.get("severity", ""), facts, data.get("because", ""))


@dataclass(frozen=True, order=True)
class Site:
    """A checkpoint call that reaches a finding, and the calls on the way; `context`, how the
    call runs, is not part of its identity (it is a function of the call)."""

    path: str
    line: int
    column: int
    chain: tuple[str, ...] = ()
    context: SiteContext | None = field(default=None, compare=False)

    def describe(self) -> str:
        where = f"checkpointed at {self.path}:{self.line}"
        if self.chain:
            where += " via " + " -> ".join(self.chain)
        if self.context is not None and not self.context.eager:
            where += " " + self.context.describe()
        return where

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"path": self.path, "line": self.line, "column": self.column, "chain": list(self.chain)}
        if self.context is not None:
            data["context"] = self.context.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Site:
        context = SiteContext.from_dict(data["context"]) if isinstance(data.get("context"), dict) else None
        return cls(data["path"], data["line"], data["column"], tuple(data.get("chain", ())), context)


@dataclass(frozen=True, order=True)
class Edit:
    """Replace the text between two positions (end exclusive) with `content`."""

    line: int
    column: int
    end_line: int
    end_column: int
    content: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "content": self.content,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Edit:
        return cls(data["line"], data["column"], data["end_line"], data["end_column"], data["content"])


SAFE = "safe"
UNSAFE = "unsafe"


@dataclass(frozen=True, order=True)
class Fix:
    """Edits that resolve a finding. `safe` fixes keep behaviour; `unsafe` ones change it."""

    applicability: str
    description: str
    edits: tuple[Edit, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "applicability": self.applicability,
            "description": self.description,
            "edits": [edit.to_dict() for edit in self.edits],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fix:
        return cls(data["applicability"], data["description"], tuple(Edit.from_dict(e) for e in data["edits"]))


@dataclass(frozen=True, order=True)
class Finding:
    """One hazard at one place.

    `summary` says what is wrong; `sites` are the checkpoint calls whose region
    reaches it (empty for findings about a call itself). `message` renders both.
    """

    path: str
    line: int
    column: int
    code: str
    summary: str
    end_line: int
    end_column: int
    sites: tuple[Site, ...] = ()
    fixes: tuple[Fix, ...] = field(default=(), compare=False)
    # NOTE / WARNING / ERROR as the sites' contexts make it (analysis/contexts/verdicts.py); "" the rule's level
    severity: str = field(default="", compare=False)
    # what must hold for the hazard to happen (`` `cache` is not None ``), "" when it happens whenever the region runs
    condition: str = field(default="", compare=False)

    @property
    def message(self) -> str:
        if not self.sites:
            return self.summary
        first, *rest = self.sites
        # region hazards (CKP2xx, communication in CKP401/CKP402) sit inside what a call replays; others are about the call
        where = "in region " if self.code.startswith(("CKP2", "CKP401", "CKP402")) else ""
        text = f"{self.summary} ({where}{first.describe()}"
        for site in rest[: SITES_IN_MESSAGE - 1]:
            text += "; also " + site.describe()
        folded = len(rest) - (SITES_IN_MESSAGE - 1)
        if folded > 0:  # a block reached from forty models would make a line of thousands of characters
            text += f"; and {folded} more call site{'s' if folded != 1 else ''} (all of them in --format json)"
        return text + ")"

    @property
    def key(self) -> tuple[str, int, int, str]:
        """Identity for de-duplication: one finding per (location, code)."""
        return (self.path, self.line, self.column, self.code)

    def with_path(self, path: str) -> Finding:
        return replace(self, path=path)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "code": self.code,
            "message": self.message,
            "summary": self.summary,
            "checkpoint_sites": [site.to_dict() for site in self.sites],
            "fix_available": bool(self.fixes),
            "fixes": [fix.to_dict() for fix in self.fixes],
            **({"severity": self.severity} if self.severity else {}),
            **({"condition": self.condition} if self.condition else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        return cls(
            path=data["path"],
            line=data["line"],
            column=data["column"],
            code=data["code"],
            summary=data["summary"],
            end_line=data["end_line"],
            end_column=data["end_column"],
            sites=tuple(Site.from_dict(s) for s in data.get("checkpoint_sites", ())),
            fixes=tuple(Fix.from_dict(f) for f in data.get("fixes", ())),
            severity=data.get("severity", ""),
            condition=data.get("condition", ""),
        )


def merge_findings(findings: Iterable[Finding]) -> list[Finding]:
    """One finding per (location, code), listing every site that reaches it; sorted."""
    merged: dict[tuple[str, int, int, str], Finding] = {}
    for finding in findings:
        seen = merged.get(finding.key)
        if seen is None:
            merged[finding.key] = finding
            continue
        sites = tuple(sorted(set(seen.sites) | set(finding.sites)))
        fixes = seen.fixes or finding.fixes
        severity = most_severe((seen.severity, finding.severity))
        condition = seen.condition if seen.condition and finding.condition else ""  # unconditional from any site: unconditional
        merged[finding.key] = replace(seen, sites=sites, fixes=fixes, severity=severity, condition=condition)
    return sorted(merged.values())
