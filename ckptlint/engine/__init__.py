"""The run machinery: discover -> prefilter -> analyse (process pool or cache) -> merge ->
suppress -> select.

`Linter` (linter.py) is the face every front-end uses; `Run` (run.py) is one lint of a set
of files; `worker.py` analyses files in one process; `parallel.py` spreads them over
processes; `cache.py` stores results between runs (a typed entry per file, as JSON) and
`reuse.py` says which of them still hold; `workspace.py` reads files (or editor buffers)
once; `discovery.py` walks paths.
"""

from ckptlint.engine.linter import Linter, lint_source

__all__ = ["Linter", "lint_source"]
