"""A longer fuzz run than CI's: `python benchmarks/fuzz.py [EXAMPLES]` (default 2000 per test).

Runs tests/test_fuzz.py with CKPTLINT_FUZZ_EXAMPLES set; hypothesis prints the smallest
program that crashes the linter, if any.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

if __name__ == "__main__":
    examples = sys.argv[1] if len(sys.argv) > 1 else "2000"
    tests = Path(__file__).resolve().parent.parent / "tests" / "test_fuzz.py"
    environment = {**os.environ, "CKPTLINT_FUZZ_EXAMPLES": examples}
    sys.exit(subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)], env=environment))
