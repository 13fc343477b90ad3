"""`SomeFunction.apply(x)`: what a project `torch.autograd.Function` runs when a region calls it.

Tensor-parallel mappings, expert all-to-alls and fused kernels are written as autograd Functions
whose `forward` calls a collective; a region that applies one runs that `forward` again at the
recompute. `apply(*args)` runs `forward(ctx, *args)` (or `forward(*args)` when the class has a
`setup_context`); the `ctx` it is given is a fresh object of that call, so what the forward stores
on it (`ctx.save_for_backward`, `ctx.group = group`) is the call's own state, not the module's.
`backward` is not part of the recompute and is never run here.
"""

from __future__ import annotations

from ckptlint.analysis.semantics.values import LOCAL_VALUE, FunctionType
from ckptlint.classes import ClassIndex, ClassInfo
from ckptlint.symbols import display_name, positional_parameters

APPLY = "apply"
_FUNCTION_BASES = frozenset(
    {
        "torch.autograd.Function",
        "torch.autograd.function.Function",
        "torch.autograd.function.InplaceFunction",
    }
)


def is_autograd_function(classes: ClassIndex, info: ClassInfo) -> bool:
    return any(isinstance(a, str) and a in _FUNCTION_BASES for a in classes.ancestors(info))


def applied_forward(classes: ClassIndex, class_name: str) -> FunctionType | None:
    """The function `class_name.apply(...)` runs: its `forward`, with `ctx` bound to a fresh
    object; None when the class is not a project autograd Function (or defines no forward)."""
    info = classes.by_name(class_name)
    if info is None or not is_autograd_function(classes, info):
        return None
    found = classes.find_method(info, "forward")
    if found is None:
        return None
    owner, scope = found
    node = scope.node
    parameters = positional_parameters(node.args)  # type: ignore[attr-defined]  # a method scope's node is its def
    takes_ctx = classes.find_method(info, "setup_context") is None and bool(parameters)
    bound = ((parameters[0].arg, LOCAL_VALUE),) if takes_ctx else ()
    return FunctionType(id(node), display_name(scope), None, bound, node=node, module=owner.module)
