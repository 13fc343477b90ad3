"""The ecosystem check: what a change to the analysis adds and removes on real codebases.

    python benchmarks/ecosystem.py                  # check against the committed baselines
    python benchmarks/ecosystem.py --update         # rewrite the baselines (after a reviewed change)
    python benchmarks/ecosystem.py --only timm --ckptlint-src /work/other-checkout

As ruff keeps one: a pinned set of releases from PyPI (PINS below) is downloaded with
`pip download --no-deps` into a cache outside the repository (`--cache`, default
~/.cache/ckptlint-ecosystem), unpacked there, and each release's package directories are
linted by ckptlint in a subprocess (`python -m ckptlint ... --format json --no-cache`, with
`--ckptlint-src` first on PYTHONPATH, default this checkout). The findings are compared with
`benchmarks/ecosystem/<name>-<version>.json`, a baseline made by `--update`: per finding its
code, path relative to the unpacked release, line and a short hash of the message (a reworded
message is a removal plus an addition), and the start of its summary, kept only to print a
removal readably. Only the baselines are committed, never the code.

Check mode exits 0 whatever it finds unless `--strict` (then 1 on any addition, removal or
failure). Wall time per release is measured and reported, never asserted. A release that does
not download, unpack or lint is reported and skipped; its baseline is left as it was.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Iterable, Sequence

REPO = Path(__file__).resolve().parents[1]
BASELINES = REPO / "benchmarks" / "ecosystem"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ckptlint-ecosystem"
HASH_CHARS = 10
TEXT_CHARS = 100  # the start of a finding's summary kept for reading a removal; never compared
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Pin:
    """One release: what to download and which of its top-level directories to lint."""

    name: str
    version: str
    packages: tuple[str, ...]
    sdist: bool = False
    download_args: tuple[str, ...] = ()  # pins the wheel of a release that only ships platform wheels

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"


# Each holds training or model code with activation checkpointing (calls to torch's
# checkpoint, checkpoint_sequential, checkpoint wrappers, HF layers, `with_cp` backbones).
PINS: tuple[Pin, ...] = (
    Pin("transformers", "5.24.0", ("transformers",)),
    Pin("diffusers", "0.42.1", ("diffusers",)),
    Pin("timm", "1.0.31", ("timm",)),
    Pin("accelerate", "1.15.0", ("accelerate",)),
    Pin("peft", "0.21.2", ("peft",)),
    Pin("mmdet", "3.3.0", ("mmdet",)),
    Pin("open_clip_torch", "3.3.0", ("open_clip", "open_clip_train")),
    Pin("lightning", "2.6.6", ("lightning",)),
    Pin("deepspeed", "0.19.8", ("deepspeed",), sdist=True),
    Pin("fairscale", "0.4.13", ("fairscale",), sdist=True),
    Pin(
        "megatron-core",
        "0.16.1",
        ("megatron",),
        download_args=("--python-version", "3.11", "--platform", "manylinux_2_28_x86_64", "--implementation", "cp"),
    ),
    Pin("torchtitan", "0.3.0", ("torchtitan", "torchtitan_recipes")),
    Pin("torchtune", "0.6.1", ("torchtune", "recipes")),
    Pin("monai", "1.6.1", ("monai",)),
    Pin("alphafold3-pytorch", "0.8.3", ("alphafold3_pytorch",)),
)

Entry = tuple[str, str, int, str]  # code, path, line, message hash


def message_hash(message: str) -> str:
    return hashlib.sha1(message.encode("utf-8")).hexdigest()[:HASH_CHARS]


def order(entry: Entry) -> tuple[str, int, str, str]:
    """By place, as ckptlint sorts its findings."""
    code, path, line, digest = entry
    return path, line, code, digest


@dataclass
class Baseline:
    """What one release gave with one ckptlint commit."""

    name: str
    version: str
    archive: str
    sha256: str
    ckptlint: str
    files: int
    findings: list[Entry]
    texts: dict[Entry, str] = field(default_factory=dict)

    def dumps(self) -> str:
        """Compact JSON, one finding per line so a changed baseline reads as a short git diff."""
        head = {
            "format": FORMAT_VERSION,
            "name": self.name,
            "version": self.version,
            "archive": self.archive,
            "sha256": self.sha256,
            "ckptlint": self.ckptlint,
            "files": self.files,
        }
        lines = [json.dumps([*entry, self.texts.get(entry, "")], separators=(",", ":")) for entry in sorted(self.findings, key=order)]
        body = ",\n".join(lines)
        return json.dumps(head, separators=(",", ":"))[:-1] + ',"findings":[\n' + body + ("\n" if lines else "") + "]}\n"

    @staticmethod
    def loads(text: str) -> Baseline:
        data = json.loads(text)
        rows = [((str(c), str(p), int(n), str(h)), str(t)) for c, p, n, h, t in data["findings"]]
        return Baseline(
            name=data["name"],
            version=data["version"],
            archive=data["archive"],
            sha256=data["sha256"],
            ckptlint=data["ckptlint"],
            files=int(data["files"]),
            findings=[entry for entry, _ in rows],
            texts=dict(rows),
        )


@dataclass
class Diff:
    added: list[Entry]
    removed: list[Entry]


def diff(baseline: Iterable[Entry], current: Iterable[Entry]) -> Diff:
    """Findings in `current` and not in `baseline`, and the other way round, as multisets
    (two identical findings on one line count twice), sorted by path, line and code."""
    before, after = collections.Counter(baseline), collections.Counter(current)
    return Diff(added=sorted((after - before).elements(), key=order), removed=sorted((before - after).elements(), key=order))


@dataclass
class Outcome:
    """One release in one run: the numbers of the summary table."""

    pin: Pin
    status: str = "ok"  # ok, no baseline, or why it was skipped
    files: int = 0
    findings: int = 0
    baseline: int | None = None
    added: int = 0
    removed: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


# --- downloading and unpacking ---------------------------------------------------------


def normalise(project: str) -> str:
    return re.sub(r"[-_.]+", "_", project).lower()


def find_archive(archives: Path, pin: Pin) -> Path | None:
    """The archive of `pin` already in the cache (wheels write `megatron_core-0.16.1-...`,
    sdists `name-version.tar.gz`)."""
    for path in sorted(archives.iterdir()) if archives.is_dir() else ():
        if pin.sdist and path.name.endswith(".tar.gz"):
            project, _, version = path.name[: -len(".tar.gz")].rpartition("-")
        elif not pin.sdist and path.name.endswith(".whl"):
            project, version = (path.name.split("-") + [""])[:2]
        else:
            continue
        if normalise(project) == normalise(pin.name) and version == pin.version:
            return path
    return None


def download(archives: Path, pin: Pin) -> Path:
    """The release's archive, from the cache or from PyPI; raises RuntimeError when pip cannot."""
    found = find_archive(archives, pin)
    if found is not None:
        return found
    archives.mkdir(parents=True, exist_ok=True)
    kind = ["--no-binary", ":all:", "--no-build-isolation"] if pin.sdist else ["--only-binary", ":all:"]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", *kind, *pin.download_args]
    command += ["--dest", str(archives), f"{pin.name}=={pin.version}"]
    completed = subprocess.run(command, capture_output=True, text=True)
    found = find_archive(archives, pin)
    if completed.returncode != 0 or found is None:
        errors = [line for line in completed.stderr.splitlines() if line.strip() and not line.startswith("WARNING")]
        raise RuntimeError(f"pip download failed: {errors[-1] if errors else 'no archive'}")
    return found


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wanted(member: str, packages: tuple[str, ...]) -> PurePosixPath | None:
    """The path a member is unpacked to (under one of the package directories), or None."""
    parts = PurePosixPath(member).parts
    if not parts or parts[0] not in packages or ".." in parts or member.startswith("/"):
        return None
    return PurePosixPath(*parts)


def unpack(archive: Path, digest: str, root: Path, pin: Pin) -> None:
    """The package directories of `archive` under `root`, with a `pyproject.toml` that makes
    `root` the project root and configuration (the defaults) whatever lies above the cache.
    Skipped when `root` already holds these directories of this archive."""
    stamp = root / ".unpacked"
    unpacked = f"{digest} {' '.join(pin.packages)}"  # a pin that lints other directories unpacks again
    if stamp.is_file() and stamp.read_text() == unpacked:
        return
    if root.exists():
        shutil.rmtree(root)
    staging = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=root.parent if root.parent.is_dir() else None))
    try:
        if pin.sdist:
            _unpack_sdist(archive, staging, pin.packages)
        else:
            _unpack_wheel(archive, staging, pin.packages)
        missing = [name for name in pin.packages if not (staging / name).is_dir()]
        if missing:
            raise RuntimeError(f"the archive has no {', '.join(missing)} directory")
        (staging / "pyproject.toml").write_text("[tool.ckptlint]\n")
        (staging / ".unpacked").write_text(unpacked)
        staging.rename(root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def _unpack_wheel(archive: Path, staging: Path, packages: tuple[str, ...]) -> None:
    with zipfile.ZipFile(archive) as wheel:
        for info in wheel.infolist():
            relative = wanted(info.filename, packages)
            if relative is not None and not info.is_dir():
                _write(staging.joinpath(*relative.parts), wheel.read(info))


def _unpack_sdist(archive: Path, staging: Path, packages: tuple[str, ...]) -> None:
    """An sdist holds `name-version/<package>/...`; the top directory is dropped."""
    with tarfile.open(archive) as sdist:
        for member in sdist.getmembers():
            if not member.isfile():
                continue
            relative = wanted("/".join(PurePosixPath(member.name).parts[1:]), packages)
            stream = sdist.extractfile(member) if relative is not None else None
            if relative is not None and stream is not None:
                _write(staging.joinpath(*relative.parts), stream.read())


# --- linting -----------------------------------------------------------------------------


def ckptlint_commit(source: Path) -> str:
    """The commit of the ckptlint checkout that lints, `+dirty` when its package has edits."""
    try:
        head = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        status = subprocess.run(
            ["git", "-C", str(source), "status", "--porcelain", "--", "ckptlint"], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + ("+dirty" if status.stdout.strip() else "")


@dataclass
class Lint:
    files: int
    entries: list[Entry]
    messages: dict[Entry, str]
    summaries: dict[Entry, str]
    seconds: float


def lint(root: Path, pin: Pin, source: Path, jobs: int | None) -> Lint:
    """ckptlint on the release's package directories, run from `root` so paths are relative."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "ckptlint", *pin.packages, "--format", "json", "--no-cache"]
    if jobs:
        command += ["--jobs", str(jobs)]
    start = time.perf_counter()
    completed = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if completed.returncode not in (0, 1):
        tail = completed.stderr.strip().splitlines()[-1:] or [f"exit code {completed.returncode}"]
        raise RuntimeError(f"ckptlint failed: {tail[0]}")
    report = json.loads(completed.stdout)
    entries: list[Entry] = []
    messages: dict[Entry, str] = {}
    summaries: dict[Entry, str] = {}
    for finding in report["findings"]:
        entry: Entry = (finding["code"], finding["path"], int(finding["line"]), message_hash(finding["message"]))
        entries.append(entry)
        messages[entry] = finding["message"]
        summaries[entry] = shorten(finding["summary"])
    return Lint(int(report["files_checked"]), entries, messages, summaries, seconds)


def shorten(summary: str) -> str:
    return summary if len(summary) <= TEXT_CHARS else summary[: TEXT_CHARS - 1] + "…"


# --- one release, the report ---------------------------------------------------------------


def baseline_path(pin: Pin) -> Path:
    return BASELINES / f"{pin.key}.json"


def load_baseline(pin: Pin) -> Baseline | None:
    path = baseline_path(pin)
    return Baseline.loads(path.read_text()) if path.is_file() else None


def describe(entry: Entry, message: str) -> str:
    code, path, line, _ = entry
    return f"{code} {path}:{line} {message}"


def check_one(pin: Pin, args: argparse.Namespace, commit: str) -> Outcome:
    outcome = Outcome(pin)
    cache: Path = args.cache
    try:
        archive = download(cache / "archives", pin)
        digest = sha256_of(archive)
        root = cache / "src" / pin.key
        root.parent.mkdir(parents=True, exist_ok=True)
        unpack(archive, digest, root, pin)
    except (RuntimeError, OSError, zipfile.BadZipFile, tarfile.TarError) as error:
        outcome.status = f"skipped: {error}"
        return outcome
    try:
        result = lint(root, pin, args.ckptlint_src, args.jobs)
    except (RuntimeError, OSError, ValueError, KeyError) as error:
        outcome.status = f"skipped: {error}"
        return outcome
    outcome.files, outcome.findings, outcome.seconds = result.files, len(result.entries), result.seconds
    try:
        baseline = load_baseline(pin)
    except (ValueError, KeyError, TypeError) as error:
        baseline = None
        outcome.notes.append(f"unreadable baseline {baseline_path(pin).name} ({type(error).__name__}: {error}); taken as none")
    if baseline is None:
        outcome.status = "no baseline"
    else:
        outcome.baseline = len(baseline.findings)
        if baseline.sha256 != digest:
            outcome.notes.append(f"archive {archive.name} differs from the baseline's ({baseline.archive})")
        if baseline.files != result.files:
            outcome.notes.append(f"files checked: {baseline.files} in the baseline, {result.files} now")
    change = diff(baseline.findings if baseline else [], result.entries)
    outcome.added, outcome.removed = len(change.added), len(change.removed)
    limit: int = args.max_lines
    texts = baseline.texts if baseline else {}
    for sign, entries, known in (("+", change.added, result.messages), ("-", change.removed, texts)):
        for entry in entries[:limit]:
            outcome.notes.append(f"{sign} {describe(entry, known.get(entry, ''))}")
        if len(entries) > limit:
            outcome.notes.append(f"{sign} ... and {len(entries) - limit} more (--max-lines)")
    if args.update:
        made = Baseline(pin.name, pin.version, archive.name, digest, commit, result.files, result.entries, result.summaries)
        write_baseline(pin, made)
    return outcome


def write_baseline(pin: Pin, baseline: Baseline) -> None:
    """The new baseline; a baseline of another version of the same release goes."""
    BASELINES.mkdir(parents=True, exist_ok=True)
    for old in BASELINES.glob(f"{pin.name}-*.json"):
        if old.name != baseline_path(pin).name and old.name[len(pin.name) + 1 :][:1].isdigit():
            old.unlink()
    baseline_path(pin).write_text(baseline.dumps())


def print_outcome(outcome: Outcome) -> None:
    pin = outcome.pin
    if outcome.status.startswith("skipped"):
        print(f"{pin.key}: {outcome.status}", flush=True)
        return
    against = "no baseline" if outcome.baseline is None else f"baseline {outcome.baseline}"
    print(
        f"{pin.key}: {outcome.files} files, {outcome.findings} findings ({against}), "
        f"+{outcome.added} -{outcome.removed}, {outcome.seconds:.1f} s",
        flush=True,
    )
    for note in outcome.notes:
        print(f"    {note}", flush=True)


def summary_table(outcomes: Sequence[Outcome], total: float) -> str:
    rows = [("release", "files", "findings", "baseline", "+", "-", "seconds", "status")]
    for o in outcomes:
        skipped = o.status.startswith("skipped")
        rows.append(
            (
                o.pin.key,
                "" if skipped else str(o.files),
                "" if skipped else str(o.findings),
                "" if o.baseline is None else str(o.baseline),
                "" if skipped else f"+{o.added}",
                "" if skipped else f"-{o.removed}",
                "" if skipped else f"{o.seconds:.1f}",
                "skipped" if skipped else o.status,
            )
        )
    done = [o for o in outcomes if not o.status.startswith("skipped")]
    rows.append(
        (
            "total",
            str(sum(o.files for o in done)),
            str(sum(o.findings for o in done)),
            "",
            f"+{sum(o.added for o in done)}",
            f"-{sum(o.removed for o in done)}",
            f"{total:.1f}",
            f"{len(done)}/{len(outcomes)} linted",
        )
    )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        cells = [cell.ljust(width) if i in (0, 7) else cell.rjust(width) for i, (cell, width) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
        if index == 0 or index == len(rows) - 2:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="rewrite the baselines from this run")
    parser.add_argument("--strict", action="store_true", help="exit 1 on any addition, removal or skipped release")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"archives and unpacked code [default: {DEFAULT_CACHE}]")
    parser.add_argument("--ckptlint-src", type=Path, default=REPO, help="the ckptlint checkout that lints [default: this one]")
    parser.add_argument("--only", action="append", metavar="NAME", help="only this release (repeatable)")
    parser.add_argument("--jobs", type=int, help="passed to ckptlint --jobs [default: ckptlint's, all cores]")
    parser.add_argument("--max-lines", type=int, default=50, help="added or removed findings listed per release [default: 50]")
    args = parser.parse_args(argv)
    args.cache = args.cache.expanduser().resolve()
    args.ckptlint_src = args.ckptlint_src.expanduser().resolve()
    if not (args.ckptlint_src / "ckptlint" / "__init__.py").is_file():
        # else `python -m ckptlint` would quietly run whichever ckptlint is installed
        parser.error(f"--ckptlint-src {args.ckptlint_src} holds no ckptlint package")
    known = {pin.name for pin in PINS}
    unknown = sorted(set(args.only or ()) - known)
    if unknown:
        parser.error(f"unknown release {', '.join(unknown)}; pinned: {', '.join(sorted(known))}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    pins = [pin for pin in PINS if not args.only or pin.name in args.only]
    commit = ckptlint_commit(args.ckptlint_src)
    print(f"ckptlint {commit} from {args.ckptlint_src}; cache {args.cache}", flush=True)
    start = time.perf_counter()
    outcomes = []
    for pin in pins:
        outcome = check_one(pin, args, commit)
        print_outcome(outcome)
        outcomes.append(outcome)
    print()
    print(summary_table(outcomes, time.perf_counter() - start))
    if args.update:
        print(f"baselines written to {os.path.relpath(BASELINES)}/ (ckptlint {commit})")
    changed = any(o.added or o.removed or o.status != "ok" for o in outcomes)
    return 1 if args.strict and changed else 0


if __name__ == "__main__":
    sys.exit(main())
