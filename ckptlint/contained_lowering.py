"""Rewrite newer syntax (newer_syntax.lower) where a crash of libcst's native parser costs one file.

libcst's parser is native code: a text nested deeply enough overflows the machine stack and
the process dies with SIGSEGV (1,500 nested brackets did, killing the whole run with no
output), and where it is quadratic a text can take minutes or gigabytes (10,000 unary
minuses: 5.5 GB). So before libcst sees a text `ast` rejected, nesting.py measures it:

- brackets nested past CPython's limit: no Python reads the text; `TooDeep`, never parsed;
- nothing that could overflow a stack (the common case): lowered here, in this process;
- otherwise: lowered in a child process with a memory limit and a timeout, so that a crash,
  a runaway or an exhausted memory is `Crashed`, one file's CKP000, and the run goes on.
  The child costs about 0.16 s more than lowering here (an interpreter, libcst), only for
  such texts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

from ckptlint.finding import Finding
from ckptlint.nesting import MAX_BRACKET_DEPTH, Nesting, measure

# bytes of address space the child may take (Unix): libcst took 2.3 GB for a 5.3 MB file,
# 5.5 GB for 10,000 unary minuses (10 KB)
CHILD_MEMORY_BASE = 2 << 30
CHILD_MEMORY_PER_CHARACTER = 1024
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The child imports this very copy of ckptlint (its package directory then finds the rest),
# and nothing else from that folder; -P: nothing from the working directory (the linted project).
_CHILD = (
    f"import sys; sys.path.insert(0, {_PACKAGE_PARENT!r}); import ckptlint; del sys.path[0]; "
    "from ckptlint.contained_lowering import child_main; child_main()"
)


@dataclass(frozen=True)
class TooDeep:
    """The bracket that opens past MAX_BRACKET_DEPTH levels."""

    line: int
    column: int

    @property
    def message(self) -> str:
        return (
            f"cannot parse file: brackets nested more than {MAX_BRACKET_DEPTH} levels deep, the limit "
            f"of every Python version's parser (level {MAX_BRACKET_DEPTH + 1} opens here)"
        )


@dataclass(frozen=True)
class Crashed:
    """libcst's parser did not come back from the text (in the child process)."""

    how: str  # "crashed (SIGSEGV)", "ran out of memory", "took longer than 30 s"
    nesting: Nesting

    @property
    def message(self) -> str:
        where = self.nesting.longest_line
        return (
            f"libcst's parser, which reads newer Python, {self.how} on this file "
            f"(its longest statement, at line {where}, is {self.nesting.longest:,} tokens long)"
        )


TIMED_OUT = "took longer than"  # how a timeout is told: it says more about the machine's load than the file


def is_transient(finding: Finding | None) -> bool:
    """Whether a CKP000 is a timeout of the child parser, which a less busy machine may not
    hit: it is reported, never cached (engine/reuse.py)."""
    return finding is not None and finding.code == "CKP000" and f"{TIMED_OUT} " in finding.summary and "libcst's parser" in finding.summary


def lower_contained(text: str) -> str | None | TooDeep | Crashed:
    """`newer_syntax.lower(text)` (the rewritten text, or None when libcst rejects it too),
    or why it was not run to the end."""
    nesting = measure(text)
    if nesting.too_deep is not None:
        return TooDeep(*nesting.too_deep)
    if nesting.safe_in_process:
        return lower_here(text)
    return _lower_in_child(text, nesting)


def lower_here(text: str) -> str | None:
    """`newer_syntax.lower` in this process (None also for a shape the rewriting did not foresee)."""
    from ckptlint.newer_syntax import lower  # imports libcst: a quarter of a second

    try:
        return lower(text)
    except (ValueError, IndexError, KeyError):
        return None


def child_timeout(text: str) -> float:
    """Seconds the child may take: 3,000 chained subscripts (12 KB) took 20 s, a 5.3 MB file
    30 s (on a busy machine), where this gives 30 s and 180 s."""
    return 30.0 + len(text) / 35_000


def child_memory(text: str) -> int:
    return CHILD_MEMORY_BASE + CHILD_MEMORY_PER_CHARACTER * len(text)


def _lower_in_child(text: str, nesting: Nesting) -> str | None | Crashed:
    timeout, memory = child_timeout(text), child_memory(text)
    try:
        completed = subprocess.run(
            [sys.executable, "-P", "-c", _CHILD, str(memory), str(sys.getrecursionlimit())],
            input=text.encode("utf-8", "surrogatepass"),
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Crashed(f"{TIMED_OUT} {timeout:.0f} s", nesting)
    if completed.returncode == 0:
        answer = json.loads(completed.stdout)
        if "failed" in answer:
            return Crashed(answer["failed"], nesting)
        lowered: str | None = answer["lowered"]
        return lowered
    error = completed.stderr.decode("utf-8", "replace").strip()
    if completed.returncode < 0:
        try:
            name = signal.Signals(-completed.returncode).name
        except ValueError:
            name = f"signal {-completed.returncode}"
        if "memory allocation of" in error:  # Rust's message before it aborts
            return Crashed(f"ran out of memory ({memory / (1 << 30):.1f} GiB; {name})", nesting)
        return Crashed(f"crashed ({name})", nesting)
    if error.startswith("Traceback"):  # a Python exception: an internal error, as it would be here
        raise RuntimeError(f"rewriting newer syntax in a child process: {error.splitlines()[-1]}")
    return Crashed(f"crashed (exit status {completed.returncode})", nesting)


def child_main() -> None:
    """The child's side: the text on stdin, `{"lowered": text or null}` (or `{"failed": why}`) on stdout."""
    _limit_resources(int(sys.argv[1]))
    sys.setrecursionlimit(int(sys.argv[2]))  # the parent's: libcst's code generator recurses in Python
    text = sys.stdin.buffer.read().decode("utf-8", "surrogatepass")
    try:
        answer: dict[str, str | None] = {"lowered": lower_here(text)}
    except MemoryError:
        answer = {"failed": f"ran out of memory ({int(sys.argv[1]) / (1 << 30):.1f} GiB)"}
    sys.stdout.write(json.dumps(answer))


def _limit_resources(memory: int) -> None:
    """At most `memory` bytes of address space, and no core file (a crash would leave one in
    the linted project)."""
    try:
        import resource
    except ImportError:  # Windows: no limits
        return
    for kind, limit in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_CORE, 0)):
        _, hard = resource.getrlimit(kind)
        try:
            resource.setrlimit(kind, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
        except (ValueError, OSError):  # not enforced here (macOS: address space)
            pass
