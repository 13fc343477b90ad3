"""The companion's promises over many steps: `python benchmarks/runtime_transparency.py [N]`.

Runs the fixed shapes of fixtures/runtime/shapes.py and N random steps drawn by the
property test's strategy (fixtures/runtime/generated.py; default 500), each in every
`use_reentrant` mode it has, and counts step-modes whose results are bit-identical with
and without the companion, and whose verdict names exactly the aspects checkpointing
changes (the step run without checkpointing is the ground truth). Prints every miss and
exits 1 if there was one. `--seed S` changes hypothesis's draw.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import Phase, given, seed, settings  # noqa: E402 - after the path set-up

from fixtures.runtime import generated, harness, shapes  # noqa: E402


def shape_suite() -> tuple[int, int, int, list[str]]:
    total = transparent = right = 0
    misses = []
    for name, (step, expected) in sorted(shapes.SHAPES.items()):
        for mode, expect in expected.items():
            total += 1
            changed, report = harness.transparency(step, mode)
            aspects = harness.observed_aspects(report)
            truth = harness.ground_truth(step, mode)
            transparent += not changed
            ok = aspects == truth == expect.aspects and {r.verdict for r in report.records} == {expect.verdict}
            right += ok
            if changed or not ok:
                misses.append(f"{name} [{mode}]: changed {changed}; truth {sorted(truth)}, companion {sorted(aspects)}")
    return total, transparent, right, misses


def generated_suite(examples: int, draw_seed: int) -> tuple[int, int, int, list[str]]:
    evaluations: list[generated.Evaluation] = []

    @seed(draw_seed)
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate])
    @given(generated.specs())
    def record(spec: generated.Spec) -> None:
        for mode in spec.modes():
            evaluations.append(generated.evaluate(spec, mode))

    record()
    misses = [e.describe() for e in evaluations if not (e.transparent and e.verdict_right)]
    return len(evaluations), sum(e.transparent for e in evaluations), sum(e.verdict_right for e in evaluations), misses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("examples", nargs="?", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()
    failed = False
    for title, run in (
        ("shapes", shape_suite),
        (f"generated ({options.examples} examples)", lambda: generated_suite(options.examples, options.seed)),
    ):
        start = time.perf_counter()
        total, transparent, right, misses = run()
        elapsed = time.perf_counter() - start
        print(f"{title}: {total} step-modes, {transparent} bit-identical with the companion, {right} verdicts right ({elapsed:.1f}s)")
        for miss in misses:
            print("  MISS", miss)
        failed |= bool(misses)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
