"""How fast ckptlint lints a corpus, as ratios to `ast.parse` of the same files in the same run.

    python benchmarks/lint_speed.py CORPUS [--changed FILE] [--jobs N] [--cold-only] [--torchfix-sample N]

CORPUS is a folder (e.g. the `transformers/` folder of a release wheel). The script:

1. parses every .py file with `ast.parse` in this process (the baseline);
2. runs `ckptlint CORPUS` cold (empty cache), then warm (nothing changed);
3. edits one file (appends a comment to FILE, default: the largest file with a checkpoint
   call), lints only that file as pre-commit would, and restores it;
4. optionally times TorchFix (`flake8 --select TOR`) on a sample of files and extrapolates.

Each ckptlint run is a real subprocess with its own cache directory; peak RSS is the
largest of any process it started. Machines are noisy: compare the ratios, not seconds.
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path


def python_files(corpus: Path) -> list[Path]:
    return sorted(p for p in corpus.rglob("*.py") if "__pycache__" not in p.parts)


def time_ast_parse(files: list[Path]) -> tuple[float, float]:
    """Wall and CPU seconds of parsing every file in this process."""
    start, cpu_start = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for path in files:
            try:
                ast.parse(path.read_bytes())
            except (SyntaxError, ValueError):
                pass
    return time.perf_counter() - start, time.process_time() - cpu_start


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(command: list[str], cwd: Path) -> tuple[float, float, int, str]:
    """Wall seconds, CPU seconds of the process and its workers, peak RSS of the children so
    far (KiB), and the last output line. CPU seconds barely move when other work shares the
    machine, so they compare two versions on a busy one; the budget is wall time on a quiet one."""
    start, cpu_start = time.perf_counter(), children_cpu()
    completed = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    lines = completed.stdout.strip().splitlines()
    summary = lines[-1] if lines else ""
    if completed.returncode not in (0, 1) or not summary.startswith(("Found", "All checks passed")):
        sys.exit(f"{' '.join(command)} failed ({completed.returncode}):\n{completed.stderr[-2000:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return elapsed, children_cpu() - cpu_start, peak, summary


def pick_changed_file(files: list[Path]) -> Path:
    """A typical model file: the median-sized one among those with a checkpoint call."""
    pattern = re.compile(rb"\b(?:checkpoint|_gradient_checkpointing_func|GradientCheckpointingLayer)\b")
    candidates = sorted((p for p in files if pattern.search(p.read_bytes())), key=lambda p: p.stat().st_size) or files
    return candidates[len(candidates) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--changed", type=Path, help="the file to edit for the pre-commit case")
    parser.add_argument("--jobs", type=int, help="passed to ckptlint --jobs")
    parser.add_argument("--cold-only", action="store_true", help="stop after the cold run (comparing two versions)")
    parser.add_argument("--torchfix-sample", type=int, default=0, help="time TorchFix on this many files")
    parser.add_argument("--flake8", default=shutil.which("flake8"), help="a flake8 with the torchfix plugin installed")
    args = parser.parse_args()
    corpus = args.corpus.resolve()
    files = python_files(corpus)
    lines = sum(p.read_bytes().count(b"\n") for p in files)
    print(f"corpus: {corpus} ({len(files)} files, {lines:,} lines)")

    parse_seconds, parse_cpu = time_ast_parse(files)
    print(f"ast.parse of every file: {parse_seconds:.2f} s, {parse_cpu:.2f} s CPU (baseline)")

    # pre-commit runs in a project: with a pyproject.toml, a file is linted with every
    # checkpoint call in the project that reaches it (a temporary one when there is none)
    marker = corpus.parent / "pyproject.toml"
    created = not marker.exists()
    if created:
        marker.write_text("[tool.ckptlint]\n")
    cache = Path(tempfile.mkdtemp(prefix="ckptlint-bench-"))
    base = [sys.executable, "-m", "ckptlint", "--exit-zero", "--cache-dir", str(cache)]
    if args.jobs:
        base += ["--jobs", str(args.jobs)]
    try:
        cold, cold_cpu, peak, summary = run([*base, str(corpus)], corpus.parent)
        print(f"ckptlint cold: {cold:.2f} s = {cold / parse_seconds:.2f}x ast.parse   [{summary}]")
        print(f"ckptlint cold CPU: {cold_cpu:.2f} s = {cold_cpu / parse_cpu:.2f}x ast.parse's CPU")
        if args.cold_only:
            return
        warm, warm_cpu, _, summary = run([*base, str(corpus)], corpus.parent)
        print(f"ckptlint warm (nothing changed): {warm:.2f} s = {warm / parse_seconds:.2f}x ast.parse ({warm_cpu:.2f} s CPU)")
        changed = args.changed or pick_changed_file(files)
        original = changed.read_bytes()
        try:
            changed.write_bytes(original + b"\n# edited by lint_speed.py\n")
            one, _, _, summary = run([*base, str(changed)], corpus.parent)
        finally:
            changed.write_bytes(original)
        print(f"ckptlint on one changed file ({changed.relative_to(corpus)}), warm cache: {one:.2f} s   [{summary}]")
        print(f"peak RSS of any ckptlint process: {peak / 1024:.0f} MiB")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        if created:
            marker.unlink()

    if args.torchfix_sample:
        time_torchfix(args.flake8, files, args.torchfix_sample, parse_seconds, corpus)


def time_torchfix(flake8: str | None, files: list[Path], sample_size: int, parse_seconds: float, corpus: Path) -> None:
    if flake8 is None:
        print("TorchFix: flake8 is not installed (pip install torchfix)")
        return
    sample = random.Random(0).sample(files, min(sample_size, len(files)))
    sample_lines = sum(p.read_bytes().count(b"\n") for p in sample)
    total_lines = sum(p.read_bytes().count(b"\n") for p in files)
    start = time.perf_counter()
    subprocess.run([flake8, "--select", "TOR", "--jobs", str(os.cpu_count() or 1), *map(str, sample)], cwd=corpus.parent, capture_output=True)
    seconds = time.perf_counter() - start
    estimate = seconds * total_lines / max(1, sample_lines)
    print(
        f"TorchFix (flake8 --select TOR) on {len(sample)} files ({sample_lines:,} lines): {seconds:.1f} s; "
        f"extrapolated to the corpus by lines: {estimate:.0f} s = {estimate / parse_seconds:.0f}x ast.parse"
    )


if __name__ == "__main__":
    main()
