"""Score ckptlint's CKP3xx/CKP4xx findings on labelled public training frameworks (this folder).

labels-*.jsonl hold one row per repository: the commit read, the files read whole (`scope`) and
every expected finding, labelled by reading the code before ckptlint ran on it (sources-*.md say
how). A labelled finding counts as found wherever it is; a finding of those families that no label
names counts as false only in a scope file (the files read whole).
Two truths: **strict** leaves "uncertain" labels out both ways (neither rewarded nor penalised);
**broad** counts them as expected (the configuration that makes them true is the one the code
exists for: tensor-parallel size above 1, a sequence-parallel mode, a flag a config turns on).

    python benchmarks/distributed/score.py prepare MIRRORS CORPUS   # MIRRORS/owner+name/...: fetched bare git mirrors
    python benchmarks/distributed/score.py score CORPUS [--cmd "python -m ckptlint"] [--show]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FAMILIES = re.compile(r"^CKP[34]\d\d$")
LINE = re.compile(r"^(?P<path>.+?):(?P<line>\d+):(?P<col>\d+): (?P<code>CKP\d{3}) ")

Key = tuple[str, int, str]  # path, line, code


def rows(sets: frozenset[str] = frozenset()) -> list[dict]:
    """The labelled rows of every labels-*.jsonl, or of the named sets (`tp` for labels-tp.jsonl)."""
    found = []
    for labels in sorted(HERE.glob("labels-*.jsonl")):
        if sets and labels.stem.removeprefix("labels-") not in sets:
            continue
        found += [json.loads(line) for line in labels.read_text(encoding="utf-8").splitlines() if line.strip()]
    return found


def git_dir(mirrors: Path, repo: str) -> Path:
    """The bare git directory `fetch` left for `owner/name` (its layout: owner+name/<name>.git or a nested dir)."""
    root = mirrors / repo.replace("/", "+")
    for candidate in [root, *sorted(root.rglob("*"))]:
        if candidate.is_dir() and (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
            return candidate
    raise SystemExit(f"no git mirror for {repo} under {root}")


def prepare(mirrors: Path, corpus: Path, sets: frozenset[str]) -> None:
    """Each repository's Python sources and build files at the labelled commit (the mirrors
    lack large blobs, so files are read one by one and missing ones skipped)."""
    for row in rows(sets):
        dest = corpus / row["repo"].replace("/", "+")
        if dest.is_dir():
            continue
        git = ["git", "--git-dir", str(git_dir(mirrors, row["repo"]))]
        listing = subprocess.run([*git, "ls-tree", "-r", "-z", row["commit"]], capture_output=True, check=True).stdout.split(b"\0")
        blobs = []
        for entry in filter(None, listing):
            meta, path = entry.split(b"\t", 1)
            _, kind, sha = meta.split()
            if kind == b"blob" and path.endswith((b".py", b".pyi", b".toml", b".cfg")):
                blobs.append((sha.decode(), path.decode(errors="replace")))
        batch = subprocess.run([*git, "cat-file", "--batch"], input="".join(s + "\n" for s, _ in blobs).encode(), capture_output=True).stdout
        position = 0
        for _, path in blobs:
            header_end = batch.index(b"\n", position)
            header = batch[position:header_end].split()
            position = header_end + 1
            if header[1] == b"missing":
                continue
            size = int(header[2])
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(batch[position : position + size])
            position += size + 1
        print(f"{row['repo']}: {dest}")


def lint(command: str, root: Path, scope: list[str]) -> set[Key]:
    tops = sorted({path.split("/")[0] for path in scope if (root / path).exists()})
    argv = shlex.split(command) + ["--exit-zero", "--format", "text", *tops]
    completed = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=1800)
    lines = completed.stdout.strip().splitlines()
    if completed.returncode not in (0, 2) or not lines or not lines[-1].startswith(("Found", "All checks passed")):
        # a command that did not run (ckptlint not importable) must not score as "nothing found"
        sys.exit(f"{' '.join(argv)} in {root} failed ({completed.returncode}):\n{completed.stderr[-2000:]}")
    found = set()
    for line in completed.stdout.splitlines():
        match = LINE.match(line.strip())
        if match and FAMILIES.match(match["code"]):
            found.add((match["path"], int(match["line"]), match["code"]))
    return found


def score(corpus: Path, command: str, show: bool, sets: frozenset[str]) -> None:
    tallies = {truth: collections.defaultdict(collections.Counter) for truth in ("strict", "broad")}
    notes: list[str] = []
    for row in rows(sets):
        root = corpus / row["repo"].replace("/", "+")
        scope = set(row["scope"])
        found = lint(command, root, sorted(scope | {e["path"] for e in row["expected"]}))
        got = {key for key in found if key[0] in scope}  # what can be false: findings in files read whole
        certain = {(e["path"], e["line"], e["code"]) for e in row["expected"] if not e.get("uncertain")}
        uncertain = {(e["path"], e["line"], e["code"]) for e in row["expected"] if e.get("uncertain")}
        for truth, want, ignored in (("strict", certain, uncertain), ("broad", certain | uncertain, set())):
            per = tallies[truth]
            for key in want:
                per[key[2]]["tp" if key in found else "fn"] += 1
            for key in got - want - ignored:
                per[key[2]]["fp"] += 1
        notes += [f"  missed {row['repo']} {p}:{l} {c}{' (uncertain)' if (p, l, c) in uncertain else ''}" for p, l, c in sorted((certain | uncertain) - found)]
        notes += [f"  false  {row['repo']} {p}:{l} {c}" for p, l, c in sorted(got - certain - uncertain)]
    for truth, per in tallies.items():
        print(f"{truth}:")
        print(f"  {'code':8} {'tp':>3} {'fp':>3} {'fn':>3} {'prec':>6} {'recall':>6}")
        for code in sorted(per):
            t = per[code]
            precision = t["tp"] / (t["tp"] + t["fp"]) if t["tp"] + t["fp"] else 1.0
            recall = t["tp"] / (t["tp"] + t["fn"]) if t["tp"] + t["fn"] else 1.0
            print(f"  {code:8} {t['tp']:3} {t['fp']:3} {t['fn']:3} {precision:6.3f} {recall:6.3f}")
    if show:
        print("\n".join(notes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("prepare")
    p.add_argument("mirrors", type=Path)
    p.add_argument("corpus", type=Path)
    s = commands.add_parser("score")
    s.add_argument("corpus", type=Path)
    s.add_argument("--cmd", default="python -m ckptlint")
    s.add_argument("--show", action="store_true")
    for sub in (p, s):
        sub.add_argument("--sets", default="", help="comma list of label sets (tp,fsdp,more,heldout); default all")
    args = parser.parse_args()
    sets = frozenset(x for x in args.sets.split(",") if x)
    if args.command == "prepare":
        prepare(args.mirrors, args.corpus, sets)
    else:
        score(args.corpus, args.cmd, args.show, sets)


if __name__ == "__main__":
    main()
