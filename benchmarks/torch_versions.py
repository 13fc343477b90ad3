"""Run the runtime companion's tests under several torch versions, one virtual environment each.

    python3 -m venv /tmp/venv-214
    /tmp/venv-214/bin/pip install torch==2.14.1 numpy pytest pytest-asyncio hypothesis click libcst
    python3 benchmarks/torch_versions.py --current /tmp/venv-214 /tmp/venv-215

The companion patches torch internals (docs/runtime.md, "Supported torch versions"), so each
torch release it claims is tested here; CI runs only the README's torch, as the other wheels
are several GB. An environment needs torch and the test dependencies, not ckptlint: the tests
run from this checkout through PYTHONPATH (`pip install -e .[test]` would replace its torch).
`--current` adds the interpreter running this script. Environments run one after another;
prints a pass/fail table and exits 1 when any environment failed or could not run.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS = ("tests/test_runtime.py", "tests/test_runtime_confirm.py", "tests/test_runtime_witness.py")
OUTCOMES = ("passed", "failed", "errors", "skipped")
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)")


def interpreter(path: str) -> str:
    """A venv directory or a python executable."""
    candidate = Path(path)
    if candidate.is_dir():
        candidate = candidate / "bin" / "python"
    return str(candidate)


def torch_version(python: str, env: dict[str, str]) -> str | None:
    try:
        done = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True, env=env, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def run_tests(python: str, tests: list[str], env: dict[str, str], timeout: float) -> tuple[dict[str, int], str, float]:
    """Counts of pytest's closing line, the output's tail and the seconds taken."""
    start = time.monotonic()
    try:
        done = subprocess.run(
            [python, "-m", "pytest", *tests, "-q", "-p", "no:cacheprovider"],
            cwd=REPO,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired as expired:
        output = f"timed out after {timeout:.0f}s\n{expired.stdout or ''}"
    seconds = time.monotonic() - start
    counts = dict.fromkeys(OUTCOMES, 0)
    closing = [line for line in output.splitlines() if _COUNT.search(line) and " in " in line]
    for number, outcome in _COUNT.findall(closing[-1] if closing else ""):
        key = "errors" if outcome.startswith("error") else outcome
        if key in counts:
            counts[key] = int(number)
    return counts, "\n".join(output.splitlines()[-15:]), seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("environments", nargs="*", help="virtual environment directories or python executables")
    parser.add_argument("--current", action="store_true", help="also run under the interpreter running this script")
    parser.add_argument("--tests", nargs="+", default=list(TESTS), help="test files (default: the runtime tests)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per environment")
    options = parser.parse_args()
    pythons = ([sys.executable] if options.current else []) + [interpreter(p) for p in options.environments]
    if not pythons:
        parser.error("give virtual environments, or --current")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    rows, failures = [], []
    for python in pythons:
        version = torch_version(python, env)
        if version is None:
            rows.append((python, "-", "", "", "", "", "", "no torch"))
            failures.append((python, f"{python} cannot import torch"))
            continue
        print(f"torch {version} ({python}) ...", file=sys.stderr, flush=True)
        counts, tail, seconds = run_tests(python, options.tests, env, options.timeout)
        ok = counts["passed"] > 0 and counts["failed"] == 0 and counts["errors"] == 0
        rows.append((python, version, *(str(counts[o]) for o in OUTCOMES), f"{seconds:.0f}", "pass" if ok else "FAIL"))
        if not ok:
            failures.append((python, tail))
    header = ("python", "torch", *OUTCOMES, "seconds", "result")
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())
    for python, tail in failures:
        print(f"\n--- {python}\n{tail}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
