"""The pipeline: discover files -> parse -> find checkpoint calls -> rules -> suppress -> select.

`Linter` is what the CLI, the flake8 plugin and the language server use. It never
raises for bad input: unreadable paths become `problems`, unparsable files CKP000.

Scope: a region hazard usually lives in another file than the call that replays it
(a block's module vs the model's). With a project root, checkpoint calls are looked
for in the whole project, and a finding is reported when it lies in a file the user
named or is reached from a checkpoint call in one. So `pre-commit` on a changed
block file, `flake8` (one file at a time) and a full run agree.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from ckptlint.analysis import Analysis
from ckptlint.calls import CallFinder, CheckpointCall
from ckptlint.catalogue import DEFAULT_CATALOGUE, Catalogue
from ckptlint.classes import ClassIndex
from ckptlint.config import Config
from ckptlint.discovery import ExcludeMatcher, PathProblem, discover
from ckptlint.finding import Finding, merge_findings
from ckptlint.fixes import FixBuilder
from ckptlint.noqa import Suppressions, apply_suppressions, suppressions_for
from ckptlint.project import LoadedModule, Project, display_path
from ckptlint.region_analysis import RegionAnalysis
from ckptlint.rules import ALL_RULES, Rule
from ckptlint.source import SourceFile


@dataclass
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    problems: list[PathProblem] = field(default_factory=list)
    files: int = 0
    calls: list[CheckpointCall] = field(default_factory=list)
    suppressions: dict[str, Suppressions] = field(default_factory=dict)
    sources: dict[str, SourceFile] = field(default_factory=dict)  # by display path

    @property
    def fatal(self) -> bool:
        return any(problem.fatal for problem in self.problems)


class Linter:
    """Lints files of one project with one configuration."""

    def __init__(self, config: Config, overlays: dict[Path, bytes | str] | None = None, base: Path | None = None):
        self.config = config
        self.base = base or Path.cwd()
        self.is_excluded = ExcludeMatcher(config.all_excludes, config.root)
        self.catalogue: Catalogue = DEFAULT_CATALOGUE.extended(config.checkpoint_functions)
        self.project = Project(is_excluded=self.is_excluded, overlays=overlays, base=self.base)
        classes = ClassIndex(self.project)
        self.finder = CallFinder(self.project, self.catalogue, classes)
        self.regions = RegionAnalysis(self.project, classes)
        self.fix_builder = FixBuilder()
        self.rules: list[Rule] = [rule for rule in ALL_RULES if self.selected(rule.code)]
        self._may_checkpoint = _call_site_pattern(self.catalogue)

    # -- selection ------------------------------------------------------------

    def selected(self, code: str, path: str | None = None) -> bool:
        """flake8's decision: the most specific matching prefix of select vs ignore wins."""
        config = self.config
        chosen = _longest_prefix(code, config.select + config.extend_select)
        ignored = _longest_prefix(code, config.ignore + self._file_ignores(path))
        return chosen > ignored

    def _file_ignores(self, path: str | None) -> tuple[str, ...]:
        if path is None or not self.config.per_file_ignores:
            return ()
        absolute = Path(os.path.abspath(self.base / path))
        try:
            relative = absolute.relative_to(Path(os.path.abspath(self.config.root))).as_posix()
        except ValueError:
            relative = absolute.as_posix()
        codes: list[str] = []
        for pattern, pattern_codes in self.config.per_file_ignores:
            if fnmatch.fnmatchcase(relative, pattern) or fnmatch.fnmatchcase(absolute.name, pattern):
                codes.extend(pattern_codes)
        return tuple(codes)

    # -- linting --------------------------------------------------------------

    def lint_paths(self, paths: Sequence[Path], force_exclude: bool = False, project_root: Path | None = None) -> LintResult:
        discovered = discover(paths, self.is_excluded, force_exclude)
        return self.lint_files(discovered.files, discovered.problems, project_root)

    def lint_files(
        self, files: Iterable[Path], problems: Iterable[PathProblem] = (), project_root: Path | None = None
    ) -> LintResult:
        """Lint `files`; with `project_root`, also follow checkpoint calls in the rest of the project."""
        files = list(files)
        self.project.linted_files.extend(files)
        result = LintResult(problems=list(problems))
        named = {Path(os.path.abspath(file)) for file in files}
        others = [f for f in self._project_files(project_root) if Path(os.path.abspath(f)) not in named]
        for file in [*files, *others]:
            self.project.add_file(file)
        raw: list[Finding] = []
        for file in files:
            try:
                loaded = self.project.load(file, display_path(file, self.base))
            except OSError as exc:
                result.problems.append(PathProblem(str(file), f"cannot read file: {exc.strerror or exc}"))
                continue
            result.files += 1
            raw.extend(self.lint_module(loaded, result))
        named_paths = {display_path(file, self.base) for file in files}
        for file in others:
            raw.extend(self._lint_quietly(file))
        for loaded in self.project.loaded():
            if loaded.source is not None:
                result.sources[loaded.source.display_path] = loaded.source
        in_scope = [f for f in merge_findings(raw) if f.path in named_paths or any(s.path in named_paths for s in f.sites)]
        kept, result.suppressions = apply_suppressions(in_scope, result.sources)
        if self.config.report_unused_noqa:
            kept.extend(self._unused_noqa(named_paths, result))
        result.findings = sorted(f for f in kept if self.selected(f.code, f.path))
        result.problems.sort(key=lambda p: p.path)
        return result

    def _unused_noqa(self, named_paths: set[str], result: LintResult) -> list[Finding]:
        findings = []
        for path in sorted(named_paths):
            source = result.sources.get(path)
            if source is None:
                continue
            suppressions = result.suppressions.get(path) or suppressions_for(source)
            for comment, codes in suppressions.unused():
                end = comment.column + len(comment.text)
                summary = f"unused `# noqa` for {', '.join(codes)}: no such finding on this line"
                findings.append(Finding(path, comment.line, comment.column, "CKP001", summary, comment.line, end))
        return findings

    def lint_module(self, loaded: LoadedModule, result: LintResult | None = None) -> list[Finding]:
        if loaded.error is not None:
            return [loaded.error]
        assert loaded.symbols is not None
        analysis = Analysis(loaded.symbols, self.regions, self.finder.checkpoint_calls(loaded.symbols), self.fix_builder)
        if result is not None:
            result.calls.extend(analysis.calls)
        findings: list[Finding] = []
        for rule in self.rules:
            findings.extend(rule.check(analysis))
        return findings

    def _project_files(self, project_root: Path | None) -> list[Path]:
        if project_root is None:
            return []
        return discover([project_root], self.is_excluded).files

    def _lint_quietly(self, file: Path) -> list[Finding]:
        """A file the user did not name: only its checkpoint calls matter, read errors do not."""
        try:
            if not self.project.has_overlay(file) and not self._may_checkpoint.search(file.read_bytes()):
                return []
            loaded = self.project.load(file)
        except OSError:
            return []
        return [] if loaded.error is not None else self.lint_module(loaded)


def _call_site_pattern(catalogue: Catalogue) -> re.Pattern[bytes]:
    """Bytes that any file holding a checkpoint call must contain (a cheap prefilter)."""
    words = {b"checkpoint"}
    for api in catalogue.apis:
        for name in api.names:
            words.add(name.rpartition(".")[2].encode())
    return re.compile(b"|".join(re.escape(w) for w in sorted(words)), re.IGNORECASE)


def _longest_prefix(code: str, prefixes: Iterable[str]) -> int:
    return max((len(p) for p in prefixes if code.startswith(p)), default=-1)


def lint_source(text: str, path: str = "example.py", config: Config | None = None) -> list[Finding]:
    """Lint one module given as text (it is never written to disk): for tests, docs and tools."""
    base = Path.cwd()
    config = config or Config(root=base)
    target = base / path
    linter = Linter(config, overlays={target: text}, base=base)
    return linter.lint_files([target]).findings
