"""The real-model truth corpus: how well ckptlint's static analysis predicts what checkpointing
really changes in real model code (issue 11, point 4).

Real libraries' models (transformers, timm, diffusers, mmpretrain; pinned in realmodels/pins.py) are built
tiny with random weights (no download), checkpointing is enabled, and one training step runs
under `ckptlint.runtime.audit(sample="all")` in both `use_reentrant` modes: that is the truth
(every call, not the first per site: transformers makes all its layers' calls from one line).
A static lint of the same installed source is then joined with it, call site by call site.

    # 1. a venv that shares the system torch (never installs another) with the pinned libraries
    python benchmarks/real_models.py setup /tmp/venv-rm
    # 2. the runtime pass (slow, cached in OUT/runtime.jsonl; rerun to resume; --limit 3 to debug)
    python benchmarks/real_models.py runtime --venv /tmp/venv-rm --out /tmp/real_models
    # 3. the static pass with any ckptlint checkout, and the report (fast; rerun after each change)
    python benchmarks/real_models.py report --venv /tmp/venv-rm --out /tmp/real_models \\
        --ckptlint-src /work/main --json /tmp/real_models/report.json

(`static` alone writes OUT/static-<commit>.json; `report --static FILE` reuses one.)

The figures, per library and overall:
- models: architectures tried, run (a checkpoint call observed in at least one mode), failed
  by stage and reason (build, enable, run, no checkpoint call, timeout, crash, skipped).
- call sites exercised: distinct (file, line) of checkpoint calls the runtime observed.
- divergences: distinct (call site, region, category) the runtime saw differ, by category
  (output, grads, buffers, rng, side effects, error).
- recall: divergences some static finding explains (runtime/join.py's matching: the finding's
  code can predict that category and lies in code the replay ran, or at the call) / all, over
  the divergences seen in the mode the library selects by default (pins.DEFAULT_MODE: the mode
  the static pass reads its source in). Divergences seen only when the step opts into the
  other mode are counted and listed apart.
- precision (strict): static findings on exercised call sites (a checkpoint site the finding
  names ran) are confirmed (a matching divergence), contradicted (their code ran and nothing they
  predict differed), for another configuration (the configuration built another class than the
  `for X built by Y` the message states, or left the tensor None: false for this model) or
  unverified ("code not run by this configuration": the line never ran in a replayed region;
  "needs a GPU": CKP205/CKP504 on a CPU-only run). precision = confirmed / (confirmed +
  contradicted + for another configuration); unverified findings are counted and listed apart.
- the list of every miss (a divergence no finding explains) and every contradicted finding:
  what the analysis work is driven by.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from realmodels import pins, report, runtime_pass, static_pass  # noqa: E402

REPO = os.path.dirname(HERE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    setup = commands.add_parser("setup", help="create the venv and install the pinned libraries")
    setup.add_argument("venv")
    for name in ("runtime", "static", "report"):
        command = commands.add_parser(name)
        command.add_argument("--venv", default="/tmp/venv-rm")
        command.add_argument("--out", default="/tmp/real_models", help="cache and results directory")
    runtime = commands.choices["runtime"]
    runtime.add_argument("--libraries", nargs="*", default=list(pins.LIBRARIES))
    runtime.add_argument("--limit", type=int, help="at most N models per library (debugging)")
    runtime.add_argument("--only", nargs="*", default=[], help="these model names only")
    runtime.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    runtime.add_argument("--timeout", type=float, default=300, help="seconds per model, both modes")
    runtime.add_argument("--force", action="store_true", help="rerun models already cached")
    runtime.add_argument("--retry-failed", action="store_true", help="rerun cached models that were not run (after fixing an adapter)")
    runtime.add_argument("--ckptlint-src", default=REPO, help="the ckptlint whose runtime companion records")
    for name in ("static", "report"):
        commands.choices[name].add_argument("--ckptlint-src", default=REPO, help="the ckptlint checkout whose linter runs")
    commands.choices["report"].add_argument("--static", help="reuse this static pass JSON instead of linting")
    commands.choices["report"].add_argument("--json", help="write the full result here")
    commands.choices["report"].add_argument("--text", help="write the report text here too")
    args = parser.parse_args(argv)

    if args.command == "setup":
        return pins.setup(args.venv, HERE)
    if args.command == "runtime":
        return runtime_pass.run(args.venv, args.out, HERE, os.path.abspath(args.ckptlint_src), args.libraries, args.limit,
                                args.only, args.jobs, args.timeout, args.force, args.retry_failed)  # fmt: skip
    sys.path.insert(0, os.path.abspath(args.ckptlint_src))  # its join rules judge the findings it made
    libraries = _libraries(args.out)
    if not libraries:
        print(f"no runtime results in {args.out}: run the runtime pass first", file=sys.stderr)
        return 2
    if args.command == "static" or not args.static:
        commit = static_pass._commit(args.ckptlint_src)
        static_path = os.path.join(args.out, f"static-{commit}.json")
        static = static_pass.run(args.venv, args.ckptlint_src, libraries, static_path)
        print(f"static pass written to {static_path}")
        if args.command == "static":
            return 0
    else:
        with open(args.static, encoding="utf-8") as handle:
            static = json.load(handle)
    result = report.build(args.out, libraries, static)
    text = report.render(result)
    print(text)
    if args.text:
        with open(args.text, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=1)
    return 0


def _libraries(out: str) -> dict[str, dict[str, str]]:
    path = os.path.join(out, "libraries.json")
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as handle:
        data: dict[str, dict[str, str]] = json.load(handle)
    return data


if __name__ == "__main__":
    sys.exit(main())
