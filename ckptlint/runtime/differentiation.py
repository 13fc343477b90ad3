"""Checkpointed outputs differentiated other than by a plain `.backward()` (CKP304): the
error torch raises inside checkpoint's own code, recorded where the user differentiated.

Reentrant checkpoint only supports `.backward()`: under `torch.autograd.grad(...)` or
`backward(inputs=...)` its backward raises "When use_reentrant=True, torch.utils.checkpoint is
incompatible with .grad() ...". Under a `torch.func` transform (grad, vjp, jacrev, ...) the
checkpoint call itself raises in the forward, in either mode on torch 2.13 (a reentrant region
is an `autograd.Function` without `setup_context`; a non-reentrant one pushes saved-tensor
hooks). A replay cannot show either: the companion watches the user's own run, records the
reason at the checkpoint call's record, naming the differentiating call (the first user frame
outside torch on the stack when the error is raised), and lets the exception through untouched.
"""

from __future__ import annotations

import os
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any

import torch

from ckptlint.runtime.compare import Reason
from ckptlint.runtime.frames import is_user_code

if TYPE_CHECKING:
    from ckptlint.runtime.sites import Site
    from ckptlint.runtime.report import Record

DIFFERENTIATION_CATEGORY = "differentiation"  # the reason's category; also what confirms CKP304 (`confirmed_by`)
# torch's own messages, raised inside checkpoint's code (torch 2.13)
REENTRANT_GRAD = "torch.utils.checkpoint is incompatible with .grad()"  # CheckpointFunction.backward
TRANSFORM_ERRORS = (
    "must override the setup_context staticmethod",  # autograd.Function.apply under a functorch transform
    "don't yet support saved tensor hooks",  # the non-reentrant generator's hooks under grad/vjp/jacrev
)
TRANSFORM = "a torch.func transform"

_TORCH = os.path.dirname(torch.__file__) + os.sep
# (file under torch, function) -> the API the user called, the outermost one found wins
_APIS = {
    ("autograd/__init__.py", "grad"): "torch.autograd.grad",
    ("autograd/__init__.py", "backward"): "torch.autograd.backward(inputs=...)",
    ("_tensor.py", "backward"): "Tensor.backward(inputs=...)",
}


def under_function_transform() -> bool:
    """Inside torch.func's grad/vjp/jacrev/jacfwd/vmap: a replay there would run under the transform."""
    peek = getattr(getattr(torch._C, "_functorch", None), "peek_interpreter_stack", None)
    return peek is not None and peek() is not None


def is_incompatible(error: BaseException) -> bool:
    text = str(error)
    return isinstance(error, RuntimeError) and (REENTRANT_GRAD in text or any(t in text for t in TRANSFORM_ERRORS))


def _api(filename: str, function: str) -> str | None:
    if not filename.startswith(_TORCH):
        return None
    relative = filename[len(_TORCH):].replace(os.sep, "/")
    if relative.startswith("_functorch/"):
        return TRANSFORM
    if relative == "autograd/functional.py":
        return f"torch.autograd.functional.{function}"
    return _APIS.get((relative, function))


def differentiating_call(frame: FrameType | None, in_forward: bool) -> tuple[str, Site | None]:
    """(the differentiating API, where the user called it). From the backward, the first user
    frame out (on CPU the engine runs on the caller's thread; a device thread shows none); from
    a transformed forward, the first user frame outside torch.func's frames (the checkpoint call
    and the transformed function lie inside them)."""
    from ckptlint.runtime.intercept import _site_of

    what: str | None = None
    inside_transform = in_forward
    while frame is not None:
        filename = frame.f_code.co_filename
        if is_user_code(filename):
            if not inside_transform:
                return what or "the differentiating call", _site_of(frame)
        else:
            api = _api(filename, frame.f_code.co_name)
            if api is not None:
                what = api
                inside_transform = inside_transform and api != TRANSFORM
        frame = frame.f_back
    return what or ("a torch.func transform" if in_forward else "the differentiating call"), None


def incompatible_reason(error: BaseException, what: str, site: Site | None) -> dict[str, Any]:
    text = str(error).strip()
    first_line = text.splitlines()[0].split(". ")[0] if text else type(error).__name__
    where = f" at {site.path}:{site.line}" if site is not None else " (on a thread without the caller's frames)"
    if what == TRANSFORM:
        why = (
            "torch.func transforms refuse checkpointed regions (grad, vjp, jacrev in either mode, jacfwd and jvp a "
            "reentrant one); checkpoint outside the transform (CKP304)"
        )
    else:
        why = "reentrant checkpoint only supports a plain .backward(); use_reentrant=False avoids it (CKP304)"
    detail = f"{what}{where} raised inside checkpoint: {first_line}\n{why}"
    return {
        **Reason(DIFFERENTIATION_CATEGORY, what, detail=detail).to_dict(),
        "differentiated_at": site.to_dict() if site is not None else None,
    }


def failed(record: Record, error: BaseException, in_forward: bool) -> None:
    """Called with the exception checkpoint's own code raised, forward or backward, for this record's call."""
    if not is_incompatible(error):
        return
    what, site = differentiating_call(sys._getframe(1), in_forward)
    where = site.to_dict() if site is not None else None
    if any(r["category"] == DIFFERENTIATION_CATEGORY and r.get("differentiated_at") == where for r in record.reasons):
        return  # once per differentiating call: a loop's later steps add nothing
    record.add_reason(incompatible_reason(error, what, site), "error")
