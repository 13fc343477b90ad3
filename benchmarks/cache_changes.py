"""What a warm cache saves when files come, go or change: files re-analysed and seconds.

    python benchmarks/cache_changes.py CORPUS [--edits 20] [--seed 0] [--jobs N]

CORPUS is a package folder (e.g. the `transformers/` folder of a release wheel); it is copied
to a temporary directory first, so the original is never touched. The script runs `ckptlint
-v` (a real subprocess, its own cache directory, a `pyproject.toml` above the copy) cold, then
warm, then:

1. adds an unrelated module (`x = 1`) beside a model, at the package's top and in a new
   folder, each followed by a whole-corpus run (how many files are re-analysed, of how many
   the cold run analysed) and by its removal (the same);
2. edits one line (a comment appended) of `--edits` files chosen at random among those with a
   checkpoint call, and lints each alone as pre-commit and an editor's save do: seconds
   (median and p95) and files re-analysed;
3. checks that the last warm run's output equals a cold run's.

Each figure is read from `-v`'s line "analysed N files; M from the cache". Machines are noisy:
the counts are exact, the seconds are to be compared within one run of this script.
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ANALYSED = re.compile(r"analysed ([\d,]+) files?; ([\d,]+) from the cache")
CHECKPOINTING = re.compile(rb"\b(?:checkpoint|_gradient_checkpointing_func|GradientCheckpointingLayer)\b")


def lint(top: Path, cache: Path, target: str, jobs: int | None) -> tuple[float, int, int, str]:
    """Seconds, files analysed, files from the cache, and the findings printed."""
    command = [sys.executable, "-m", "ckptlint", "-v", "--exit-zero", "--cache-dir", str(cache), target]
    if jobs:
        command += ["--jobs", str(jobs)]
    start = time.perf_counter()
    completed = subprocess.run(command, cwd=top, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    match = ANALYSED.search(completed.stderr)
    if completed.returncode != 0 or match is None:
        sys.exit(f"{' '.join(command)} failed ({completed.returncode}):\n{completed.stderr[-2000:]}")
    analysed, cached = (int(group.replace(",", "")) for group in match.groups())
    return seconds, analysed, cached, completed.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ckptlint-cache-changes-"))
    try:
        package = work / args.corpus.resolve().name
        shutil.copytree(args.corpus.resolve(), package, ignore=shutil.ignore_patterns("__pycache__"))
        (work / "pyproject.toml").write_text("[tool.ckptlint]\n")
        cache = work / ".cache"
        name = package.name
        seconds, cold, _, cold_output = lint(work, cache, name, args.jobs)
        print(f"corpus: {args.corpus} -> {package}")
        print(f"cold: {seconds:.1f} s, {cold:,} files analysed")
        seconds, analysed, cached, _ = lint(work, cache, name, args.jobs)
        print(f"warm, nothing changed: {seconds:.2f} s, {analysed} analysed, {cached:,} from the cache")

        checkpointing = sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts and CHECKPOINTING.search(p.read_bytes()))
        beside = checkpointing[len(checkpointing) // 2].parent if checkpointing else package
        for where in (beside / "scratch_added.py", package / "scratch_added.py", package / "scratch_folder" / "scratch_added.py"):
            where.parent.mkdir(exist_ok=True)
            where.write_text("x = 1\n")
            seconds, analysed, _, _ = lint(work, cache, name, args.jobs)
            print(f"added {where.relative_to(work)}: {analysed} re-analysed ({analysed / cold:.1%} of {cold:,}), {seconds:.2f} s")
            where.unlink()
            if where.parent.name == "scratch_folder":
                where.parent.rmdir()
            seconds, analysed, _, _ = lint(work, cache, name, args.jobs)
            print(f"  removed again: {analysed} re-analysed ({analysed / cold:.1%}), {seconds:.2f} s")

        chosen = random.Random(args.seed).sample(checkpointing, min(args.edits, len(checkpointing)))
        times: list[float] = []
        counts: list[int] = []
        for path in chosen:
            original = path.read_bytes()
            try:
                path.write_bytes(original + b"\n# edited by cache_changes.py\n")
                seconds, analysed, _, _ = lint(work, cache, str(path.relative_to(work)), args.jobs)
            finally:
                path.write_bytes(original)
            times.append(seconds)
            counts.append(analysed)
        if times:
            p95 = statistics.quantiles(times, n=20)[-1] if len(times) > 1 else times[0]
            print(
                f"one-line edit of {len(times)} files with a checkpoint call, each linted alone warm: "
                f"median {statistics.median(times):.2f} s, p95 {p95:.2f} s, max {max(times):.2f} s; "
                f"re-analysed median {statistics.median(counts):.0f}, max {max(counts)}"
            )
            worst = sorted(zip(counts, chosen), reverse=True)[:3]
            print("  most re-analysed: " + ", ".join(f"{p.relative_to(package)} ({n})" for n, p in worst))

        _, _, _, warm_output = lint(work, cache, name, args.jobs)
        print(f"warm output equals the cold run's: {warm_output == cold_output}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
