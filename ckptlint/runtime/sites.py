"""`Site`: a place in the user's code (a checkpoint call, a DistributedDataParallel built), as
intercept.py finds it and ddp.py and differentiation.py record it; here, below them all, so
that ddp.py need not import intercept.py, which imports ddp.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Site:
    path: str
    line: int
    column: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "column": self.column}
