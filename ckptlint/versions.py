"""Which versions of the libraries that decide a checkpoint call's mode the linted code runs with.

Whether Hugging Face's `_gradient_checkpointing_func` replays reentrantly depends on the
transformers release (catalogue.py records the ranges). The versions come from, in order:

1. `[tool.ckptlint] target-versions = { transformers = "4.57" }` (config.py validates it);
2. the installed distributions' metadata in the target environment: the `*.dist-info/METADATA`
   files (`Name:` and `Version:`) in the library directories of `--python` / `python =`
   (libraries.py), read as text, never imported; the first directory in import order wins;
3. the project's pins: `[project] dependencies` and `[project.optional-dependencies]` of its
   pyproject.toml and its `requirements*.txt` files. Only the simple specifier forms are read
   (`==`, `==X.*`, `~=`, `>=`, `>`, `<`, `<=`; `!=` is skipped); a requirement with any other
   form (`===`, a URL, `-r`/`-e` lines) is ignored. A pin is a range, and decides a mode only
   when every version in it gives the same one (`>=4.40` alone could be 5.x).

Each library's version is taken from the first source that has it. The versions are part of
the cache key (engine/run.py): they change results.

Beside the versions, the *switches*: the mode a library's own gradient-checkpointing switch
selects in the project, which beats the release's default for the calls that switch decides
(`[tool.ckptlint] library-modes = { transformers = "reentrant" }`, for a project that passes
`gradient_checkpointing_kwargs={"use_reentrant": True}`, calls timm's `set_reentrant_ckpt()`
or hands diffusers a reentrant `partial(checkpoint, ...)`, often from a launcher flag or a YAML
file that the linter cannot read). They are part of the cache key too.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Mapping

# the distributions whose version decides a mode (catalogue.py), in the order messages list them
TRACKED: tuple[str, ...] = ("torch", "transformers", "diffusers", "accelerate", "peft", "deepspeed")

TARGET_VERSIONS = "target-versions"
LIBRARY_MODES = "library-modes"
# the libraries with a switch of their own that selects their helpers' mode (modes.py reads them):
# transformers' gradient_checkpointing_kwargs, diffusers' enable_gradient_checkpointing(func),
# timm's set_reentrant_ckpt / TIMM_REENTRANT_CKPT
SWITCHABLE: tuple[str, ...] = ("transformers", "diffusers", "timm")
ENVIRONMENT = "the environment"

Release = tuple[int, ...]  # a version's release numbers, trailing zeros dropped: 4.57.0 -> (4, 57)

_VERSION = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(.*)$")
_SPECIFIER = re.compile(r"^\s*(===|==|~=|!=|>=|<=|>|<)\s*([^\s,;]+)\s*$")


def normalise_name(name: str) -> str:
    """A distribution name as PEP 503 compares them: `Flash_Attn` -> `flash-attn`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def release(text: str) -> Release | None:
    """The release numbers of a version string (`4.57.0.dev0` -> (4, 57)); None if it has none."""
    match = _VERSION.match(text)
    if match is None:
        return None
    numbers = [int(part) for part in match.group(1).split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


def _next(numbers: Release, length: int) -> Release:
    """The first release after every one that starts with `numbers[:length]`: (4, 57), 1 -> (5,)."""
    head = list(numbers[:length]) + [0] * (length - len(numbers))
    head[-1] += 1
    return release(".".join(map(str, head))) or tuple(head)


@dataclass(frozen=True)
class LibraryVersion:
    """One library's version (or pinned range) and where it came from.

    `low` is inclusive and `high` exclusive; both are the exact version for target-versions
    and the environment. `text` is as written (`4.57.0`, `>=4.40,<5`); `source` is
    `target-versions`, `the environment` or the pinning file's name."""

    name: str
    text: str
    source: str
    low: Release | None
    high: Release | None

    @property
    def exact(self) -> bool:
        return self.low is not None and self.low == self.high

    def within(self, since: Release | None, until: Release | None) -> bool:
        """Whether every version this allows is in `[since, until)` (None: unbounded)."""
        if since is not None and (self.low is None or self.low < since):
            return False
        if until is None:
            return True
        if self.exact:
            return self.low is not None and self.low < until
        return self.high is not None and self.high <= until

    def describe(self) -> str:
        """`transformers 4.57.0 from the environment`, `transformers >=4.40,<5 from requirements.txt`."""
        return f"{self.name} {self.text} from {self.source}"


def exact(name: str, text: str, source: str) -> LibraryVersion | None:
    numbers = release(text)
    return None if numbers is None else LibraryVersion(name, text, source, numbers, numbers)


@dataclass(frozen=True)
class LibrarySwitch:
    """The mode a library's own switch selects in the project, and who said so."""

    library: str  # one of SWITCHABLE
    reentrant: bool
    source: str = LIBRARY_MODES

    def describe(self) -> str:
        """`transformers switched to reentrant by library-modes`, for messages."""
        return f"{self.library} switched to {'reentrant' if self.reentrant else 'non-reentrant'} by {self.source}"


@dataclass(frozen=True)
class Versions:
    """What the linted code runs with that decides modes: the known versions of the tracked
    libraries (absent: unknown) and the libraries' own switches (absent: the release's default)."""

    known: tuple[LibraryVersion, ...] = ()
    switches: tuple[LibrarySwitch, ...] = ()
    all_configurations: bool = False  # the non-default command-line modes too (`--all-configurations`)

    def get(self, name: str) -> LibraryVersion | None:
        return next((version for version in self.known if version.name == name), None)

    def switch(self, library: str) -> LibrarySwitch | None:
        return next((switch for switch in self.switches if switch.library == library), None)

    def key(self) -> list[list[str]]:
        """What the cache key holds of them."""
        found = [[v.name, v.text, v.source] for v in self.known] + [[s.library, str(s.reentrant), s.source] for s in self.switches]
        return found + [["all-configurations"]] if self.all_configurations else found

    def describe(self) -> str:
        return "; ".join([*(v.describe() for v in self.known), *(s.describe() for s in self.switches)]) or "none known"


NO_VERSIONS = Versions()


def resolve_versions(
    targets: Mapping[str, str] | Iterable[tuple[str, str]],
    library_directories: Iterable[str],
    project_root: Path | None,
    library_modes: Iterable[tuple[str, str]] = (),
    all_configurations: bool = False,
) -> Versions:
    """Each tracked library's version from the first source that has it: `targets`
    (target-versions), then the metadata in `library_directories`, then the pins in
    `project_root`'s pyproject.toml and requirements files; and the `library_modes`
    (library, "reentrant" or "non-reentrant") as switches."""
    pairs = targets.items() if isinstance(targets, Mapping) else targets
    found: dict[str, LibraryVersion] = {}
    for name, text in pairs:
        version = exact(normalise_name(name), text, TARGET_VERSIONS)
        if version is not None:
            found.setdefault(version.name, version)
    for version in environment_versions(library_directories):
        found.setdefault(version.name, version)
    if project_root is not None and len(found) < len(TRACKED):
        for version in pinned_versions(project_root):
            found.setdefault(version.name, version)
    switches = tuple(LibrarySwitch(library, mode == "reentrant") for library, mode in sorted(library_modes))
    return Versions(tuple(found[name] for name in TRACKED if name in found), switches, all_configurations)


# -- the environment ------------------------------------------------------------


def environment_versions(directories: Iterable[str]) -> Iterator[LibraryVersion]:
    """The tracked distributions installed in `directories`, from their `*.dist-info/METADATA`
    (`Name:`, `Version:`), in import order (the first of a name is the one Python imports)."""
    seen: set[str] = set()
    for directory in directories:
        try:
            entries = sorted(os.listdir(directory))
        except OSError:
            continue
        for entry in entries:
            if not entry.endswith(".dist-info"):
                continue
            stem = normalise_name(entry[: -len(".dist-info")].rpartition("-")[0] or entry)
            if stem not in TRACKED or stem in seen:
                continue  # the directory name says which distribution it is: only tracked ones are read
            headers = _metadata(os.path.join(directory, entry, "METADATA"))
            name = normalise_name(headers.get("name", stem))
            text = headers.get("version")
            if name in TRACKED and name not in seen and text:
                version = exact(name, text, ENVIRONMENT)
                if version is not None:
                    seen.add(name)
                    yield version


def _metadata(path: str) -> dict[str, str]:
    """The `Name` and `Version` headers of a METADATA file (an email-style header block)."""
    headers: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            for line in file:
                if not line.strip():
                    break  # the headers end at the first blank line; the description follows
                key, colon, value = line.partition(":")
                if colon and key.strip().lower() in ("name", "version"):
                    headers.setdefault(key.strip().lower(), value.strip())
    except OSError:
        pass
    return headers


# -- the project's pins -----------------------------------------------------------


def pinned_versions(root: Path) -> Iterator[LibraryVersion]:
    """The tracked libraries pinned in `root`'s pyproject.toml (dependencies, then optional
    dependencies) and `requirements*.txt` files (by name), the first pin of each."""
    seen: set[str] = set()
    for source, requirement in _requirements(root):
        version = pin(requirement, source)
        if version is not None and version.name not in seen:
            seen.add(version.name)
            yield version


def _requirements(root: Path) -> Iterator[tuple[str, str]]:
    pyproject = root / "pyproject.toml"
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        project = {}
    if isinstance(project, dict):
        lists = [project.get("dependencies", [])]
        optional = project.get("optional-dependencies", {})
        if isinstance(optional, dict):
            lists.extend(optional[group] for group in sorted(optional))
        for requirements in lists:
            if isinstance(requirements, list):
                yield from (("pyproject.toml", r) for r in requirements if isinstance(r, str))
    try:
        files = sorted(p for p in root.glob("requirements*.txt") if p.is_file())
    except OSError:
        files = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith(("#", "-")):
                yield path.name, line


def pin(requirement: str, source: str) -> LibraryVersion | None:
    """A tracked library's pinned range from one requirement (`transformers>=4.40,<5`), or None:
    another library, no version bound, or a form this does not read."""
    match = _REQUIREMENT.match(requirement.split(";", 1)[0])
    if match is None:
        return None
    name = normalise_name(match.group(1))
    specifiers = match.group(2).strip()
    if name not in TRACKED or not specifiers or specifiers.startswith("@"):
        return None
    specifiers = specifiers.strip("()")
    low: Release | None = None
    high: Release | None = None
    for part in specifiers.split(","):
        spec = _SPECIFIER.match(part)
        if spec is None:
            return None
        operator, text = spec.groups()
        if operator == "!=":
            continue
        wildcard = text.endswith(".*")
        numbers = release(text[:-2] if wildcard else text)
        if operator == "===" or numbers is None:
            return None
        if operator == "==" and not wildcard:
            low = high = numbers
            continue
        length = len(text[:-2].split(".")) if wildcard else len(text.split("."))
        if operator == "==":  # `==4.57.*`
            low, high = _max(low, numbers), _min(high, _next(numbers, length))
        elif operator == "~=":  # `~=4.57` is >=4.57,<5; `~=4.57.1` is >=4.57.1,<4.58
            low, high = _max(low, numbers), _min(high, _next(numbers, max(length - 1, 1)))
        elif operator in (">=", ">"):  # `>X` read as `>=X`: a wider range, never a wrong decision
            low = _max(low, numbers)
        elif operator == "<":
            high = _min(high, numbers)
        elif operator == "<=":  # read as below the next release of its last component: wider
            high = _min(high, _next(numbers, length))
    if low is None and high is None:
        return None
    return LibraryVersion(name, specifiers.replace(" ", ""), source, low, high)


def _max(a: Release | None, b: Release) -> Release:
    return b if a is None or b > a else a


def _min(a: Release | None, b: Release) -> Release:
    return b if a is None or b < a else a
