"""What a new `--select` or `--ignore` costs once the cache is warm, before and after the cache
was kept before selection (issue 12).

    python benchmarks/selection_change.py CORPUS [--before DIR] [--after DIR] [--jobs N]

CORPUS is a folder (e.g. the `diffusers/` folder of a release wheel). For each checkout
(`--before`, default /work/main, and `--after`, default this one; each run as
`PYTHONPATH=DIR python -m ckptlint`, a real subprocess with its own cache directory) it times:

1. cold: every rule, empty cache;
2. warm: the same again;
3. `--select CKP201`, then `--ignore CKP203`, then `--per-file-ignores`: selection changes;
4. a second cache: cold with `--select CKP101` only (call-level rules), then `--select CKP2`.

and prints seconds and the ratio to the warm run. Machines are noisy: compare the ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

STEPS: list[tuple[str, str, list[str]]] = [  # (label, cache, options)
    ("cold", "a", []),
    ("warm", "a", []),
    ("--select CKP201", "a", ["--select", "CKP201"]),
    ("--ignore CKP203", "a", ["--ignore", "CKP203"]),
    ("--per-file-ignores", "a", ["--per-file-ignores", "*/models/*:CKP2"]),
    ("cold --select CKP101", "b", ["--select", "CKP101"]),
    ("then --select CKP2", "b", ["--select", "CKP2"]),
]


def timed(checkout: Path, corpus: Path, cache: Path, options: list[str], jobs: int) -> tuple[float, str]:
    """One run, from the cache's parent folder: `python -m` puts the working directory first
    on the path, so running from a checkout would import that checkout, not `checkout`."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    env.pop("CKPTLINT_CACHE_DIR", None)
    command = [sys.executable, "-m", "ckptlint", str(corpus), "-q", "--exit-zero", "-j", str(jobs), "--cache-dir", str(cache), *options]
    start = time.perf_counter()
    completed = subprocess.run(command, env=env, cwd=cache.parent, capture_output=True, text=True, timeout=3600)
    elapsed = time.perf_counter() - start
    if completed.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{completed.stderr}")
    return elapsed, completed.stdout


def measure(checkout: Path, corpus: Path, jobs: int) -> dict[str, float]:
    times: dict[str, float] = {}
    outputs: dict[str, str] = {}
    scratch = Path(tempfile.mkdtemp(prefix="ckptlint-selection-"))
    probe = subprocess.run(
        [sys.executable, "-c", "import ckptlint; print(ckptlint.__file__)"],
        env={**os.environ, "PYTHONPATH": str(checkout)}, cwd=scratch, capture_output=True, text=True,
    )
    if not probe.stdout.startswith(str(checkout.resolve())):
        raise SystemExit(f"PYTHONPATH={checkout} imports {probe.stdout.strip()}, not that checkout")
    try:
        for label, cache, options in STEPS:
            times[label], outputs[label] = timed(checkout, corpus, scratch / cache, options, jobs)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if outputs["cold"] != outputs["warm"]:
        raise SystemExit(f"{checkout}: the warm run reported something else than the cold one")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--before", type=Path, default=Path("/work/main"))
    parser.add_argument("--after", type=Path, default=HERE)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    files = sum(1 for _ in args.corpus.rglob("*.py"))
    print(f"corpus: {args.corpus} ({files:,} .py files), {args.jobs} workers")
    results = {name: measure(path, args.corpus, args.jobs) for name, path in (("before", args.before), ("after", args.after))}
    print(f"{'run':<24}{'before s':>10}{'x warm':>9}{'after s':>10}{'x warm':>9}")
    for label, _, _ in STEPS:
        row = f"{label:<24}"
        for name in ("before", "after"):
            seconds = results[name][label]
            row += f"{seconds:>10.2f}{seconds / results[name]['warm']:>9.1f}"
        print(row)


if __name__ == "__main__":
    main()
