"""Run the distributed composition shapes on CPU (torch, gloo, one rank) and check that each
hazard really replays a collective, loses a gradient or repeats work, and that its safe twin
does not."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.distributed._functional_collectives as funcol  # noqa: E402

SHAPES = Path(__file__).resolve().parent.parent / "benchmarks" / "shapes"


def load(kind: str, name: str):
    path = SHAPES / kind / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"shape_{kind}_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def group(tmp_path):
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


class Calls:
    """Wraps `owner.name` and records the arguments of every call."""

    def __init__(self, monkeypatch, owner, name):
        self.args = []
        original = getattr(owner, name)

        def counting(*args, **kwargs):
            self.args.append(args)
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counting)

    @property
    def count(self):
        return len(self.args)

    def reset(self):
        self.args.clear()


def full(tensor):
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def grads(model):
    return {name: full(p.grad).clone() for name, p in model.named_parameters() if p.grad is not None}


def assert_same_grads(left, right):
    assert left.keys() == right.keys() and left
    for name in left:
        torch.testing.assert_close(left[name], right[name], msg=name)


def seeded(build, *args, **kwargs):
    torch.manual_seed(0)
    return build(*args, **kwargs)


def batch(rows=6, width=8):
    return torch.randn(rows, width, generator=torch.Generator().manual_seed(1))


# 1. Tensor-parallel autograd Functions with a collective in their forward.


def test_tp_function_collective_replays_forward_collectives(group, monkeypatch):
    shape = load("hazards", "shape_tp_function_collective")
    reduces, gathers = Calls(monkeypatch, dist, "all_reduce"), Calls(monkeypatch, dist, "all_gather")
    model = seeded(shape.build)
    model(batch(), use_checkpoint=False).pow(2).sum().backward()
    plain = (reduces.count, gathers.count)
    reference = grads(model)
    model.zero_grad(set_to_none=True)
    reduces.reset(), gathers.reset()
    model(batch()).pow(2).sum().backward()
    assert plain == (2, 2)
    assert (reduces.count, gathers.count) == (4, 4)
    assert_same_grads(grads(model), reference)


def test_tp_function_collective_safe_twin_reduces_once(group, monkeypatch):
    shape = load("safe", "shape_tp_function_collective")
    reduces = Calls(monkeypatch, dist, "all_reduce")
    model = seeded(shape.build)
    model(batch(), use_checkpoint=False).pow(2).sum().backward()
    plain, reference = reduces.count, grads(model)
    model.zero_grad(set_to_none=True)
    reduces.reset()
    model(batch()).pow(2).sum().backward()
    assert plain == 3 and reduces.count == plain
    assert_same_grads(grads(model), reference)


# 2. Reentrant checkpointing through CheckpointFunction.apply.


def test_checkpoint_function_direct_replays_all_reduce(group, monkeypatch):
    hazard, safe = load("hazards", "shape_checkpoint_function_direct"), load("safe", "shape_checkpoint_function_direct")
    reduces = Calls(monkeypatch, dist, "all_reduce")
    plain_model = seeded(safe.build)
    plain_model(batch()).sum().backward()
    assert reduces.count == 2
    reduces.reset()
    model = seeded(hazard.build)
    model(batch()).sum().backward()
    assert reduces.count == 4
    assert_same_grads(grads(model), grads(plain_model))


# 3. Expert-parallel all-to-all with split sizes computed by the region.


def test_expert_dispatch_replays_all_to_all_with_recomputed_splits(group, monkeypatch):
    shape = load("hazards", "shape_expert_dispatch_splits")
    exchanges = Calls(monkeypatch, dist, "all_to_all_single")
    dispatches = Calls(monkeypatch, funcol, "all_to_all_single_autograd")
    model = seeded(shape.build)
    model(batch(), use_checkpoint=False).sum().backward()
    assert (exchanges.count, dispatches.count) == (2, 4)
    reference = grads(model)
    model.zero_grad(set_to_none=True)
    exchanges.reset(), dispatches.reset()
    model(batch()).sum().backward()
    assert (exchanges.count, dispatches.count) == (4, 8)
    splits = [(args[1], args[2]) for args in dispatches.args]
    assert splits[4:] == splits[:4] and splits[0] == ([6], [6])
    assert_same_grads(grads(model), reference)


def test_expert_dispatch_safe_twin_keeps_all_to_all_outside(group, monkeypatch):
    hazard, safe = load("hazards", "shape_expert_dispatch_splits"), load("safe", "shape_expert_dispatch_splits")
    reference_model = seeded(hazard.build)
    reference_model(batch(), use_checkpoint=False).sum().backward()
    exchanges = Calls(monkeypatch, dist, "all_to_all_single")
    dispatches = Calls(monkeypatch, funcol, "all_to_all_single_autograd")
    model = seeded(safe.build)
    model(batch()).sum().backward()
    assert (exchanges.count, dispatches.count) == (2, 4)
    assert_same_grads(grads(model), grads(reference_model))


# 4. Router statistics all-reduced inside a checkpoint_wrapper'd MoE block.


def test_router_stats_all_reduce_runs_twice(group, monkeypatch):
    shape = load("hazards", "shape_router_stats_allreduce")
    reduces = Calls(monkeypatch, dist, "all_reduce")
    plain = seeded(shape.build, wrap=False)
    shape.train_step(plain, batch())
    assert reduces.count == 1
    reduces.reset()
    wrapped = seeded(shape.build)
    shape.train_step(wrapped, batch())
    assert reduces.count == 2
    assert_same_grads(grads(wrapped.router), grads(plain.router))


def test_router_stats_safe_twin_reduces_after_backward(group, monkeypatch):
    shape = load("safe", "shape_router_stats_allreduce")
    reduces = Calls(monkeypatch, dist, "all_reduce")
    plain = seeded(shape.build, wrap=False)
    shape.train_step(plain, batch())
    wrapped = seeded(shape.build)
    shape.train_step(wrapped, batch())
    assert reduces.count == 2
    assert_same_grads(grads(wrapped.router), grads(plain.router))
    torch.testing.assert_close(wrapped.router.bias, plain.router.bias)


# 5 and 7. A tied block sharded by fully_shard, checkpointed reentrantly around its unit.


def tied_grads(model, shared):
    return full(model.embed.weight.grad), full(shared.weight.grad)


def test_tied_block_reentrant_around_shard_loses_a_gradient(group):
    shape = load("hazards", "shape_tied_block_reentrant_shard")
    reference = seeded(shape.build)
    reference(batch(), use_checkpoint=False).sum().backward()
    unsharded = seeded(shape.build)
    unsharded(batch()).sum().backward()
    sharded = shape.shard(seeded(shape.build))
    sharded(batch()).sum().backward()
    embed, shared = tied_grads(reference, reference.layers[0].proj)
    assert_same_grads(grads(unsharded), grads(reference))
    sharded_embed, sharded_shared = tied_grads(sharded, sharded.layers[0].proj)
    torch.testing.assert_close(sharded_embed, embed)
    assert not torch.allclose(sharded_shared, shared, atol=1e-4)


def test_tied_block_safe_twin_sums_both_uses(group):
    shape = load("safe", "shape_tied_block_reentrant_shard")
    reference = seeded(shape.build)
    reference(batch()).sum().backward()
    sharded = shape.shard(seeded(shape.build))
    sharded(batch()).sum().backward()
    assert sharded.layers[0] is sharded.layers[2]
    for got, want in zip(tied_grads(sharded, sharded.layers[0].proj), tied_grads(reference, reference.layers[0].proj)):
        torch.testing.assert_close(got, want)


def test_apply_ac_reentrant_tied_loses_a_gradient(group):
    shape = load("hazards", "shape_apply_ac_reentrant_tied")
    reference = seeded(shape.build)
    reference(batch()).sum().backward()
    model = shape.parallelize(seeded(shape.build))
    assert "CheckpointWrapper" in type(model.layers[0]).__name__
    assert "CheckpointWrapper" not in type(model.layers[2]).__name__
    model(batch()).sum().backward()
    shared = model.layers[2].mlp.fc
    torch.testing.assert_close(full(model.embed.weight.grad), reference.embed.weight.grad)
    assert not torch.allclose(full(shared.weight.grad), reference.layers[0].mlp.fc.weight.grad, atol=1e-4)


def test_apply_ac_non_reentrant_inside_unit_is_exact(group):
    shape = load("safe", "shape_apply_ac_reentrant_tied")
    reference = seeded(shape.build)
    reference(batch()).sum().backward()
    model = shape.parallelize(seeded(shape.build))
    assert "CheckpointWrapper" in type(model.layers[0].mlp).__name__
    model(batch()).sum().backward()
    torch.testing.assert_close(full(model.embed.weight.grad), reference.embed.weight.grad)
    shared = model.layers[0].mlp.fc
    torch.testing.assert_close(full(shared.weight.grad), reference.layers[0].mlp.fc.weight.grad)


# 6. A fully_shard root whose forward checkpoints reentrantly: no divergence on torch 2.13.


@pytest.mark.parametrize("kind", ["hazards", "safe"])
def test_root_shard_reentrant_forward_gradients_match_on_one_rank(group, kind):
    shape = load(kind, "shape_root_shard_reentrant_forward")
    reference = seeded(shape.build, shard=False)
    reference(batch()).sum().backward()
    model = seeded(shape.build)
    assert "FSDP" in type(model).__name__
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        model(batch()).sum().backward()
        assert_same_grads(grads(model), grads(reference))


# 8. Composable checkpoint over a model that already uses checkpoint_sequential.


def count_layer_runs(model, x):
    runs = []
    handle = model.layers[0].register_forward_hook(lambda *args: runs.append(1))
    model(x).sum().backward()
    handle.remove()
    return len(runs)


def test_composable_over_sequential_runs_layers_three_times():
    hazard, safe = load("hazards", "shape_composable_over_sequential"), load("safe", "shape_composable_over_sequential")
    plain = seeded(safe.PlainModel, 8, 4)
    assert count_layer_runs(plain, batch()) == 1
    model = seeded(hazard.build)
    assert count_layer_runs(model, batch()) == 3
    assert_same_grads(grads(model), grads(plain))


@pytest.mark.parametrize("builder", ["build", "build_segmented"])
def test_composable_or_sequential_alone_runs_layers_twice(builder):
    safe = load("safe", "shape_composable_over_sequential")
    plain = seeded(safe.PlainModel, 8, 4)
    plain(batch()).sum().backward()
    model = seeded(getattr(safe, builder))
    assert count_layer_runs(model, batch()) == 2
    assert_same_grads(grads(model), grads(plain))


# 9. preserve_rng_state from a local flag, around dropout.


def dropout_grads(shape):
    model = seeded(shape.build)
    x = batch(16)
    torch.manual_seed(7)
    model(x).sum().backward()
    checkpointed = grads(model)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    model.block(model.embed(x)).sum().backward()
    return checkpointed, grads(model)


def test_rng_flag_false_recomputes_another_dropout_mask():
    checkpointed, plain = dropout_grads(load("hazards", "shape_rng_flag_local"))
    assert not torch.allclose(checkpointed["block.proj.weight"], plain["block.proj.weight"])


def test_rng_flag_true_matches_plain_run():
    checkpointed, plain = dropout_grads(load("safe", "shape_rng_flag_local"))
    assert_same_grads(checkpointed, plain)
