"""The one currency between stages: a frozen, sortable, serialisable `Finding`.

Positions are 1-based lines and 1-based columns counted in code points, as
flake8 prints them. End positions are exclusive.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable


SITES_IN_MESSAGE = 3  # checkpoint calls a message names; JSON's `checkpoint_sites` lists all


@dataclass(frozen=True, order=True)
class Site:
    """A checkpoint call that reaches a finding, and the calls on the way."""

    path: str
    line: int
    column: int
    chain: tuple[str, ...] = ()

    def describe(self) -> str:
        where = f"checkpointed at {self.path}:{self.line}"
        if self.chain:
            where += " via " + " -> ".join(self.chain)
        return where

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "column": self.column, "chain": list(self.chain)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Site:
        return cls(data["path"], data["line"], data["column"], tuple(data.get("chain", ())))


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
        merged[finding.key] = replace(seen, sites=sites, fixes=fixes)
    return sorted(merged.values())
