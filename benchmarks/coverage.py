"""Coverage: of the calls inside checkpointed regions, how many the analysis followed.

    python benchmarks/coverage.py --ecosystem                 # the ecosystem releases (benchmarks/ecosystem.py's cache)
    python benchmarks/coverage.py --repos DIR                 # every folder in DIR is one repository
    python benchmarks/coverage.py --repos DIR --show 15       # and the 15 commonest unresolved callees

Runs `ckptlint calls --format json --no-cache` (this checkout first on PYTHONPATH) on each
project and reads each call's `coverage`: the calls its region makes, directly or through its
callees (a helper counts once in each region that reaches it), how many resolved to a project
definition, a library table entry, a torch op, a builtin or a known method name, and why the
others did not (analysis/regions/coverage.py). Prints per project and over all: calls,
resolved, the share, and the unresolved reasons. Wall time is not measured here.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from ecosystem import DEFAULT_CACHE, PINS  # noqa: E402  # the same pinned releases and cache


def calls_of(root: Path, paths: list[str], jobs: int | None) -> list[dict[str, object]]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "ckptlint", "calls", *paths, "--format", "json", "--no-cache"]
    if jobs:
        command += ["--jobs", str(jobs)]
    completed = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    if completed.returncode not in (0, 1):
        tail = completed.stderr.strip().splitlines()[-1:] or [f"exit code {completed.returncode}"]
        raise RuntimeError(tail[0])
    described: list[dict[str, object]] = json.loads(completed.stdout)
    return described


def projects(args: argparse.Namespace) -> list[tuple[str, Path, list[str]]]:
    found: list[tuple[str, Path, list[str]]] = []
    if args.ecosystem:
        for pin in PINS:
            root = Path(args.cache) / "src" / pin.key
            if root.is_dir():
                found.append((pin.key, root, [p for p in pin.packages if (root / p).exists()]))
            else:
                print(f"{pin.key}: not unpacked (run benchmarks/ecosystem.py once)", file=sys.stderr)
    if args.repos:
        for folder in sorted(Path(args.repos).iterdir()):
            if folder.is_dir():
                found.append((folder.name, folder, ["."]))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ecosystem", action="store_true", help="the ecosystem check's releases")
    parser.add_argument("--cache", default=str(DEFAULT_CACHE), help="the ecosystem check's cache")
    parser.add_argument("--repos", help="a folder of repositories, one per subfolder")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--show", type=int, default=0, metavar="N", help="list the N commonest unresolved callees")
    args = parser.parse_args()
    total = resolved = sites = 0
    reasons: collections.Counter[str] = collections.Counter()
    callees: collections.Counter[tuple[str, str]] = collections.Counter()
    print(f"{'project':40} {'sites':>6} {'calls':>8} {'resolved':>9} {'share':>6}")
    for name, root, paths in projects(args):
        try:
            described = calls_of(root, paths, args.jobs)
        except (RuntimeError, json.JSONDecodeError) as exc:
            print(f"{name:40} failed: {exc}")
            continue
        n = sum(int(d["coverage"]["calls"]) for d in described)  # type: ignore[index]
        r = sum(int(d["coverage"]["resolved"]) for d in described)  # type: ignore[index]
        for d in described:
            for call in d["coverage"]["unresolved"]:  # type: ignore[index]
                reasons[call["reason"]] += 1
                callees[(call["reason"], f"{name}: {call['callee']}")] += 1
        total, resolved, sites = total + n, resolved + r, sites + len(described)
        share = f"{r / n:.3f}" if n else "-"
        print(f"{name:40} {len(described):>6} {n:>8} {r:>9} {share:>6}", flush=True)
    share = f"{resolved / total:.3f}" if total else "-"
    print(f"{'all':40} {sites:>6} {total:>8} {resolved:>9} {share:>6}")
    print("unresolved: " + ", ".join(f"{n} {reason}" for reason, n in reasons.most_common()))
    for (reason, callee), n in callees.most_common(args.show):
        print(f"  {n:6} {callee} ({reason})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
