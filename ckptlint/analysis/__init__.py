"""The analysis: what a checkpoint call replays and how the code around it uses it.

Six packages, stacked; a package imports only packages below it (tests/test_architecture.py):

- `knowledge/` (layer 0): what torch, NumPy, aten and c10d do, as data.
- `flow/` (layer 1): what one function's own lines say: reaching bindings, grad-off and
  eval-only lines, integer tensors, where indices and sums go.
- `semantics/` (layer 2): what an expression is across the project: types, abstract values,
  how model zoos build modules, who calls a function.
- `contexts/` (layer 3): how each checkpoint call runs (compile, SAC, offload) and what that
  does to a finding.
- `regions/` (layer 4): what the replay does twice or differently (CKP2xx, 306, 401/402, 501, 504).
- `usage/` (layer 4): how the code around a checkpoint uses it (CKP301-305, 403-405, 502/503/505).
  `regions/` and `usage/` never import each other.

`session.py` (layer 5) builds and owns one run's analyses. Every face here imports nothing, so a
rule that reads `regions/summary.py` or `usage/facts.py` loads no evaluator.
"""
