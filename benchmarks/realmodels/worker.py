"""The corpus worker: runs inside the corpus venv, one process for many models.

    python -m realmodels.worker check
    python -m realmodels.worker enumerate LIBRARY OUT.json
    python -m realmodels.worker run TASKS.json EVENTS.jsonl

`run` writes a `start` event before each model and a `result` event after it (flushed), so the
parent can tell which model hung or crashed the process and go on without it.

The companion treats installed packages as library code (it neither traces them nor reads
their globals); here the libraries under test are the user's code, so the worker narrows
`ckptlint.runtime.reach._LIBRARY_DIRS` to torch, the standard library and every *other*
installed package. A user auditing a model that lives in site-packages would need the same.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import sysconfig
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")

import torch  # noqa: E402

from realmodels.zoo_common import (  # noqa: E402
    LineCoverage,
    describe_error,
    error_kind,
    loss_of,
    torchvision_without_native_ops,
)

ADAPTERS = {"transformers": "realmodels.zoo_transformers", "timm": "realmodels.zoo_timm", "diffusers": "realmodels.zoo_diffusers",
            "mmpretrain": "realmodels.zoo_mmpretrain"}  # fmt: skip
MODES = {"reentrant": True, "non-reentrant": False}
MAX_STACK = 3
# every call, not the first per site: transformers makes every layer's checkpoint call from one
# line (GradientCheckpointingLayer.__call__), so "first" would replay only a model's first layer
# class (never a seq2seq decoder's). The models are tiny (about 2 layers per stack).
SAMPLE = "all"


def library_dir(library: str) -> str:
    module = importlib.import_module(library)
    return os.path.realpath(os.path.dirname(module.__file__ or ""))


def library_version(library: str) -> str:
    return str(getattr(importlib.import_module(library), "__version__", "?"))


def treat_as_user_code(libraries: list[str]) -> None:
    """Narrow the companion's idea of library code so the libraries under test are traced."""
    import ckptlint.runtime.reach as reach

    tested = {os.path.join(library_dir(name), "") for name in libraries}
    others = {os.path.dirname(torch.__file__), sysconfig.get_paths()["stdlib"]}
    for entry in sys.path:
        if os.path.basename(entry) not in ("site-packages", "dist-packages") or not os.path.isdir(entry):
            continue
        for child in os.listdir(entry):
            path = os.path.join(os.path.realpath(entry), child)
            candidate = os.path.join(path, "") if os.path.isdir(path) else path
            if candidate not in tested:
                others.add(candidate)
    reach._LIBRARY_DIRS = tuple(sorted(others))


def serialise(record: Any, directories: tuple[str, ...]) -> dict[str, Any]:
    data = record.to_dict()
    for reason in data.get("reasons", ()):
        if "stack" in reason:
            reason["stack"] = list(reason["stack"])[:MAX_STACK]
    data["executed"] = sorted([file, first, last] for file, first, last in record.executed if file.startswith(directories))
    data["module_lines"] = {name: [list(span) for span in spans] for name, spans in record.module_lines.items()}
    return data


def run_mode(adapter: Any, name: str, reentrant: bool, directories: tuple[str, ...], coverage: LineCoverage | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """One fresh build and one training step under audit; (outcome, facts about the build)."""
    import ckptlint.runtime as runtime

    started = time.time()
    torch.manual_seed(0)
    try:
        built = adapter.build(name)
    except Exception as exc:  # noqa: BLE001 - recorded, the survey goes on
        return {"status": "build-failed", "reason": error_kind(exc), "error": describe_error(exc), "seconds": round(time.time() - started, 2)}, {}
    facts = {"arch": built.arch, "variant": built.variant, **built.extra}
    try:
        built.enable(reentrant)
        built.model.train()
        torch.manual_seed(1)
        inputs = built.inputs()
    except Exception as exc:  # noqa: BLE001
        return {"status": "enable-failed", "reason": error_kind(exc), "error": describe_error(exc), "seconds": round(time.time() - started, 2)}, facts
    error: BaseException | None = None
    with runtime.audit(sample=SAMPLE, witness=False) as report:
        try:
            with coverage if coverage is not None else contextlib.nullcontext():
                loss_of(built.model(**inputs)).backward()
        except Exception as exc:  # noqa: BLE001
            error = exc
    records = [serialise(record, directories) for record in report.records]
    outcome: dict[str, Any] = {"status": "ok", "records": records, "seconds": round(time.time() - started, 2)}
    if error is not None:
        outcome.update(status="run-failed", reason=error_kind(error), error=describe_error(error))
    elif not records:
        outcome["status"] = "no-checkpoint-call"
    return outcome, facts


def run_task(task: dict[str, Any], directories: tuple[str, ...]) -> dict[str, Any]:
    adapter = importlib.import_module(ADAPTERS[task["library"]])
    result: dict[str, Any] = {"key": task["key"], "library": task["library"], "name": task["name"], "modes": {}}
    coverage = LineCoverage(directories)
    for mode, reentrant in MODES.items():
        # lines are collected in the non-reentrant step only: both steps run the same code
        outcome, facts = run_mode(adapter, task["name"], reentrant, directories, coverage if not reentrant else None)
        result["modes"][mode] = outcome
        for key, value in facts.items():
            result.setdefault(key, value)
    result["coverage"] = coverage.to_dict()
    return result


def _write(handle: Any, event: dict[str, Any]) -> None:
    handle.write(json.dumps(event, default=str) + "\n")
    handle.flush()


def run(tasks_path: str, events_path: str) -> int:
    with open(tasks_path, encoding="utf-8") as handle:
        tasks = json.load(handle)
    libraries = sorted({task["library"] for task in tasks})
    torch.set_num_threads(1)
    torchvision_without_native_ops()
    for library in libraries:
        importlib.import_module(library)
    treat_as_user_code(libraries)
    directories = tuple(os.path.join(library_dir(name), "") for name in libraries)
    with open(events_path, "a", encoding="utf-8") as handle:
        for task in tasks:
            _write(handle, {"event": "start", "key": task["key"], "time": time.time()})
            result = run_task(task, directories)
            _write(handle, {"event": "result", **result})
    return 0


def enumerate_library(library: str, out_path: str) -> int:
    torchvision_without_native_ops()
    adapter = importlib.import_module(ADAPTERS[library])
    entries = adapter.enumerate_models()
    data = {"library": library, "version": library_version(library), "dir": library_dir(library), "torch": torch.__version__, "models": entries}
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1)
    return 0


def check() -> int:
    """Every pinned library imports; timm builds resnet18; print versions."""
    torchvision_without_native_ops()
    versions: dict[str, str] = {"torch": str(torch.__version__)}
    failed = 0
    for library in ("transformers", "timm", "diffusers", "mmpretrain", "mmcv", "mmengine", "torchvision"):
        try:
            versions[library] = library_version(library)
        except Exception as exc:  # noqa: BLE001
            versions[library] = f"not importable ({describe_error(exc)})"
            failed = 1
    import timm

    timm.create_model("resnet18", pretrained=False)
    print(json.dumps(versions))
    return failed


def main(argv: list[str]) -> int:
    if argv[:1] == ["check"]:
        return check()
    if argv[:1] == ["enumerate"] and len(argv) == 3:
        return enumerate_library(argv[1], argv[2])
    if argv[:1] == ["run"] and len(argv) == 3:
        return run(argv[1], argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
