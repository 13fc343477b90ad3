"""Property: for random small training steps (layer sizes, dropout, BatchNorm, how the
region is checkpointed, which of torch/Python/NumPy/a NumPy Generator it draws from and
where, a list argument appended to, a `nonlocal` counter, a list attribute), in every
`use_reentrant` mode, the step's results are bit-identical with and without the companion
(parameters, buffers, `.grad`, loss, RNG streams and side effects after the step), and
its verdict names exactly what checkpointing changes in the step.

Bounded here; `python benchmarks/runtime_transparency.py N` runs the same strategy longer
and counts. CKPTLINT_TRANSPARENCY_EXAMPLES raises the bound for one pytest run.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings

from fixtures.runtime import generated

EXAMPLES = int(os.environ.get("CKPTLINT_TRANSPARENCY_EXAMPLES", "25"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(generated.specs())
def test_random_steps_are_unchanged_by_the_companion_and_judged_right(spec: generated.Spec) -> None:
    for mode in spec.modes():
        evaluation = generated.evaluate(spec, mode)
        assert evaluation.transparent, evaluation.describe()
        assert evaluation.verdict_right, evaluation.describe()
