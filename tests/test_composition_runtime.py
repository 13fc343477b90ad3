"""The failures CKP303-CKP305 predict, on real torch (CPU): each in reentrant mode, and its
absence non-reentrant or in the safe twin's shape."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.utils.checkpoint import checkpoint

GRAD_ERROR = "incompatible with .grad() or passing an `inputs` parameter to .backward()"
FUNCTORCH_REENTRANT = "must override the setup_context staticmethod"
FUNCTORCH_HOOKS = "don't yet support saved tensor hooks"


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x))


def _block() -> _Block:
    torch.manual_seed(0)
    return _Block()


# -- CKP304 ---------------------------------------------------------------------------------


def test_autograd_grad_on_a_reentrant_checkpoint_raises_and_works_non_reentrant() -> None:
    block = _block()
    x = torch.randn(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError) as raised:
        torch.autograd.grad(checkpoint(block, x, use_reentrant=True).sum(), x)
    assert GRAD_ERROR in str(raised.value)
    (g,) = torch.autograd.grad(checkpoint(block, x, use_reentrant=False).sum(), x)
    (plain,) = torch.autograd.grad(block(x).sum(), x)
    assert torch.allclose(g, plain)


def test_backward_with_inputs_on_a_reentrant_checkpoint_raises_and_plain_backward_works() -> None:
    block = _block()
    x = torch.randn(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError) as raised:
        checkpoint(block, x, use_reentrant=True).sum().backward(inputs=[x])
    assert GRAD_ERROR in str(raised.value)
    checkpoint(block, x, use_reentrant=False).sum().backward(inputs=[x])
    assert x.grad is not None
    x.grad = None
    checkpoint(block, x, use_reentrant=True).sum().backward()  # the safe twin: a plain backward
    assert x.grad is not None


def _reverse_transform(transform: str, block: torch.nn.Module, x: torch.Tensor, reentrant: bool) -> None:
    """torch.func.grad / vjp / jacrev of a function that checkpoints `block`."""
    if transform == "grad":
        torch.func.grad(lambda v: checkpoint(block, v, use_reentrant=reentrant).sum())(x)
    elif transform == "vjp":
        torch.func.vjp(lambda v: checkpoint(block, v, use_reentrant=reentrant), x)
    else:
        torch.func.jacrev(lambda v: checkpoint(block, v, use_reentrant=reentrant))(x)


@pytest.mark.parametrize("transform", ["grad", "vjp", "jacrev"])
def test_torch_func_reverse_transforms_fail_on_checkpoint_in_either_mode(transform: str) -> None:
    block = _block()
    x = torch.randn(2, 3)
    with pytest.raises(RuntimeError, match=FUNCTORCH_REENTRANT):
        _reverse_transform(transform, block, x, reentrant=True)
    with pytest.raises(RuntimeError, match=FUNCTORCH_HOOKS):
        _reverse_transform(transform, block, x, reentrant=False)
    assert torch.func.jacrev(torch.tanh)(x).shape == (2, 3, 2, 3)  # the safe twin: no checkpoint inside the transform


def test_jacfwd_fails_only_on_a_reentrant_checkpoint() -> None:
    block = _block()
    x = torch.randn(2, 3)
    with pytest.raises(RuntimeError, match=FUNCTORCH_REENTRANT):
        torch.func.jacfwd(lambda v: checkpoint(block, v, use_reentrant=True))(x)
    jacobian = torch.func.jacfwd(lambda v: checkpoint(block, v, use_reentrant=False))(x)
    assert jacobian.shape == (2, 3, 2, 3)


def test_autograd_functional_jacobian_fails_on_a_reentrant_checkpoint_only() -> None:
    block = _block()
    x = torch.randn(2, 3)
    with pytest.raises(RuntimeError, match="use_reentrant=True"):
        torch.autograd.functional.jacobian(lambda v: checkpoint(block, v, use_reentrant=True), x)
    torch.autograd.functional.jacobian(lambda v: checkpoint(block, v, use_reentrant=False), x)


# -- CKP303 ---------------------------------------------------------------------------------


class _Tower(torch.nn.Module):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)
        self.outer = torch.nn.Linear(4, 4)
        self.reentrant = reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.outer(checkpoint(self.inner, x, use_reentrant=self.reentrant)).sum()


@pytest.fixture
def one_process_group(tmp_path: Path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _ddp_step(reentrant: bool, find_unused: bool) -> None:
    model = torch.nn.parallel.DistributedDataParallel(_Tower(reentrant), find_unused_parameters=find_unused)
    model(torch.randn(2, 4, requires_grad=True)).backward()


@pytest.mark.filterwarnings("ignore")
def test_ddp_find_unused_parameters_with_a_reentrant_checkpoint_marks_a_variable_ready_twice(one_process_group) -> None:
    with pytest.raises(RuntimeError, match="Expected to mark a variable ready only once"):
        _ddp_step(reentrant=True, find_unused=True)
    _ddp_step(reentrant=False, find_unused=True)  # safe twin: non-reentrant
    _ddp_step(reentrant=True, find_unused=False)  # safe twin: no unused-parameter search


class _SharedNorm(torch.nn.Module):
    """The fixtures' SharedNorm, or with `looped` a module checkpointed in two reentrant regions."""

    def __init__(self, looped: bool) -> None:
        super().__init__()
        self.stem = torch.nn.Linear(4, 4)
        self.norm = torch.nn.LayerNorm(4)
        self.looped = looped

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = checkpoint(self.norm, self.stem(x), use_reentrant=True)
        if self.looped:
            return checkpoint(self.norm, hidden, use_reentrant=True).sum()
        return self.norm(hidden).sum()


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize(("looped", "static_graph", "fails"), [(False, False, True), (False, True, False), (True, False, True), (True, True, False)])
def test_ddp_parameter_reached_inside_and_outside_a_reentrant_region(one_process_group, looped: bool, static_graph: bool, fails: bool) -> None:
    """Called inside its reentrant region and outside it, a module's parameters are marked ready
    twice (CKP303 without find_unused_parameters), and so is one checkpointed in two reentrant
    regions; static_graph=True lets DDP see both."""
    model = torch.nn.parallel.DistributedDataParallel(_SharedNorm(looped), static_graph=static_graph)
    for _ in range(2):
        if fails:
            with pytest.raises(RuntimeError, match="Expected to mark a variable ready only once"):
                model(torch.randn(2, 4)).backward()
            return
        model(torch.randn(2, 4)).backward()


# -- CKP305 ---------------------------------------------------------------------------------


class _TinyLm(torch.nn.Module):
    """What a PEFT/LoRA set-up looks like to autograd: a frozen embedding, then a checkpointed
    layer with a trainable adapter."""

    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(10, 4)
        self.embed.requires_grad_(False)
        self.layer = torch.nn.Linear(4, 4)
        self.layer.requires_grad_(False)
        self.adapter = torch.nn.Linear(4, 4, bias=False)
        self.reentrant = reentrant

    def block(self, h: torch.Tensor) -> torch.Tensor:
        return self.layer(h) + self.adapter(h)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.block, self.embed(ids), use_reentrant=self.reentrant).sum()


def _input_require_grads(model: _TinyLm) -> None:
    """What `enable_input_require_grads()` installs: the embedding's output requires grad."""
    model.embed.register_forward_hook(lambda module, args, output: output.requires_grad_(True))


def test_reentrant_checkpoint_after_a_frozen_embedding_leaves_the_adapter_without_gradient() -> None:
    model = _TinyLm(reentrant=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = model(torch.tensor([[1, 2, 3]]))
    assert any("None of the inputs have requires_grad=True" in str(w.message) for w in caught)
    assert not loss.requires_grad  # nothing to backward through: the adapter gets no gradient
    assert model.adapter.weight.grad is None


@pytest.mark.parametrize("fix", ["non-reentrant", "input-grad hook"])
def test_the_adapter_gets_a_gradient_non_reentrant_or_with_the_input_grad_hook(fix: str) -> None:
    model = _TinyLm(reentrant=fix != "non-reentrant")
    if fix == "input-grad hook":
        _input_require_grads(model)
    model(torch.tensor([[1, 2, 3]])).backward()
    assert model.adapter.weight.grad is not None and model.adapter.weight.grad.abs().sum() > 0
    assert model.embed.weight.grad is None  # the frozen base stays frozen
