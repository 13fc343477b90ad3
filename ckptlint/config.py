"""`[tool.ckptlint]` in pyproject.toml: found, validated, merged with command-line flags.

Every problem is one line naming the file and the key, raised as ConfigError.
"""

from __future__ import annotations

import functools
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable

from ckptlint.catalogue import (
    CALLABLE,
    FROM_ARGUMENT,
    MODULE,
    MODULES,
    NON_REENTRANT,
    REENTRANT,
    UNKNOWN,
    CheckpointAPI,
)

from ckptlint.versions import LIBRARY_MODES, SWITCHABLE, TARGET_VERSIONS, TRACKED, normalise_name

# a version in target-versions: release numbers, optionally a pre/post/dev/local suffix (4.57.0rc1, 2.5.1+cpu)
VERSION_TEXT = re.compile(r"\d+(\.\d+)*([.-]?(a|b|rc|post|dev)\d*)*(\+[\w.]+)?")

DEFAULT_EXCLUDE: tuple[str, ...] = (
    ".git",
    ".hg",
    ".svn",
    ".bzr",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    ".eggs",
    "*.egg-info",
    "__pycache__",
    "build",
    "dist",
    "node_modules",
    "site-packages",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".ckptlint_cache",
)

CODE_PATTERN = re.compile(r"^CKP\d{0,3}$")
_MODES = {"argument": FROM_ARGUMENT, "reentrant": REENTRANT, "non-reentrant": NON_REENTRANT, "unknown": UNKNOWN}
_REGIONS = {"callable": CALLABLE, "module": MODULE, "modules": MODULES}
KEYS = (
    "select",
    "ignore",
    "extend-select",
    "per-file-ignores",
    "exclude",
    "extend-exclude",
    "checkpoint-functions",
    "report-unused-noqa",
    "python",
    "libraries",
    "project-root",
    "target-versions",
    "library-modes",
    "all-configurations",
)


class ConfigError(Exception):
    """A bad configuration file or value; the message is one line."""


@dataclass(frozen=True)
class Config:
    root: Path  # paths in the configuration are relative to this directory
    path: Path | None = None  # the file it came from, if any
    select: tuple[str, ...] = ("CKP",)
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    checkpoint_functions: tuple[CheckpointAPI, ...] = field(default=())
    report_unused_noqa: bool = False
    python: str | None = None  # the interpreter whose installed libraries regions are followed into; None: ckptlint's own
    libraries: bool = True  # follow regions into installed libraries (read, never imported)
    project_root: Path | None = None  # `project-root`: where calls that reach the named files are looked for (frontend.py)
    # `target-versions`: library -> version the code runs with, beating the environment and the pins (versions.py)
    target_versions: tuple[tuple[str, str], ...] = ()
    # `library-modes`: library -> "reentrant" / "non-reentrant", what its own switch selects (versions.py)
    library_modes: tuple[tuple[str, str], ...] = ()
    all_configurations: bool = False  # report hazards of non-default command-line modes too (run_arguments.py)

    def without_reporting(self) -> Config:
        """The configuration with every key that only decides what is reported reset: what
        the analysis depends on, so the cache key (engine/run.py) and the workers' state stay
        the same when only the selection, per-file ignores or unused-noqa reporting change.
        A new key that only filters or adds reported findings belongs here."""
        return replace(self, select=("CKP",), extend_select=(), ignore=(), per_file_ignores=(), report_unused_noqa=False)

    @property
    def all_excludes(self) -> tuple[str, ...]:
        return self.exclude + self.extend_exclude

    def with_overrides(self, **overrides: Any) -> Config:
        """Command-line values beat configured ones; None means "not given"."""
        given = {key: value for key, value in overrides.items() if value is not None}
        if "extend_select" in given:
            given["extend_select"] = self.extend_select + tuple(given["extend_select"])
        if "per_file_ignores" in given:
            given["per_file_ignores"] = self.per_file_ignores + tuple(given["per_file_ignores"])
        if "extend_exclude" in given:
            given["extend_exclude"] = self.extend_exclude + tuple(given["extend_exclude"])
        return replace(self, **given)


def find_config(start: Path) -> Path | None:
    """The nearest pyproject.toml with a [tool.ckptlint] table, walking up from `start`."""
    directory = start if os.path.isdir(start) else start.parent  # os.path: False where one may not look, not an error
    directory = directory.resolve()
    for candidate_dir in (directory, *directory.parents):
        candidate = candidate_dir / "pyproject.toml"
        if os.path.isfile(candidate):
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
                return candidate  # let load_config report it
            if isinstance(data.get("tool"), dict) and "ckptlint" in data["tool"]:
                return candidate
    return None


def load_config(path: Path | None, default_root: Path) -> Config:
    if path is None:
        return Config(root=default_root)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read configuration: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    if path.name == "pyproject.toml":
        table = data.get("tool", {}).get("ckptlint", {})
        prefix = "[tool.ckptlint]"
    else:
        table = data
        prefix = "ckptlint configuration"
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: {prefix} must be a table")
    return parse_table(table, path, prefix)


def parse_table(table: dict[str, Any], path: Path, prefix: str = "[tool.ckptlint]") -> Config:
    def fail(key: str, problem: str) -> ConfigError:
        return ConfigError(f"{path}: {prefix} {key}: {problem}")

    for key in table:
        if key not in KEYS:
            raise fail(key, f"unknown key (expected one of: {', '.join(KEYS)})")
    values: dict[str, Any] = {}
    for key in ("select", "ignore", "extend-select"):
        if key in table:
            values[key.replace("-", "_")] = _codes(table[key], functools.partial(fail, key))
    for key in ("exclude", "extend-exclude"):
        if key in table:
            values[key.replace("-", "_")] = tuple(_strings(table[key], functools.partial(fail, key)))
    if "per-file-ignores" in table:
        raw = table["per-file-ignores"]
        if not isinstance(raw, dict):
            raise fail("per-file-ignores", 'expected a table of glob = ["CODE", ...]')
        values["per_file_ignores"] = tuple(
            (pattern, _codes(codes, functools.partial(fail, f"per-file-ignores.{pattern}")))
            for pattern, codes in raw.items()
        )
    for key in ("report-unused-noqa", "libraries", "all-configurations"):
        if key in table:
            if not isinstance(table[key], bool):
                raise fail(key, "expected true or false")
            values[key.replace("-", "_")] = table[key]
    if "python" in table:
        python = table["python"]
        if not isinstance(python, str) or not python:
            raise fail("python", "expected the path of a Python interpreter (or a command name on PATH)")
        values["python"] = interpreter_path(python, path.parent)
    if "project-root" in table:
        values["project_root"] = _project_root(table["project-root"], path.parent, functools.partial(fail, "project-root"))
    if TARGET_VERSIONS in table:
        values["target_versions"] = _target_versions(table[TARGET_VERSIONS], functools.partial(fail, TARGET_VERSIONS))
    if LIBRARY_MODES in table:
        values["library_modes"] = _library_modes(table[LIBRARY_MODES], functools.partial(fail, LIBRARY_MODES))
    if "checkpoint-functions" in table:
        values["checkpoint_functions"] = tuple(
            _checkpoint_functions(table["checkpoint-functions"], fail)
        )
    return Config(root=path.parent, path=path, **values)


def _target_versions(value: Any, fail: Callable[[str], ConfigError]) -> tuple[tuple[str, str], ...]:
    """`{ transformers = "4.57", torch = "2.5" }`: tracked libraries (versions.TRACKED) and versions."""

    def version(name: str, text: Any) -> str:
        if not isinstance(text, str) or not VERSION_TEXT.fullmatch(text.strip()):
            raise fail(f'{name}: expected a version string like "4.57" or "4.57.1", not {text!r}')
        return text.strip()

    return _library_table(value, fail, TRACKED, "is not a library whose version ckptlint uses", '{ transformers = "4.57", torch = "2.5" }', version)


def _library_modes(value: Any, fail: Callable[[str], ConfigError]) -> tuple[tuple[str, str], ...]:
    """`{ transformers = "reentrant", timm = "non-reentrant" }`: libraries with a switch of their own."""

    def mode(name: str, text: Any) -> str:
        if text not in ("reentrant", "non-reentrant"):
            raise fail(f'{name}: expected "reentrant" or "non-reentrant", not {text!r}')
        return str(text)

    return _library_table(value, fail, SWITCHABLE, "has no checkpointing switch ckptlint reads", '{ transformers = "reentrant", timm = "reentrant" }', mode)


def _library_table(
    value: Any,
    fail: Callable[[str], ConfigError],
    known: tuple[str, ...],
    unknown: str,
    example: str,
    checked: Callable[[str, Any], str],
) -> tuple[tuple[str, str], ...]:
    """A table of library name -> value, names normalised and among `known`, values `checked`."""
    if not isinstance(value, dict):
        raise fail(f"expected a table like {example}")
    found: list[tuple[str, str]] = []
    for name, item in value.items():
        library = normalise_name(name)
        if library not in known:
            raise fail(f"{name!r} {unknown} (expected one of: {', '.join(known)})")
        found.append((library, checked(name, item)))
    return tuple(sorted(found))


def _project_root(value: Any, directory: Path, fail: Callable[[str], ConfigError]) -> Path:
    """A configured project root: an existing directory, relative to the configuration's."""
    if not isinstance(value, str) or not value:
        raise fail("expected the path of a directory (relative to this file's directory)")
    root = Path(os.path.abspath(directory / os.path.expanduser(value)))
    if not root.is_dir():
        raise fail(f"{value!r} is not a directory ({root})")
    return root


def interpreter_path(value: str, directory: Path) -> str:
    """A configured interpreter: a path relative to the configuration's directory, or a bare
    command name (`python3`), looked up on PATH when it is asked for its import path."""
    expanded = os.path.expanduser(value)
    if os.sep not in expanded and (os.altsep is None or os.altsep not in expanded):
        return expanded
    return os.path.normpath(directory / expanded)


def parse_codes(values: Iterable[str], what: str) -> tuple[str, ...]:
    """Validate codes given on the command line (comma-separated lists)."""

    def fail(problem: str) -> ConfigError:
        return ConfigError(f"{what}: {problem}")

    codes = [code.strip() for value in values for code in value.split(",") if code.strip()]
    return _codes(codes, fail)


def _strings(value: Any, fail: Callable[[str], ConfigError]) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise fail("expected a list of strings")
    return value


def _codes(value: Any, fail: Callable[[str], ConfigError]) -> tuple[str, ...]:
    codes = _strings(value, fail)
    for code in codes:
        if code.upper() == "ALL":
            continue
        if not CODE_PATTERN.match(code):
            raise fail(f"{code!r} is not a rule code or prefix (expected CKP followed by up to three digits)")
        if not _known_prefix(code):
            raise fail(f"{code!r} matches no rule (run `ckptlint rules` to list them)")
    return tuple("CKP" if code.upper() == "ALL" else code for code in codes)


def _known_prefix(code: str) -> bool:
    from ckptlint.rules import ALL_CODES

    return any(known.startswith(code) for known in ALL_CODES)


def _checkpoint_functions(value: Any, fail: Callable[[str, str], ConfigError]) -> Iterable[CheckpointAPI]:
    key = "checkpoint-functions"
    if isinstance(value, list):
        for name in _strings(value, lambda problem: fail(key, problem)):
            yield _in_house_api(name, {}, functools.partial(fail, f"{key}.{name}"))
        return
    if isinstance(value, dict):
        for name, options in value.items():
            if not isinstance(options, dict):
                raise fail(f"{key}.{name}", "expected a table like { region = \"callable\", argument = 0 }")
            yield _in_house_api(name, options, functools.partial(fail, f'{key}."{name}"'))
        return
    raise fail(key, "expected a list of qualified names or a table of name = { ... }")


def _in_house_api(name: str, options: dict[str, Any], fail: Callable[[str], ConfigError]) -> CheckpointAPI:
    if not re.fullmatch(r"\.?[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", name):
        raise fail("expected a qualified name like mypkg.utils.ckpt, or .attribute for a method name")
    unknown = set(options) - {"region", "argument", "mode", "preserves-rng"}
    if unknown:
        raise fail(f"unknown option {sorted(unknown)[0]!r} (expected region, argument, mode, preserves-rng)")
    region = options.get("region", "callable")
    if region not in _REGIONS:
        raise fail(f"region must be one of {', '.join(_REGIONS)}, not {region!r}")
    argument = options.get("argument", 0)
    if isinstance(argument, bool) or not isinstance(argument, (int, str)):
        raise fail("argument must be a position (0, 1, ...) or a keyword name")
    mode = options.get("mode", "unknown")
    if mode not in _MODES:
        raise fail(f"mode must be one of {', '.join(_MODES)}, not {mode!r}")
    preserves = options.get("preserves-rng", True)
    if not isinstance(preserves, bool):
        raise fail("preserves-rng must be true or false")
    return CheckpointAPI(
        name,
        "configured",
        _REGIONS[region],
        _MODES[mode],
        region_argument=argument if isinstance(argument, int) else None,
        region_keyword=argument if isinstance(argument, str) else None,
        takes_preserve_rng_state=mode == "argument",
        preserves_rng=preserves,
        summary=f"in-house wrapper configured in checkpoint-functions ({region}, mode {mode})",
    )
