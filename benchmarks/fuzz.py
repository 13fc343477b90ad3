"""A longer fuzz run than CI's: `python benchmarks/fuzz.py [EXAMPLES]` (default 2000 per test).

Runs tests/test_fuzz.py (nothing the linter reads crashes it) and
tests/test_cache_differential.py (a warm run reports what a cold run does) with
CKPTLINT_FUZZ_EXAMPLES set; hypothesis prints the smallest failing case, if any.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = ("test_fuzz.py", "test_cache_differential.py")

if __name__ == "__main__":
    examples = sys.argv[1] if len(sys.argv) > 1 else "2000"
    if not examples.isdigit():
        sys.exit(__doc__)
    folder = Path(__file__).resolve().parent.parent / "tests"
    environment = {**os.environ, "CKPTLINT_FUZZ_EXAMPLES": examples}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *(str(folder / name) for name in TESTS)]
    sys.exit(subprocess.call(command, env=environment))
