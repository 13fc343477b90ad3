"""Where the configuration, the project root and the cache are, decided once for every front-end.

The CLI, the language server, the flake8 plugin and `ckptlint confirm --lint` each build a
`Linter`. When each decided for itself they disagreed: the language server kept its cache
in the editor's workspace, flake8 ignored CKPTLINT_CACHE_DIR, and each imported cli.py to
find the configuration. Here is the one answer they all use:

- configuration: `--config FILE`, else the nearest `pyproject.toml` with `[tool.ckptlint]`
  above the named paths (config.py), else the defaults rooted at the working directory;
- project root (where other files can reach the named ones through checkpoint calls): the
  configuration's directory, else the nearest directory holding a project marker;
- cache: `--cache-dir`, else CKPTLINT_CACHE_DIR, else `.ckptlint_cache` in the project
  root, else in the configuration's root;
- installed libraries: those of `--python` / `python =`, else of the interpreter running
  ckptlint, unless `--no-libraries` / `libraries = false` (libraries.py). An interpreter that
  cannot be asked is a ConfigError, as a bad option is: the command line exits 2, the
  language server and the flake8 plugin say so and lint without libraries.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from ckptlint.config import Config, ConfigError, find_config, load_config
from ckptlint.engine.cache import CACHE_DIR_NAME
from ckptlint.engine.discovery import find_project_root
from ckptlint.engine.linter import Linter
from ckptlint.engine.parallel import default_jobs
from ckptlint.libraries import Libraries, PythonError, libraries

CACHE_DIR_ENV = "CKPTLINT_CACHE_DIR"
STDIN = "-"  # the path that stands for standard input; it names no directory to start from


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


def project_root_for(config: Config, paths: Sequence[Path]) -> Path | None:
    """Where to look for checkpoint calls that reach the named files: the configuration's
    directory, else the nearest directory with pyproject.toml, setup.py, setup.cfg or .git."""
    if config.path is not None:
        return config.root
    common = _common_start(paths)
    return None if common is None else find_project_root(common)


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
    want_calls: bool = False,
) -> Linter:
    """A `Linter` whose cache is where every front-end looks for it. `root` is the project
    root the caller lints with (None: no project); `jobs` None means one worker per core.
    Raises ConfigError when `config.python` cannot be asked for its libraries."""
    return Linter(
        config,
        overlays=overlays,
        base=base,
        jobs=default_jobs() if jobs is None else jobs,
        cache_dir=None if no_cache else cache_directory(config, root, cache_dir),
        want_fixes=want_fixes,
        want_calls=want_calls,
        libraries=libraries_for(config),
    )
