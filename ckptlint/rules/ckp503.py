"""CKP503: a `context_fn` torch.compile cannot trace (a lambda or def made in a function, a bound method)."""

from __future__ import annotations

from typing import Iterator

from ckptlint.finding import Finding
from ckptlint.rules.base import Rule, RuleContext, finding_at

_FORMS = {
    "nested-lambda": "a lambda made inside a function",
    "nested-def": "a function defined inside a function",
    "bound-method": "a bound method",
}
_ERRORS = {
    "nested-lambda": "`NotImplementedError: checkpoint not implemented for NestedUserFunctionVariable context_fn`",
    "nested-def": "`NotImplementedError: checkpoint not implemented for NestedUserFunctionVariable context_fn`",
    "bound-method": "a backend compiler failure",
}


class ContextFnRejectedByCompile(Rule):
    code = "CKP503"
    name = "context-fn-rejected-by-compile"
    summary = "A checkpoint call that runs under `torch.compile` passes a `context_fn` Dynamo cannot trace: a lambda or def made inside a function, or a bound method."
    explanation = """
        Under `torch.compile`, Dynamo traces `checkpoint(..., context_fn=...)` into a
        higher-order op and must call the `context_fn` at trace time. Measured on torch 2.13
        CPU (`backend="aot_eager"`), with `fullgraph=True` and with `fullgraph=False` alike:

        - a lambda or a def created inside the compiled function (or a forward that runs
          compiled) fails with `InternalTorchDynamoError: NotImplementedError: checkpoint not
          implemented for <class 'torch._dynamo.variables.functions.NestedUserFunctionVariable'>
          context_fn`; no graph break rescues it;
        - a bound method (`context_fn=self.context_fn`) fails with `BackendCompilerFailed`;
        - a module-level function or lambda, and `functools.partial(
          create_selective_checkpoint_contexts, ...)` built anywhere, compile.

        Whether the call runs compiled comes from the call's execution context
        (analysis/contexts/execution.py: `@torch.compile` on an enclosing function,
        `torch.compile(model)` / `model.compile()` of a module that holds the call); where the
        run computes no contexts, from an enclosing `@torch.compile` decorator alone. Eager
        calls with these forms work and are not reported.
    """
    bad = """
        import torch
        from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts


        @torch.compile
        def step(block, x):
            policy = lambda: create_selective_checkpoint_contexts([torch.ops.aten.mm.default])
            return checkpoint(block, x, use_reentrant=False, context_fn=policy)
    """
    good = """
        import functools

        import torch
        from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

        POLICY = functools.partial(create_selective_checkpoint_contexts, [torch.ops.aten.mm.default])


        @torch.compile
        def step(block, x):
            return checkpoint(block, x, use_reentrant=False, context_fn=POLICY)
    """
    remedy = """
        Build the context function once, outside the compiled code: a module-level
        `functools.partial(create_selective_checkpoint_contexts, OPS)` (or a module-level
        function returning `create_selective_checkpoint_contexts(...)`), and pass that.
    """
    confirmed_by = frozenset({"error"})

    def check(self, context: RuleContext) -> Iterator[Finding]:
        if context.composition is None:
            return
        for found in context.composition.rejected_context_fns(context.execution_context):
            message = (
                f"`context_fn` is {_FORMS[found.variant]} and the call runs under torch.compile ({found.compiled_by}): "
                f"Dynamo cannot trace it and compilation fails with {_ERRORS[found.variant]} (fullgraph or not); "
                "pass a module-level `functools.partial(create_selective_checkpoint_contexts, ...)`"
            )
            yield finding_at(found.call.module, found.node, self.code, message, (context.site(found.call),))
