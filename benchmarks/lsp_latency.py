"""How soon `ckptlint lsp` publishes diagnostics for a file it has just been sent, cold and warm.

    python benchmarks/lsp_latency.py [--file FILE] [--workspace DIR] [--code LABEL=PATH ...]

Drives `python -m ckptlint lsp` over stdio with raw JSON-RPC, as an editor would: initialize
(announcing work-done progress support), initialized, didOpen FILE, and at once a hover on
it. Measured from the didOpen:

- first: the first publishDiagnostics for FILE;
- refined: the project-wide diagnostics, i.e. the last publish before the project scan's
  `$/progress` end (a server that shows no progress publishes once: first = refined);
- hover: how long the hover sent right after didOpen waited for its answer.

With `--scratch`, one more server runs on the warm cache after a module (`x = 1`) was written
beside FILE (and is removed after): the project scan an editor's new scratch file sets off.

Each `--code` is a checkout whose server is run (PYTHONPATH=PATH), e.g. `before=/work/main
after=.`; for each, a fresh cache directory (CKPTLINT_CACHE_DIR) is linted cold, then warm
by a second server on the same cache. Default FILE: transformers' modeling_llama.py, in a
workspace that is the transformers package (a wheel unpacked: `pip download --no-deps
transformers==5.24.0` and unzip). Machines are noisy; run it on an idle one.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

TRANSFORMERS = Path("/tmp/corpus/tf/transformers")
QUIET_AFTER_FIRST = 3.0  # seconds: a server that starts no progress by then publishes only once


@dataclass
class Timing:
    code: str
    cache: str  # cold or warm
    initialize: float  # seconds from start to the initialize reply
    first: float  # from didOpen to the first diagnostics
    first_count: int
    refined: float | None  # None: not within the timeout
    refined_count: int
    hover: float | None
    log: str  # the server's log line naming the project root, if any


class Server:
    """A `ckptlint lsp` process and the messages it sends, read on a thread."""

    def __init__(self, pythonpath: Path, cache: Path, cwd: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(pythonpath), "CKPTLINT_CACHE_DIR": str(cache)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ckptlint", "lsp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=cwd,
            env=env,
        )
        self.messages: queue.Queue[tuple[float, dict[str, Any]]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def send(self, message: dict[str, Any]) -> float:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()
        return time.perf_counter()

    def next(self, deadline: float) -> tuple[float, dict[str, Any]] | None:
        """The next message and when it arrived; None once `deadline` has passed."""
        try:
            return self.messages.get(timeout=max(0.0, deadline - time.perf_counter()))
        except queue.Empty:
            return None

    def _read(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        while True:
            length = None
            while (header := stream.readline()) not in (b"\r\n", b""):
                if header.lower().startswith(b"content-length:"):
                    length = int(header.split(b":")[1])
            if length is None:
                return
            message = json.loads(stream.read(length))
            self.messages.put((time.perf_counter(), message))

    def close(self) -> None:
        try:
            self.send({"id": 999, "method": "shutdown"})
            self.send({"method": "exit"})
            self.process.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()


def measure(label: str, pythonpath: Path, cache: Path, kind: str, file: Path, workspace: Path, timeout: float) -> Timing:
    start = time.perf_counter()
    server = Server(pythonpath, cache, workspace)
    deadline = start + timeout
    uri = file.as_uri()
    try:
        capabilities = {"window": {"workDoneProgress": True}, "general": {"positionEncodings": ["utf-16"]}}
        server.send({"id": 1, "method": "initialize", "params": {"processId": os.getpid(), "rootUri": workspace.as_uri(), "capabilities": capabilities}})
        initialized = hover_answered = first = refined = None
        first_count = refined_count = 0
        last_publish: tuple[float, int] | None = None
        progress_seen = False
        log = ""
        opened = 0.0
        while True:
            wait_until = deadline
            if first is not None and not progress_seen:
                wait_until = min(deadline, first + QUIET_AFTER_FIRST)
            got = server.next(wait_until)
            if got is None:
                if first is not None and not progress_seen and time.perf_counter() < deadline:
                    refined, refined_count = first, first_count  # no project scan of its own
                if first is None:
                    raise SystemExit(f"{label} {kind}: no diagnostics within {timeout:.0f} s")
                break
            at, message = got
            method = message.get("method")
            if message.get("id") == 1 and method is None:
                initialized = at
                server.send({"method": "initialized", "params": {}})
                document = {"uri": uri, "languageId": "python", "version": 1, "text": file.read_text(encoding="utf-8")}
                opened = server.send({"method": "textDocument/didOpen", "params": {"textDocument": document}})
                position = {"line": 0, "character": 0}
                server.send({"id": 2, "method": "textDocument/hover", "params": {"textDocument": {"uri": uri}, "position": position}})
            elif message.get("id") == 2 and method is None:
                hover_answered = at
            elif method is not None and "id" in message:  # the server's request (progress create): accept it
                progress_seen = progress_seen or method == "window/workDoneProgress/create"
                server.send({"id": message["id"], "result": None})
            elif method == "textDocument/publishDiagnostics" and message["params"]["uri"] == uri:
                count = len(message["params"]["diagnostics"])
                if first is None:
                    first, first_count = at, count
                last_publish = (at, count)
            elif method == "$/progress":
                progress_seen = True
                if message["params"]["value"].get("kind") == "end" and last_publish is not None and first is not None:
                    refined, refined_count = last_publish
                    break
            elif method == "window/logMessage" and "project root" in message["params"]["message"]:
                log = message["params"]["message"]
        while hover_answered is None:  # a server that blocks answers the hover after the lint
            got = server.next(deadline)
            if got is None:
                break
            if got[1].get("id") == 2 and "method" not in got[1]:
                hover_answered = got[0]
        assert initialized is not None and first is not None
        return Timing(
            label,
            kind,
            initialized - start,
            first - opened,
            first_count,
            None if refined is None else refined - opened,
            refined_count,
            None if hover_answered is None else hover_answered - opened,
            log,
        )
    finally:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, default=TRANSFORMERS / "models" / "llama" / "modeling_llama.py")
    parser.add_argument("--workspace", type=Path, help="the folder the editor opened (default: FILE's top package)")
    parser.add_argument("--code", nargs="+", default=[f"this={Path(__file__).resolve().parents[1]}"], metavar="LABEL=PATH")
    parser.add_argument("--runs", type=int, default=2, help="servers per cache: the first cold, the rest warm")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per server")
    parser.add_argument("--json", action="store_true", help="print the timings as JSON")
    parser.add_argument(
        "--scratch",
        action="store_true",
        help="then a server on the warm cache after a scratch module (`x = 1`) appeared beside FILE, as an editor's new file does",
    )
    args = parser.parse_args()
    file = args.file.resolve()
    if not file.is_file():
        sys.exit(f"{file} not found (see the docstring for getting transformers)")
    workspace = (args.workspace or _top_package(file)).resolve()
    timings: list[Timing] = []
    for item in args.code:
        label, _, path = item.partition("=")
        cache = Path(tempfile.mkdtemp(prefix="ckptlint-lsp-bench-"))
        try:
            for run in range(args.runs):
                timing = measure(label, Path(path).resolve(), cache, "cold" if run == 0 else "warm", file, workspace, args.timeout)
                timings.append(timing)
                if args.scratch and run == args.runs - 1:
                    if not args.json:
                        print(_row(timing))
                    scratch = file.parent / "scratch_lsp_latency.py"
                    scratch.write_text("x = 1\n")
                    try:
                        timing = measure(label, Path(path).resolve(), cache, "scratch", file, workspace, args.timeout)
                    finally:
                        scratch.unlink()
                    timings.append(timing)
                if not args.json:
                    print(_row(timing), flush=True)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    if args.json:
        print(json.dumps([asdict(t) for t in timings], indent=2))
    else:
        logs = sorted({t.log for t in timings if t.log})
        print(f"file {file}\nworkspace {workspace}" + "".join(f"\nserver log: {line}" for line in logs))


def _top_package(file: Path) -> Path:
    directory = file.parent
    while (directory.parent / "__init__.py").exists():
        directory = directory.parent
    return directory


def _row(t: Timing) -> str:
    return (
        f"{t.code:>8} {t.cache}: initialize {t.initialize:6.2f} s  first diagnostics {t.first:7.2f} s ({t.first_count})"
        f"  refined {_seconds(t.refined)} ({t.refined_count})  hover answered after {_seconds(t.hover)}"
    )


def _seconds(value: float | None) -> str:
    return "  timeout" if value is None else f"{value:7.2f} s"


if __name__ == "__main__":
    main()
