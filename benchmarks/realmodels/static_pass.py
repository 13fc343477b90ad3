"""The static pass: lint each library's installed source with any ckptlint checkout.

`python -m ckptlint DIR --format json --no-cache --select CKP --exclude __pycache__`, run by the
venv's python (so that whatever the linter resolves in installed packages is the same
environment the runtime pass ran in) with `PYTHONPATH=--ckptlint-src`, from inside DIR.
`--exclude` replaces the default excludes, which name `site-packages`. Paths come out relative
to the working directory; they are made absolute and real here, as the runtime's are.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

from realmodels.pins import venv_python


def lint_library(venv: str, ckptlint_src: str, directory: str) -> dict[str, Any]:
    started = time.time()
    done = subprocess.run(
        [venv_python(venv), "-m", "ckptlint", ".", "--format", "json", "--no-cache", "--select", "CKP", "--exclude", "__pycache__"],
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
    """Lint every library the runtime pass recorded; write and return {library: lint JSON}."""
    result: dict[str, Any] = {"ckptlint_src": os.path.abspath(ckptlint_src), "commit": _commit(ckptlint_src), "libraries": {}}
    for library, meta in sorted(libraries.items()):
        if not os.path.isdir(meta["dir"]):
            print(f"{library}: {meta['dir']} is gone; skipped")
            continue
        data = lint_library(venv, ckptlint_src, meta["dir"])
        result["libraries"][library] = data
        print(f"{library}: {len(data['findings'])} finding(s) in {data['files_checked'] if isinstance(data['files_checked'], int) else len(data['files_checked'])} file(s), {data['seconds']} s", flush=True)
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    return result


def _commit(ckptlint_src: str) -> str:
    done = subprocess.run(["git", "-C", ckptlint_src, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "?"
