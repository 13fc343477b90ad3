"""Where the configuration, the project root and the cache are, decided once for every front-end.

The CLI, the language server, the flake8 plugin and `ckptlint confirm --lint` each build a
`Linter`. When each decided for itself they disagreed: the language server kept its cache
in the editor's workspace, flake8 ignored CKPTLINT_CACHE_DIR, and each imported cli.py to
find the configuration. Here is the one answer they all use:

- configuration: `--config FILE`, else the nearest `pyproject.toml` with `[tool.ckptlint]`
  above the named paths (config.py), else the defaults rooted at the working directory;
- project root (where other files can reach the named ones through checkpoint calls):
  `--project-root DIR`, else `project-root =` in the configuration (relative to its file),
  else the nearest directory at or above the named paths holding pyproject.toml, setup.py,
  setup.cfg or .git; never the `--config` file's directory (a configuration kept outside the
  repository once made its folder, with everything next to it, the project). `-v` says
  which root and why (`describe_root`, also for the language server's log), and how to
  narrow a project scan much larger than what was named (`scope_hint`);
- cache: `--cache-dir`, else CKPTLINT_CACHE_DIR, else `.ckptlint_cache` in the project
  root, else in the configuration's root;
- installed libraries: those of `--python` / `python =`, else of the interpreter running
  ckptlint, unless `--no-libraries` / `libraries = false` (libraries.py). An interpreter that
  cannot be asked is a ConfigError, as a bad option is: the command line exits 2, the
  language server and the flake8 plugin say so and lint without libraries;
- library versions (which decide some calls' modes): `target-versions =`, else the metadata
  in those libraries' directories, else the pins in the project root (versions.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ckptlint.config import Config, ConfigError, find_config, load_config
from ckptlint.engine.cache import CACHE_DIR_NAME
from ckptlint.engine.discovery import PROJECT_MARKERS, find_project_marker
from ckptlint.engine.linter import Linter
from ckptlint.engine.parallel import default_jobs
from ckptlint.libraries import Libraries, PythonError, libraries
from ckptlint.result import Scope
from ckptlint.versions import Versions, resolve_versions

CACHE_DIR_ENV = "CKPTLINT_CACHE_DIR"
STDIN = "-"  # the path that stands for standard input; it names no directory to start from
# a project scan this large, and this many times the named files, is worth a hint under `-v`: a
# folder without a build file inside a monorepo made the monorepo the project. Not a warning:
# it cannot tell that from a right root (every one-file run in transformers drew it)
LARGE_SCAN_FILES = 2000
LARGE_SCAN_RATIO = 20


def _common_start(paths: Sequence[Path]) -> Path | None:
    """The deepest directory the named paths share (the working directory when only stdin
    is named); None when they share none (different drives)."""
    starts = [os.path.abspath(p) for p in paths if str(p) != STDIN] or [os.getcwd()]
    try:
        return Path(os.path.commonpath(starts))
    except ValueError:
        return None


def resolve_config(config_file: str | os.PathLike[str] | None, paths: Sequence[Path]) -> Config:
    """The configuration for linting `paths`; raises ConfigError for a bad one."""
    if config_file is not None:
        path = Path(config_file)
        return load_config(path, path.parent.resolve())
    found = find_config(_common_start(paths) or Path.cwd())
    return load_config(found, Path.cwd() if found is None else found.parent)


@dataclass(frozen=True)
class ProjectRoot:
    """The chosen project root (None: no project, only the named files) and why it is that one."""

    path: Path | None
    reason: str


def choose_project_root(config: Config, paths: Sequence[Path], override: str | os.PathLike[str] | None = None) -> ProjectRoot:
    """Where to look for checkpoint calls that reach the named files: `override`
    (`--project-root`), else the configuration's `project-root`, else the nearest directory
    at or above the named paths with a project marker. Never the configuration file's own
    directory: a configuration found by walking up is in (or below) the nearest marker's
    directory anyway, and one named with `--config` may live anywhere."""
    if override is not None:
        return ProjectRoot(Path(os.path.abspath(override)), "--project-root")
    if config.project_root is not None:
        return ProjectRoot(config.project_root, f"project-root in {config.path}")
    common = _common_start(paths)
    found = None if common is None else find_project_marker(common)
    if found is None:
        markers = ", ".join(PROJECT_MARKERS)
        return ProjectRoot(None, f"no {markers} at or above the named paths: only the named files are linted")
    directory, marker = found
    return ProjectRoot(directory, f"the nearest directory with {marker} at or above the named paths")


def project_root_for(config: Config, paths: Sequence[Path], override: str | os.PathLike[str] | None = None) -> Path | None:
    """The project root's directory (`choose_project_root`), None for no project."""
    return choose_project_root(config, paths, override).path


def describe_root(
    config: Config,
    paths: Sequence[Path],
    override: str | os.PathLike[str] | None = None,
    scope: Scope | None = None,
) -> str:
    """One line for `-v` and the language server's log: which project root and why, which
    configuration, and (after a lint, from `LintResult.scope`) how many files each side holds."""
    root = choose_project_root(config, paths, override)
    where = "none" if root.path is None else os.fspath(root.path)
    text = f"project root: {where} ({root.reason}); configuration: {config.path or 'none, the defaults'}"
    if scope is not None:
        text += f"; {scope.named:,} named file{'s' if scope.named != 1 else ''}, {scope.project:,} in the project scan"
    return text


def scope_hint(root: Path | None, scope: Scope) -> str | None:
    """For `-v`, when the project scan is much larger than what was named (more than
    LARGE_SCAN_FILES files and LARGE_SCAN_RATIO times the named ones): how to narrow it."""
    if scope.project <= LARGE_SCAN_FILES or scope.project <= LARGE_SCAN_RATIO * max(scope.named, 1):
        return None
    return (
        f"the project scan under {root} holds {scope.project:,} files for {scope.named:,} named; "
        "narrow it with --project-root DIR (or `project-root =` in [tool.ckptlint]), extend-exclude, "
        "or --no-project to follow only the named files' own checkpoint calls (-v says why this root)"
    )


def cache_override(cache_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """The cache directory the user chose: `cache_dir` (`--cache-dir`), else CKPTLINT_CACHE_DIR
    (an empty value counts as unset, as click treats it)."""
    chosen = cache_dir or os.environ.get(CACHE_DIR_ENV)
    return Path(chosen) if chosen else None


def cache_directory(config: Config, root: Path | None, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache for a lint with `config` and project root `root` (None: no project)."""
    return cache_override(cache_dir) or (root or config.root) / CACHE_DIR_NAME


def cache_directory_for(paths: Sequence[Path], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache a lint of `paths` would use (for `ckptlint clean`); the configuration is only
    read when no directory was chosen, so a broken one does not stop `clean --cache-dir`."""
    chosen = cache_override(cache_dir)
    if chosen is not None:
        return chosen
    config = resolve_config(None, paths)
    return cache_directory(config, project_root_for(config, paths))


def libraries_for(config: Config) -> Libraries:
    """The installed libraries regions are followed into; raises ConfigError for an
    interpreter that cannot say its import path."""
    try:
        return libraries(config.python, config.libraries)
    except PythonError as exc:
        raise ConfigError(str(exc)) from None


def versions_for(config: Config, libraries: Libraries, root: Path | None) -> Versions:
    """The library versions the linted code runs with: target-versions, else the metadata in
    the libraries' directories, else the pins in the project root (else the configuration's)."""
    return resolve_versions(config.target_versions, libraries.paths, root or config.root, config.library_modes, config.all_configurations)


def linter_for(
    config: Config,
    root: Path | None,
    *,
    overlays: dict[Path, bytes | str] | None = None,
    base: Path | None = None,
    jobs: int | None = None,
    no_cache: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
    want_fixes: bool = False,
    want_hints: bool = False,
) -> Linter:
    """A `Linter` whose cache is where every front-end looks for it. `root` is the project
    root the caller lints with (None: no project); `jobs` None means one worker per core.
    Raises ConfigError when `config.python` cannot be asked for its libraries."""
    found = libraries_for(config)
    return Linter(
        config,
        overlays=overlays,
        base=base,
        jobs=default_jobs() if jobs is None else jobs,
        cache_dir=None if no_cache else cache_directory(config, root, cache_dir),
        want_fixes=want_fixes,
        want_hints=want_hints,
        libraries=found,
        versions=versions_for(config, found, root),
    )
