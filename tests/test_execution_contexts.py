"""What each execution context does to each hazard kind, measured on torch 2.13 CPU.

The static linter's messages and severities (issue 15) follow these facts; docs/contexts.md
tables them. Each case is one small region below; each test runs it eagerly and in the
context and asserts what torch does. Issue 15's claims were measured on torch 2.14: where
2.13 differs, the test asserts 2.13 and says so. Compiles are few and small (aot_eager).
"""

from __future__ import annotations

import functools
import logging
import random
from typing import Any, Callable, Iterator

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts, noop_context_fn

aten = torch.ops.aten
LOG: list[int] = []  # an outer list a region appends to (a MoE aux-loss list)
STEP = 0  # a global a region bumps
WEIGHT = torch.randn(4, 4, generator=torch.Generator().manual_seed(0), requires_grad=True)


def appends_to_outer_list(x: torch.Tensor) -> torch.Tensor:
    LOG.append(1)
    return torch.sin(x) * 2


def bumps_a_global(x: torch.Tensor) -> torch.Tensor:
    global STEP
    STEP += 1
    return torch.sin(x) * 2


def draws_python_random(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x * random.random())  # sin saves its input: the redrawn scale reaches the gradient


def drops_out(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.dropout(torch.sin(x), 0.5, training=True)


def appends_then_matmul(x: torch.Tensor) -> torch.Tensor:
    LOG.append(1)
    return torch.relu(torch.mm(x, WEIGHT))


def shift_then_matmul(x: torch.Tensor) -> torch.Tensor:
    return torch.mm(torch.relu(x - random.random()), WEIGHT)  # the draw is upstream of relu and mm


def relu_in_place_after_matmul(x: torch.Tensor) -> torch.Tensor:
    return torch.mm(x, WEIGHT).relu_() * 2


def matmul_relu(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(torch.mm(x, WEIGHT))


def saves(*ops: Any) -> Callable[[], Any]:
    return functools.partial(create_selective_checkpoint_contexts, list(ops))


def must_save_everything(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE


def mm_context_fn() -> Any:
    return create_selective_checkpoint_contexts([aten.mm.default])


class ContextOwner:
    def context_fn(self) -> Any:
        return create_selective_checkpoint_contexts([aten.mm.default])


def gradients(step: Callable[[torch.Tensor], torch.Tensor], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor | None]:
    """x.grad and WEIGHT.grad of one step from fixed seeds (torch and Python random)."""
    torch.manual_seed(seed)
    random.seed(seed)
    WEIGHT.grad = None
    x = torch.randn(4, 4, generator=torch.Generator().manual_seed(1), requires_grad=True)
    step(x).sum().backward()
    weight_grad = None if WEIGHT.grad is None else WEIGHT.grad.clone()
    WEIGHT.grad = None
    assert x.grad is not None
    return x.grad, weight_grad


def same(first: tuple[torch.Tensor, torch.Tensor | None], second: tuple[torch.Tensor, torch.Tensor | None]) -> bool:
    return all(torch.equal(a, b) if a is not None and b is not None else a is b for a, b in zip(first, second))


def compiled(fn: Callable[..., Any], fullgraph: bool) -> Callable[..., Any]:
    return torch.compile(fn, backend="aot_eager", fullgraph=fullgraph)


def non_reentrant(region: Callable[..., Any], **flags: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    # a fresh function per use: dynamo caches by code object, these share one, and each test compiles its own
    def step(x: torch.Tensor) -> torch.Tensor:
        return checkpoint(region, x, use_reentrant=False, **flags)

    step.__code__ = step.__code__.replace()
    return step


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    global STEP
    LOG.clear()
    STEP = 0
    counters.clear()
    yield
    LOG.clear()


# --- torch.compile and Python side effects ---------------------------------------------------


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_eager_checkpoint_replays_a_side_effect(use_reentrant: bool) -> None:
    gradients(lambda x: checkpoint(appends_to_outer_list, x, use_reentrant=use_reentrant))
    gradients(lambda x: checkpoint(bumps_a_global, x, use_reentrant=use_reentrant))
    assert (len(LOG), STEP) == (2, 2)


@pytest.mark.parametrize("region", [appends_to_outer_list, bumps_a_global])
def test_fullgraph_compile_rejects_a_side_effect(region: Callable[..., Any]) -> None:
    with pytest.raises(torch._dynamo.exc.Unsupported, match="HOP: Unsafe side effect"):
        gradients(compiled(non_reentrant(region), fullgraph=True))
    assert (len(LOG), STEP) == (0, 0)  # refused while tracing: nothing ran


def test_default_compile_graph_breaks_and_replays_the_side_effect() -> None:
    gradients(compiled(non_reentrant(appends_to_outer_list), fullgraph=False))
    gradients(compiled(non_reentrant(bumps_a_global), fullgraph=False))
    assert sum(counters["graph_break"].values()) == 2  # one break per region, at the checkpoint
    assert {reason.splitlines()[0] for reason in counters["graph_break"]} == {"HOP: Unsafe side effect"}
    assert (len(LOG), STEP) == (2, 2)  # the region ran eagerly, checkpointed: replayed, silently


def test_the_skip_side_effects_flag_runs_the_side_effect_once() -> None:
    with torch._dynamo.config.patch(skip_fwd_side_effects_in_bwd_under_checkpoint=True):
        gradients(compiled(non_reentrant(appends_to_outer_list), fullgraph=True))
        gradients(compiled(non_reentrant(bumps_a_global), fullgraph=True))
    assert sum(counters["graph_break"].values()) == 0
    assert (len(LOG), STEP) == (1, 1)  # accepted under fullgraph, not replayed in backward


# --- torch.compile and random draws ----------------------------------------------------------


def test_a_python_random_draw_under_compile() -> None:
    plain = gradients(draws_python_random)
    eager = gradients(non_reentrant(draws_python_random))
    assert not same(plain, eager)  # eager: the recompute redraws, relu's saved output differs
    with pytest.raises(torch._dynamo.exc.Unsupported, match="Attempted to call function marked as skipped"):
        gradients(compiled(non_reentrant(draws_python_random), fullgraph=True))
    # torch 2.14 (issue 15) traces the draw once, so compiled and eager gradients differ; 2.13
    # refuses `random.random` inside the checkpoint under fullgraph and otherwise graph-breaks:
    # the region runs eagerly checkpointed, with eager's wrong gradient
    counters.clear()
    lenient = gradients(compiled(non_reentrant(draws_python_random), fullgraph=False))
    assert sum(counters["graph_break"].values()) == 1
    assert same(lenient, eager)


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_compile_ignores_preserve_rng_state_false(use_reentrant: bool) -> None:
    def step(x: torch.Tensor) -> torch.Tensor:
        return checkpoint(drops_out, x, use_reentrant=use_reentrant, preserve_rng_state=False)

    plain = gradients(drops_out)
    assert not same(gradients(step), plain)  # eager: the recompute draws another dropout mask
    assert same(gradients(compiled(step, fullgraph=True)), plain)  # compiled: the forward's mask


# --- selective activation checkpointing (SAC) -------------------------------------------------


@pytest.mark.parametrize(
    "context_fn",
    [saves(), saves(aten.mm.default), saves(aten.mm.default, aten.relu.default), functools.partial(create_selective_checkpoint_contexts, must_save_everything)],
    ids=["save-nothing", "save-mm", "save-every-op", "policy-must-save-all"],
)
def test_sac_replays_python_side_effects_under_every_policy(context_fn: Callable[[], Any]) -> None:
    gradients(non_reentrant(appends_then_matmul, context_fn=context_fn))
    assert len(LOG) == 2  # the recompute runs the Python again; only ops' outputs are cached


def test_a_saved_op_masks_a_value_hazard_upstream_of_it() -> None:
    plain = gradients(shift_then_matmul)
    random.seed(0)
    plain_stream = (gradients(shift_then_matmul), random.getstate())[1]
    assert not same(gradients(non_reentrant(shift_then_matmul)), plain)
    # saving mm does not help: backward needs mm's input, relu's output, which is recomputed
    assert not same(gradients(non_reentrant(shift_then_matmul, context_fn=saves(aten.mm.default))), plain)
    # saving relu does: every tensor backward reads comes from the forward
    assert same(gradients(non_reentrant(shift_then_matmul, context_fn=saves(aten.relu.default))), plain)
    # ... while the draw itself is still made again: the Python stream ends elsewhere
    gradients(non_reentrant(shift_then_matmul, context_fn=saves(aten.relu.default)))
    assert random.getstate() != plain_stream


def test_in_place_on_a_saved_output_raises_eagerly_and_only_logs_when_compiled() -> None:
    step = non_reentrant(relu_in_place_after_matmul, context_fn=saves(aten.mm.default))
    out = step(torch.randn(4, 4, requires_grad=True))  # the forward runs
    with pytest.raises(RuntimeError, match="Tensor cached during selective activation checkpoint has been mutated"):
        out.sum().backward()  # backward, unpacking the saved output, raises
    WEIGHT.grad = None
    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("torch._higher_order_ops.wrap")
    logger.addHandler(handler)
    torch._logging.warning_once.cache_clear()  # torch says it once per process: an earlier compiled SAC test may have
    try:
        result = gradients(compiled(non_reentrant(relu_in_place_after_matmul, context_fn=saves(aten.mm.default)), fullgraph=True))
    finally:
        logger.removeHandler(handler)
    # issue 15 (2.14) says it "only warns": on 2.13 it is a log record, not a Python warning,
    # and it is said for any context_fn under compile, whether or not the region mutates
    assert any("Detected that context_fn is passed to torch.utils.checkpoint under torch.compile" in m for m in messages)
    assert same(result, gradients(relu_in_place_after_matmul))  # and the compiled gradients are right


def test_an_op_overload_packet_in_a_policy_list_raises_at_the_checkpoint_call() -> None:
    with pytest.raises(ValueError, match="Please update the OpOverloadPacket to a specific OpOverload"):
        create_selective_checkpoint_contexts([aten.mm])
    step = non_reentrant(matmul_relu, context_fn=saves(aten.mm))  # building the partial is fine
    with pytest.raises(ValueError, match=r"Expected op in `op_list` to be an OpOverload but got: aten.mm"):
        gradients(step)  # checkpoint calls context_fn in the forward


# --- context_fn forms under torch.compile ------------------------------------------------------


@pytest.mark.parametrize("fullgraph", [True, False])
def test_a_context_fn_lambda_made_inside_the_compiled_function_fails(fullgraph: bool) -> None:
    def step(x: torch.Tensor) -> torch.Tensor:
        return checkpoint(matmul_relu, x, use_reentrant=False, context_fn=lambda: create_selective_checkpoint_contexts([aten.mm.default]))

    # not a graph break: an internal dynamo error under either fullgraph
    with pytest.raises(torch._dynamo.exc.InternalTorchDynamoError, match="checkpoint not implemented for .*NestedUserFunctionVariable.* context_fn"):
        gradients(compiled(step, fullgraph=fullgraph))


def test_a_bound_method_context_fn_fails_under_compile() -> None:
    owner = ContextOwner()

    def step(x: torch.Tensor) -> torch.Tensor:
        return checkpoint(matmul_relu, x, use_reentrant=False, context_fn=owner.context_fn)

    # dynamo keeps the function without its instance: the backend calls it without `self`
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match=r"missing 1 required positional argument: 'self'"):
        gradients(compiled(step, fullgraph=True))


@pytest.mark.parametrize("context_fn", [saves(aten.mm.default), mm_context_fn], ids=["partial", "module-level-function"])
def test_a_partial_or_module_level_context_fn_compiles(context_fn: Callable[[], Any]) -> None:
    def step(x: torch.Tensor) -> torch.Tensor:
        return checkpoint(matmul_relu, x, use_reentrant=False, context_fn=context_fn)

    assert same(gradients(compiled(step, fullgraph=True)), gradients(matmul_relu))


def test_passing_the_default_noop_context_fn_explicitly_fails_under_compile() -> None:
    def stepping_with(context_fn: Callable[[], Any]) -> Callable[[torch.Tensor], torch.Tensor]:
        def step(x: torch.Tensor) -> torch.Tensor:
            return checkpoint(matmul_relu, x, use_reentrant=False, context_fn=context_fn)

        return step

    # dynamo compares the variable tracker, not the function, with noop_context_fn: checkpoint's
    # own default, given explicitly (a wrapper forwarding every flag), is refused
    with pytest.raises(torch._dynamo.exc.InternalTorchDynamoError, match="checkpoint not implemented for .*LazyVariableTracker.* context_fn"):
        gradients(compiled(stepping_with(noop_context_fn), fullgraph=True))
    assert same(gradients(compiled(stepping_with(mm_context_fn), fullgraph=True)), gradients(matmul_relu))  # any other function compiles


# --- an outer saved-tensors hook (save_on_cpu) ---------------------------------------------------


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_save_on_cpu_around_checkpoint(use_reentrant: bool) -> None:
    packed: list[tuple[int, ...]] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        packed.append(tuple(tensor.shape))
        return tensor

    def step(x: torch.Tensor) -> torch.Tensor:
        return checkpoint(appends_then_matmul, x, use_reentrant=use_reentrant)

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        plain = gradients(appends_then_matmul)
    assert len(packed) == 3 and len(LOG) == 1  # unchecked: mm's two inputs and relu's output
    packed.clear()
    x = torch.randn(4, 4, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = step(x)
    out.sum().backward()
    # in forward the outer hook sees only what checkpoint keeps (its input); the side effect still replays
    assert packed == [(4, 4)] and len(LOG) == 3
    packed.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        checkpointed = gradients(step)
    # with the hook still on in backward, the reentrant recompute saves its activations through
    # it (it rebuilds a graph); the non-reentrant one refills checkpoint's own slots instead
    assert packed == ([(4, 4)] * 4 if use_reentrant else [(4, 4)])
    assert same(plain, checkpointed)
    with torch.autograd.graph.save_on_cpu():
        assert same(gradients(lambda x: checkpoint(appends_then_matmul, x, use_reentrant=use_reentrant)), plain)


def test_sac_saved_outputs_never_reach_an_outer_hook() -> None:
    if "respect_saved_tensors_hooks" in torch.utils.checkpoint._checkpoint_without_reentrant_generator.__code__.co_varnames:
        pytest.fail("this torch has respect_saved_tensors_hooks: measure SAC under it too")
    packed: list[tuple[int, ...]] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        packed.append(tuple(tensor.shape))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        gradients(non_reentrant(matmul_relu, context_fn=saves(aten.mm.default, aten.relu.default)))
    # torch 2.13 has no respect_saved_tensors_hooks (2.14 adds it): what the policy saves
    # stays where it is, whatever save_on_cpu or another outer hook would do with it
    assert packed == [(4, 4)]
