"""What a run produces: findings, problems with paths, and what reporters and fixes need.

Data only, so that reporters and `--fix` depend on what a run gives, not on how it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ckptlint.finding import Finding
from ckptlint.noqa import Suppressions
from ckptlint.source import SourceFile


@dataclass(frozen=True)
class PathProblem:
    """A path that could not be linted (unreadable, missing, a symlink loop): never an exception."""

    path: str
    message: str
    fatal: bool = True  # a path that could not be read: exit code 2


@dataclass(frozen=True)
class Scope:
    """How many files a lint was asked about, and how many the project scan holds (the named
    ones included; 0 without a project): the two numbers `-v` and the large-scan warning give."""

    named: int = 0
    project: int = 0
    skipped: tuple[str, ...] = ()  # what the project scan could not read ("locked: cannot read directory: ..."), for -v


@dataclass
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    problems: list[PathProblem] = field(default_factory=list)
    files: int = 0
    calls: list[dict[str, Any]] = field(default_factory=list)  # described checkpoint calls of the named files
    suppressions: dict[str, Suppressions] = field(default_factory=dict)
    sources: dict[str, SourceFile] = field(default_factory=dict)  # by display path, for files with findings
    linted: list[str] = field(default_factory=list)  # absolute paths of the named files read
    analysed: int = 0  # files analysed in this run (the rest came from the cache or were not needed)
    reused: int = 0  # files whose analysis came from the cache
    scope: Scope = Scope()

    @property
    def fatal(self) -> bool:
        return any(problem.fatal for problem in self.problems)
