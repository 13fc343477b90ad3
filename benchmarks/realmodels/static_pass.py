"""The static pass: lint each library's installed source with any ckptlint checkout.

`python -m ckptlint DIR --format json --no-cache --select CKP --exclude __pycache__`, run by the
venv's python (so that whatever the linter resolves in installed packages is the same
environment the runtime pass ran in) with `PYTHONPATH=--ckptlint-src`, from inside DIR.
`--exclude` replaces the default excludes, which name `site-packages`. Paths come out relative
to the working directory; they are made absolute and real here, as the runtime's are.

Two passes: each library in its default mode, and with `library-modes` switching every
library to reentrant (the mode the runtime's opt-in step runs); each runtime mode is joined
with its own pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from typing import Any

from realmodels.pins import venv_python


# the opt-in pass: every library's own switch set to reentrant, as the runtime's opt-in step does
# (zoo_*.py: gradient_checkpointing_kwargs, a reentrant partial, set_reentrant_ckpt)
REENTRANT_CONFIG = '[tool.ckptlint]\nlibrary-modes = { transformers = "reentrant", diffusers = "reentrant", timm = "reentrant" }\n'
PASSES = ("default", "reentrant")  # the static pass of each runtime mode: pins.DEFAULT_MODE, and the opt-in one


def lint_library(venv: str, ckptlint_src: str, directory: str, config: str | None = None) -> dict[str, Any]:
    started = time.time()
    extra = ["--config", config] if config else []
    done = subprocess.run(
        [venv_python(venv), "-m", "ckptlint", ".", "--format", "json", "--no-cache", "--select", "CKP", "--exclude", "__pycache__", *extra],
        cwd=directory, env={**os.environ, "PYTHONPATH": os.path.abspath(ckptlint_src)}, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode not in (0, 1) and not done.stdout.strip():
        raise RuntimeError(f"ckptlint failed on {directory} (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    data = json.loads(done.stdout)
    for finding in data["findings"]:
        finding["path"] = absolute(directory, finding["path"])
        for site in finding.get("checkpoint_sites", ()):
            site["path"] = absolute(directory, site["path"])
    data["seconds"] = round(time.time() - started, 1)
    return data


def absolute(base: str, path: str) -> str:
    return os.path.realpath(os.path.join(base, path))


def run(venv: str, ckptlint_src: str, libraries: dict[str, dict[str, Any]], out_path: str) -> dict[str, Any]:
    """Lint every library the runtime pass recorded, once per pass (PASSES); write and return
    {"passes": {pass: {library: lint JSON}}, "libraries": the default pass's}."""
    result: dict[str, Any] = {"ckptlint_src": os.path.abspath(ckptlint_src), "commit": _commit(ckptlint_src), "passes": {}}
    with tempfile.TemporaryDirectory() as scratch:
        reentrant = os.path.join(scratch, "pyproject.toml")
        with open(reentrant, "w", encoding="utf-8") as handle:
            handle.write(REENTRANT_CONFIG)
        for name in PASSES:
            found = result["passes"][name] = {}
            for library, meta in sorted(libraries.items()):
                if not os.path.isdir(meta["dir"]):
                    print(f"{library}: {meta['dir']} is gone; skipped")
                    continue
                data = lint_library(venv, ckptlint_src, meta["dir"], reentrant if name == "reentrant" else None)
                found[library] = data
                files = data["files_checked"] if isinstance(data["files_checked"], int) else len(data["files_checked"])
                print(f"{library} ({name} pass): {len(data['findings'])} finding(s) in {files} file(s), {data['seconds']} s", flush=True)
    result["libraries"] = result["passes"]["default"]
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    return result


def _commit(ckptlint_src: str) -> str:
    done = subprocess.run(["git", "-C", ckptlint_src, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "?"
