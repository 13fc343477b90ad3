"""The pipeline: discover -> prefilter -> analyse (in parallel, or from the cache) -> merge ->
scope -> suppress -> select.

`Linter` is what the CLI, the flake8 plugin, the language server and `confirm --lint` use,
each built by `frontend.linter_for` (so they agree on configuration and cache). It never
raises for bad input: unreadable paths become `problems`, unparsable files CKP000, and
an internal error in one file is a problem naming the file while the others' findings
are still reported.

Scope: a region hazard usually lives in another file than the call that replays it
(a block's module vs the model's). With a project root, checkpoint calls are looked
for in the whole project, and a finding is reported when it lies in a file the user
named or is reached from a checkpoint call in one. So `pre-commit` on a changed
block file, `flake8` (one file at a time) and a full run agree.

Only files that can hold a checkpoint call are analysed (prefilter.py); the names they
add for checkpoint APIs can make more files eligible, so selection and analysis repeat
until no new name turns up. Named files that cannot hold a call are only parsed (CKP000).
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ckptlint.catalogue import DEFAULT_CATALOGUE, Catalogue
from ckptlint.config import Config
from ckptlint.engine.cache import RuleSet
from ckptlint.engine.discovery import ExcludeMatcher, discover
from ckptlint.engine.run import Run
from ckptlint.finding import Finding
from ckptlint.libraries import Libraries, libraries as find_libraries
from ckptlint.versions import Versions, resolve_versions
from ckptlint.rules import ALL_RULES
from ckptlint.rules.base import RegionRule, Rule
from ckptlint.engine.worker import Settings
from ckptlint.result import LintResult, PathProblem, Scope

# the rules an analysis runs when no region rule is selected: the rest need region effects, the bulk of the time
CALL_RULES: tuple[Rule, ...] = tuple(rule for rule in ALL_RULES if not isinstance(rule, RegionRule))

class Linter:
    """Lints files of one project with one configuration."""

    def __init__(
        self,
        config: Config,
        overlays: dict[Path, bytes | str] | None = None,
        base: Path | None = None,
        jobs: int = 1,
        cache_dir: Path | None = None,
        want_fixes: bool = False,
        libraries: Libraries | None = None,
        want_hints: bool = False,
        versions: Versions | None = None,
    ):
        self.config = config
        # the installed libraries regions are followed into; None: those of `config` (raises
        # libraries.PythonError for an interpreter that cannot be asked; frontend.py reports it)
        self.libraries = libraries if libraries is not None else find_libraries(config.python, config.libraries)
        # the library versions that decide modes (versions.py); None: from target-versions, the
        # libraries' metadata, then the pins in the configuration's directory
        self.versions = versions if versions is not None else resolve_versions(config.target_versions, self.libraries.paths, config.root, config.library_modes, config.all_configurations)
        self.base = base or Path.cwd()
        self.is_excluded = ExcludeMatcher(config.all_excludes, config.root)
        self.catalogue: Catalogue = DEFAULT_CATALOGUE.extended(config.checkpoint_functions)
        self.overlays = {os.path.abspath(path): text for path, text in (overlays or {}).items()}
        self.jobs = max(1, jobs)
        self.cache_dir = cache_dir
        self.want_fixes = want_fixes
        self.want_hints = want_hints  # describe the calls' static cost hints (analysis/regions/cost_hints.py): `ckptlint calls`, `confirm --cost`
        self.rules: list[Rule] = [rule for rule in ALL_RULES if self.selected(rule.code)]

    def has_overlay(self, path: Path) -> bool:
        return os.path.abspath(path) in self.overlays

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

    def lint_paths(
        self,
        paths: Sequence[Path],
        force_exclude: bool = False,
        project_root: Path | None = None,
        on_scope: Callable[[Scope], None] | None = None,
    ) -> LintResult:
        """Lint the files under `paths` (unreadable ones become problems). A path with an
        overlay (stdin, an editor's buffer) is linted from it, not looked for on disk, and
        is never excluded. When a path is the project root, its walk is the project's.
        `on_scope` hears how many files were named and scanned before any is analysed."""
        overlaid = [path for path in paths if self.has_overlay(path)]
        discovered = discover([path for path in paths if not self.has_overlay(path)], self.is_excluded, force_exclude)
        walked_root = project_root is not None and any(os.path.abspath(p) == os.path.abspath(project_root) for p in paths)
        project_files = discovered.files if walked_root else None  # `ckptlint .`: walk the tree once
        return self.lint_files([*overlaid, *discovered.files], discovered.problems, project_root, project_files, on_scope)

    def lint_files(
        self,
        files: Iterable[Path],
        problems: Iterable[PathProblem] = (),
        project_root: Path | None = None,
        project_files: list[Path] | None = None,
        on_scope: Callable[[Scope], None] | None = None,
    ) -> LintResult:
        """Lint `files`; with `project_root`, also follow checkpoint calls in the rest of the
        project (`project_files`, when the caller has already walked it)."""
        named = list(dict.fromkeys(os.path.abspath(file) for file in files))
        named_set = set(named)
        skipped: tuple[str, ...] = ()
        if project_files is None:
            project_files, skipped = self._project_files(project_root)
        others = [p for p in dict.fromkeys(os.path.abspath(f) for f in project_files) if p not in named_set]
        scope = Scope(len(named), len(named) + len(others) if project_root is not None else 0, skipped)
        if on_scope is not None:
            on_scope(scope)
        run = Run(self, named, others)
        result = run.execute()
        result.scope = scope
        result.problems = sorted([*problems, *result.problems], key=lambda p: p.path)
        return result

    def settings(self) -> Settings:
        """What the workers analyse with: the configuration without what only selects
        findings, and every rule (only the call-level ones when no selected rule reads
        regions), so the analysis and its cache serve any later selection. Unused-noqa
        reporting needs every rule: whether a `# noqa: CKP203` silences something must not
        depend on which rules an earlier run left in the cache."""
        if self.config.report_unused_noqa or any(isinstance(rule, RegionRule) for rule in self.rules):
            rule_set, rules = RuleSet.ALL, ALL_RULES
        else:
            rule_set, rules = RuleSet.CALLS, CALL_RULES
        codes = tuple(rule.code for rule in rules)
        overlays = tuple(sorted(self.overlays.items()))
        config = self.config.without_reporting()
        return Settings(
            config, os.fspath(self.base), codes, self.want_fixes, rule_set, overlays, self.libraries.paths, self.versions, want_hints=self.want_hints
        )

    def _project_files(self, project_root: Path | None) -> tuple[list[Path], tuple[str, ...]]:
        """The project scan's files, and what it could not read (not named: no error, but a
        file there may hold a checkpoint call that reaches a named one; `-v` says so)."""
        if project_root is None:
            return [], ()
        found = discover([project_root], self.is_excluded)
        return found.files, tuple(f"{problem.path}: {problem.message}" for problem in found.problems if problem.fatal)


def _longest_prefix(code: str, prefixes: Iterable[str]) -> int:
    return max((len(p) for p in prefixes if code.startswith(p)), default=-1)


def lint_source(text: str, path: str = "example.py", config: Config | None = None) -> list[Finding]:
    """Lint one module given as text (it is never written to disk): for tests, docs and tools."""
    base = Path.cwd()
    config = config or Config(root=base)
    target = base / path
    linter = Linter(config, overlays={target: text}, base=base)
    return linter.lint_files([target]).findings
