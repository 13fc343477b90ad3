"""The runtime pass, parent side: enumerate each library's models (in the venv), then feed
them to worker processes, one model at a time per worker, with a watchdog.

The cache is `OUT/runtime.jsonl`: one `result` line per model (a model already there is not
run again unless `--force`). A model that outlives `--timeout` or kills its worker is recorded
as `timeout` or `crashed`, and a fresh worker carries on with the next one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from typing import Any

from realmodels.pins import LIBRARIES, venv_python

POLL = 1.0


def worker_env(benchmarks_dir: str, ckptlint_src: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([benchmarks_dir, ckptlint_src]), "HF_HUB_OFFLINE": "1",
            "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}  # fmt: skip


def enumerate_models(venv: str, library: str, out_dir: str, env: dict[str, str], refresh: bool = False) -> dict[str, Any] | None:
    """`OUT/models-LIBRARY.json`, made once; None when the library is not installed."""
    path = os.path.join(out_dir, f"models-{library}.json")
    if refresh or not os.path.exists(path):
        done = subprocess.run([venv_python(venv), "-m", "realmodels.worker", "enumerate", library, path], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
        if done.returncode != 0:
            print(f"{library}: cannot enumerate ({done.stderr.strip().splitlines()[-1:] or ['?']})")
            return None
    with open(path, encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data


def cached_results(path: str) -> dict[str, dict[str, Any]]:
    """The last result line per model key."""
    results: dict[str, dict[str, Any]] = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:  # a line cut by a kill
                    continue
                if event.get("event") == "result":
                    results[event["key"]] = event
    return results


class _Shard:
    """One worker's share of the tasks; restarts its worker after a hang or a crash."""

    def __init__(self, number: int, tasks: list[dict[str, Any]], venv: str, out_dir: str, env: dict[str, str], timeout: float, lock: threading.Lock):
        self.number, self.tasks, self.venv, self.out_dir, self.env, self.timeout, self.lock = number, tasks, venv, out_dir, env, timeout, lock
        self.cache = os.path.join(out_dir, "runtime.jsonl")
        self.events = os.path.join(out_dir, f"worker-{number}.events")
        self.log = os.path.join(out_dir, f"worker-{number}.log")

    def run(self) -> None:
        remaining = list(self.tasks)
        while remaining:
            remaining = self._one_worker(remaining)

    def _one_worker(self, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Run a worker over `tasks`; return the tasks it did not reach."""
        tasks_path = os.path.join(self.out_dir, f"worker-{self.number}.tasks.json")
        with open(tasks_path, "w", encoding="utf-8") as handle:
            json.dump(tasks, handle)
        open(self.events, "w").close()
        with open(self.log, "a", encoding="utf-8") as log:
            process = subprocess.Popen([venv_python(self.venv), "-m", "realmodels.worker", "run", tasks_path, self.events],
                                       env=self.env, stdout=log, stderr=log, start_new_session=True)  # fmt: skip
        done: set[str] = set()
        current: tuple[str, float] | None = None
        offset = 0
        while True:
            time.sleep(POLL)
            with open(self.events, encoding="utf-8") as handle:
                handle.seek(offset)
                chunk = handle.read()
            complete = chunk[: chunk.rfind("\n") + 1]
            offset += len(complete.encode("utf-8"))
            for line in complete.splitlines():
                event = json.loads(line)
                if event["event"] == "start":
                    current = (event["key"], time.time())
                elif event["event"] == "result":
                    self._record(event)
                    done.add(event["key"])
                    current = None
            if process.poll() is not None:
                if current is not None:
                    self._record(self._failure(tasks, current[0], "crashed", f"worker exited with {process.returncode}"))
                    done.add(current[0])
                break
            if current is not None and time.time() - current[1] > self.timeout:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                self._record(self._failure(tasks, current[0], "timeout", f"no result after {self.timeout:.0f} s"))
                done.add(current[0])
                break
        return [task for task in tasks if task["key"] not in done]

    def _failure(self, tasks: list[dict[str, Any]], key: str, status: str, error: str) -> dict[str, Any]:
        task = next(task for task in tasks if task["key"] == key)
        outcome = {"status": status, "reason": status, "error": error}
        return {"event": "result", "key": key, "library": task["library"], "name": task["name"], "arch": task.get("arch"),
                "modes": {"reentrant": outcome, "non-reentrant": outcome}, "coverage": {}}  # fmt: skip

    def _record(self, event: dict[str, Any]) -> None:
        modes = ", ".join(f"{mode} {outcome['status']}" for mode, outcome in event["modes"].items())
        with self.lock:
            with open(self.cache, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(event) + "\n")
            print(f"[{self.number}] {event['key']}: {modes}", flush=True)


def run(venv: str, out_dir: str, benchmarks_dir: str, ckptlint_src: str, libraries: list[str], limit: int | None,
        only: list[str], jobs: int, timeout: float, force: bool, retry_failed: bool = False) -> int:  # fmt: skip
    os.makedirs(out_dir, exist_ok=True)
    env = worker_env(benchmarks_dir, ckptlint_src)
    cache = os.path.join(out_dir, "runtime.jsonl")
    done = {} if force else cached_results(cache)
    if retry_failed:  # models with no observed call in either mode run again
        done = {key: result for key, result in done.items() if any(o.get("records") for o in result["modes"].values())}
    tasks: list[dict[str, Any]] = []
    libraries_meta = {}
    for library in libraries or list(LIBRARIES):
        data = enumerate_models(venv, library, out_dir, env)
        if data is None:
            continue
        libraries_meta[library] = {key: data[key] for key in ("version", "dir", "torch")}
        chosen = [m for m in data["models"] if "skip" not in m and (not only or m["name"] in only)]
        if limit is not None:
            chosen = chosen[:limit]
        for model in chosen:
            key = f"{library}/{model['name']}"
            if key not in done:
                tasks.append({"key": key, "library": library, "name": model["name"], "arch": model.get("arch")})
    known = {**_read_json(os.path.join(out_dir, "libraries.json")), **libraries_meta}
    with open(os.path.join(out_dir, "libraries.json"), "w", encoding="utf-8") as handle:
        json.dump(known, handle, indent=1)
    tasks = _interleaved(tasks)
    print(f"{len(tasks)} model(s) to run ({len(done)} cached), {jobs} worker(s)", flush=True)
    lock = threading.Lock()
    shards = [_Shard(number, tasks[number::jobs], venv, out_dir, env, timeout, lock) for number in range(jobs)]
    threads = [threading.Thread(target=shard.run) for shard in shards if shard.tasks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return 0


def _interleaved(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Round-robin over libraries, so that a partial run covers all of them."""
    queues: dict[str, list[dict[str, Any]]] = {}
    for task in tasks:
        queues.setdefault(task["library"], []).append(task)
    ordered = []
    while any(queues.values()):
        for queue in queues.values():
            if queue:
                ordered.append(queue.pop(0))
    return ordered


def _read_json(path: str) -> dict[str, Any]:
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data
