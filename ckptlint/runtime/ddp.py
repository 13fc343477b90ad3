"""DistributedDataParallel around a reentrant region: which DDP holds the region's parameters,
and the user's backward failing with "Expected to mark a variable ready only once".

With `find_unused_parameters=True` DDP walks the forward graph for parameters it will see
gradients for. A reentrant region's parameters are not in that graph (its forward ran under
`no_grad`), so DDP marks them ready as unused; the reentrant backward then produces their
gradients and DDP's hook marks them ready again, and raises (CKP303). Without `find_unused_parameters`, a parameter
reached both inside a reentrant region and outside it fails the same way. A replay cannot show it (it runs the region
outside DDP's forward), so the companion watches the user's own backward: the error is
recorded at the call site whose region failed and re-raised untouched. The companion runs no
collective of its own, so observing never blocks a rank.
"""

from __future__ import annotations

import gc
import weakref
from typing import TYPE_CHECKING, Any

import torch

from ckptlint.runtime.compare import Reason
from ckptlint.runtime.reach import Reachable

if TYPE_CHECKING:
    from ckptlint.runtime.report import Record
    from ckptlint.runtime.sites import Site

DDP_CATEGORY = "ddp"  # the reason's category; also what it confirms, as join reads it (CKP303's `confirmed_by`)
READY_TWICE = "Expected to mark a variable ready only once"
# DDP modules built while the companion is installed -> where (the place CKP303 reports)
CONSTRUCTED: weakref.WeakKeyDictionary[torch.nn.Module, Site | None] = weakref.WeakKeyDictionary()


def is_ddp(module: Any) -> bool:
    if not torch.distributed.is_available():
        return False
    from torch.nn.parallel import DistributedDataParallel

    return isinstance(module, DistributedDataParallel)


def ddp_of(reach: Reachable, search_all: bool = False) -> dict[str, Any] | None:
    """The DDP whose module holds parameters the region reaches: those built while the companion
    was installed, and with `search_all` (only after a failure: it walks the heap) any other."""
    parameters = reach.module_tensors
    if not parameters:
        return None
    candidates: list[Any] = list(CONSTRUCTED.keys())
    if search_all:
        candidates += [obj for obj in gc.get_objects() if is_ddp(obj) and obj not in CONSTRUCTED]
    for ddp in candidates:
        if any(id(p) in parameters for p in ddp.module.parameters()):
            site = CONSTRUCTED.get(ddp)
            return {
                "constructed_at": site.to_dict() if site is not None else None,
                "find_unused_parameters": bool(getattr(ddp, "find_unused_parameters", False)),
                "static_graph": bool(getattr(ddp, "static_graph", False)),
            }
    return None


def replay_would_change_run(ddp: dict[str, Any] | None) -> bool:
    """DDP's reducer records every parameter any backward reaches while it looks for unused ones
    (`find_unused_parameters=True`, or a static graph's first step), a replay's backward
    included: the user's step would then fail or reduce otherwise. Such regions are not
    replayed; their backward is still watched."""
    return ddp is not None and (ddp["find_unused_parameters"] or ddp["static_graph"])


def is_ready_twice(error: BaseException) -> bool:
    return isinstance(error, RuntimeError) and READY_TWICE in str(error)


def ready_twice_reason(error: BaseException, ddp: dict[str, Any] | None) -> dict[str, Any]:
    """The reason, in words that name DDP and what to change."""
    text = str(error).strip()
    first_line = text.splitlines()[0].split(". ")[0] if text else type(error).__name__  # torch's first sentence
    if ddp is not None and ddp["find_unused_parameters"]:
        why = (
            "reentrant checkpoint under DistributedDataParallel(find_unused_parameters=True): DDP marked the "
            "region's parameters unused (they are not in the forward graph), then the reentrant backward "
            "marked them ready again (CKP303)"
        )
    else:
        why = (
            "reentrant checkpoint under DistributedDataParallel: a parameter was marked ready twice, by the "
            "region's reentrant backward and by another pass that reached it (a module called inside the region "
            "and outside it; CKP303)"
        )
    where = ""
    if ddp is not None and ddp["constructed_at"] is not None:
        site = ddp["constructed_at"]
        where = f"; DistributedDataParallel built at {site['path']}:{site['line']}"
    detail = f"the user's backward raised: {first_line}{where}; use_reentrant=False avoids it\n{why}"
    return {**Reason(DDP_CATEGORY, "backward under DistributedDataParallel", detail=detail).to_dict(), "ddp": ddp}


def backward_failed(record: Record, fn: Any, error: BaseException) -> None:
    """Called with the exception the user's backward raised through this record's region."""
    if not is_ready_twice(error) or any(r["category"] == DDP_CATEGORY for r in record.reasons):
        return
    from ckptlint.runtime.reach import reachable

    ddp = record.ddp or ddp_of(reachable(fn, (), {}), search_all=True)
    record.ddp = ddp
    record.add_reason(ready_twice_reason(error, ddp), "error")
