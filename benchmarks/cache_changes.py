"""What a warm cache saves when files come, go or change: files re-analysed and seconds.

    python benchmarks/cache_changes.py CORPUS [--edits 20] [--seed 0] [--jobs N] [--code LABEL=PATH ...] [--files PATH ...]

CORPUS is a package folder (e.g. the `transformers/` folder of a release wheel); it is copied
to a temporary directory first, so the original is never touched. The script runs `ckptlint
-v` (a real subprocess, its own cache directory, a `pyproject.toml` above the copy) cold, then
warm, then:

1. adds an unrelated module (`x = 1`) beside a model, at the package's top and in a new
   folder, each followed by a whole-corpus run (how many files are re-analysed, of how many
   the cold run analysed) and by its removal (the same);
2. edits one line of `--edits` files chosen at random among the model files with a checkpoint
   call (`modeling_*.py`; every file with one in a corpus that has none), and
   lints each alone as pre-commit and an editor's save do: seconds (median and p95) and files
   re-analysed. Two edits per file: a comment appended (`--edit comment`) and a line of code
   appended (`--edit code`; a module-level assignment, which every importer's analysis may
   read); every timed run starts from a copy of the cache the whole-corpus runs left (the
   warm cache of the unedited tree), so no edit's figure depends on the edits before it.
   `--files` names the files to edit instead (a library's hubs, which a draw seldom holds),
   and prints each one's figure; `--edits` larger than the model files edits them all (the
   whole distribution, not a draw's); the edits slower than `--over` seconds (2) are named;
3. checks that the last warm run's output equals a cold run's.

The runs may write ckptlint's bytecode (`PYTHONDONTWRITEBYTECODE` is dropped for them): an
installed ckptlint is byte-compiled, and compiling its 140 modules at every start cost 0.15 s.

Each figure is read from `-v`'s line "analysed N files; M from the cache". With several
`--code` checkouts (`before=/tmp/old after=.`: PYTHONPATH for each), every step runs each
checkout in turn on its own cache, so their seconds are paired. Machines are noisy: the counts
are exact, the seconds are to be compared within one run of this script.
"""

from __future__ import annotations

import argparse
import os
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


def lint(top: Path, cache: Path, target: str, jobs: int | None, code: Path | None) -> tuple[float, int, int, str]:
    """Seconds, files analysed, files from the cache, and the findings printed."""
    command = [sys.executable, "-m", "ckptlint", "-v", "--exit-zero", "--cache-dir", str(cache), target]
    if jobs:
        command += ["--jobs", str(jobs)]
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}  # timed as installed: byte-compiled
    if code is not None:
        env["PYTHONPATH"] = str(code)
    start = time.perf_counter()
    completed = subprocess.run(command, cwd=top, capture_output=True, text=True, env=env)
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
    parser.add_argument("--edit", choices=["comment", "code", "both"], default="both")
    parser.add_argument("--code", nargs="+", default=[], metavar="LABEL=PATH", help="checkouts to compare (default: the installed ckptlint)")
    parser.add_argument("--files", nargs="+", default=[], metavar="PATH", help="files to edit (below CORPUS) instead of a random draw, each reported")
    parser.add_argument("--over", type=float, default=2.0, metavar="SECONDS", help="name the edits slower than this (the target's bound)")
    args = parser.parse_args()
    codes: list[tuple[str, Path | None]] = [(item.partition("=")[0], Path(item.partition("=")[2]).resolve()) for item in args.code] or [("ckptlint", None)]
    work = Path(tempfile.mkdtemp(prefix="ckptlint-cache-changes-"))
    try:
        package = work / args.corpus.resolve().name
        shutil.copytree(args.corpus.resolve(), package, ignore=shutil.ignore_patterns("__pycache__"))
        (work / "pyproject.toml").write_text("[tool.ckptlint]\n")
        name = package.name
        print(f"corpus: {args.corpus} -> {package}")

        def each(what: str, target: str) -> list[tuple[float, int, int, str]]:
            """`target` linted by every checkout on its own cache, one line each."""
            results = []
            for label, code in codes:
                result = lint(work, work / f".cache-{label}", target, args.jobs, code)
                seconds, analysed, cached, _ = result
                share = f" ({analysed / cold[label]:.1%} of {cold[label]:,})" if label in cold else ""
                print(f"{label:>10} {what}: {seconds:.2f} s, {analysed:,} analysed{share}, {cached:,} from the cache")
                results.append(result)
            return results

        cold: dict[str, int] = {}
        cold_outputs = each("cold", name)
        cold.update({label: result[1] for (label, _), result in zip(codes, cold_outputs)})
        each("warm, nothing changed", name)

        checkpointing = sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts and CHECKPOINTING.search(p.read_bytes()))
        beside = checkpointing[len(checkpointing) // 2].parent if checkpointing else package
        for where in (beside / "scratch_added.py", package / "scratch_added.py", package / "scratch_folder" / "scratch_added.py"):
            where.parent.mkdir(exist_ok=True)
            where.write_text("x = 1\n")
            each(f"added {where.relative_to(work)}", name)
            where.unlink()
            if where.parent.name == "scratch_folder":
                where.parent.rmdir()
            each("  removed again", name)

        models = [p for p in checkpointing if p.name.startswith("modeling_")] or checkpointing
        chosen = [package / path for path in args.files] or random.Random(args.seed).sample(models, min(args.edits, len(models)))
        snapshots = {label: work / f".snapshot-{label}" for label, _ in codes}
        for label, snapshot in snapshots.items():
            shutil.copytree(work / f".cache-{label}", snapshot)
        kinds = ["comment", "code"] if args.edit == "both" else [args.edit]
        for kind in kinds:
            appended = b"\n# edited by cache_changes.py\n" if kind == "comment" else b"\n_edited_by_cache_changes = 1\n"
            times: dict[str, list[float]] = {label: [] for label, _ in codes}
            counts: dict[str, list[int]] = {label: [] for label, _ in codes}
            for path in chosen:
                original = path.read_bytes()
                target = str(path.relative_to(work))
                try:
                    path.write_bytes(original + appended)
                    for label, code in codes:
                        shutil.rmtree(work / f".cache-{label}")
                        shutil.copytree(snapshots[label], work / f".cache-{label}")
                        seconds, analysed, _, _ = lint(work, work / f".cache-{label}", target, args.jobs, code)
                        times[label].append(seconds)
                        counts[label].append(analysed)
                        if args.files:
                            print(f"{label:>10} {kind} edit of {target}: {seconds:.2f} s, {analysed:,} analysed")
                        shutil.rmtree(work / f".last-{label}", ignore_errors=True)
                        shutil.copytree(work / f".cache-{label}", work / f".last-{label}")
                finally:
                    path.write_bytes(original)
            for label, _ in codes:
                spent = times[label]
                p95 = min(statistics.quantiles(spent, n=20)[-1], max(spent)) if len(spent) > 1 else spent[0]  # with few files the estimate would pass the slowest
                slowest = max(range(len(spent)), key=spent.__getitem__)
                print(
                    f"{label:>10} one-line {kind} edit of {len(spent)} model files with a checkpoint call, each linted alone warm: "
                    f"median {statistics.median(spent):.2f} s, p95 {p95:.2f} s, max {max(spent):.2f} s "
                    f"({chosen[slowest].relative_to(work)}); re-analysed median {statistics.median(counts[label]):.0f}, "
                    f"max {max(counts[label])}"
                )
                slow = sorted(((seconds, chosen[i]) for i, seconds in enumerate(spent) if seconds > args.over), reverse=True)
                if slow:
                    named = ", ".join(f"{path.relative_to(work)} {seconds:.2f} s" for seconds, path in slow[:10])
                    print(f"{label:>10}   {len(slow)} of {len(spent)} over {args.over:g} s: {named}")
        for (label, code), (_, _, _, cold_output) in zip(codes, cold_outputs):
            shutil.rmtree(work / f".cache-{label}")  # the cache after the last edit's run, with that edit undone
            shutil.copytree(work / f".last-{label}", work / f".cache-{label}")
            _, _, _, warm_output = lint(work, work / f".cache-{label}", name, args.jobs, code)
            print(f"{label:>10} warm output after every change undone equals its cold run's: {warm_output == cold_output}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
