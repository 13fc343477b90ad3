"""CKP301/CKP302 fixtures run with real torch on CPU: each hazard shows the real failure under
reentrant checkpointing, and its safe twin (non-reentrant, or the naive look-alike) does not."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path
from types import ModuleType

import pytest
import torch

from conftest import FIXTURES

NO_INPUT_WARNING = "None of the inputs have requires_grad=True"
SECOND_BACKWARD = "Trying to backward through the graph a second time"


def _load(kind: str, name: str) -> ModuleType:
    path = FIXTURES / "regions" / kind / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_grad_fixture_{kind}_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _x() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(4, 8, requires_grad=True)


def _ids() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randint(0, 32, (4,))


def _starved(run, block: torch.nn.Module) -> None:
    """The reentrant symptom: torch warns, the output is detached, the block gets no gradient."""
    with pytest.warns(UserWarning, match=NO_INPUT_WARNING):
        out = run()
    assert not out.requires_grad
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad"):
        out.sum().backward()
    assert all(p.grad is None for p in block.parameters())


def _trained(run, block: torch.nn.Module) -> None:
    """No warning, and the block's parameters get a gradient."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=NO_INPUT_WARNING)
        out = run()
    out.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in block.parameters())


# -- CKP301 -------------------------------------------------------------------


def test_detached_input_starves_the_reentrant_region_and_not_the_safe_twins() -> None:
    hazard, safe = _load("hazards", "grad_input_detach"), _load("safe", "grad_input_detach")
    model = hazard.Probe()
    _starved(lambda: model(_x()), model.block)
    twin = safe.Probe()
    _trained(lambda: twin(_x()), twin.block)
    adapted = safe.ProbeWithAdapter()
    _trained(lambda: adapted(_x()), adapted.block)


def test_no_grad_input_starves_the_reentrant_region_and_not_the_safe_twins() -> None:
    hazard, safe = _load("hazards", "grad_input_no_grad"), _load("safe", "grad_input_no_grad")
    model = hazard.Refiner()
    _starved(lambda: model(_x()), model.block)
    for method in ("forward", "adapted", "marked"):
        twin = safe.Refiner()
        _trained(lambda: getattr(twin, method)(_x()), twin.block)


@pytest.mark.parametrize("name", ["FrozenByMethod", "FrozenWeight", "FrozenParameters"])
def test_frozen_embedding_starves_the_reentrant_region(name: str) -> None:
    model = getattr(_load("hazards", "grad_input_frozen_embedding"), name)()
    block = model.blocks if name == "FrozenParameters" else model.block
    _starved(lambda: model(_ids()), block)


def test_frozen_embedding_safe_twins_train() -> None:
    safe = _load("safe", "grad_input_frozen_embedding")
    for method in ("forward", "projected", "marked"):
        twin = safe.FrozenByMethod()
        _trained(lambda: getattr(twin, method)(_ids()), twin.block)
    unfrozen = safe.Unfrozen()
    unfrozen.unfreeze()
    _trained(lambda: unfrozen(_ids()), unfrozen.block)


def test_token_ids_starve_the_reentrant_region_and_not_the_safe_twins() -> None:
    hazard, safe = _load("hazards", "grad_input_token_ids"), _load("safe", "grad_input_token_ids")
    model = hazard.Scorer()
    _starved(model, model.block)
    for method in ("forward", "non_reentrant"):
        twin = safe.Scorer()
        _trained(getattr(twin, method), twin.block)


# -- CKP302 -------------------------------------------------------------------


def test_keyword_to_reentrant_checkpoint_raises_and_not_in_the_safe_twins() -> None:
    hazard, safe = _load("hazards", "grad_keyword"), _load("safe", "grad_keyword")
    with pytest.raises(ValueError, match="Unexpected keyword arguments: gate"):
        hazard.Gated()(_x())
    for method in ("forward", "local"):
        twin = safe.Gated()
        _trained(lambda: getattr(twin, method)(_x()), twin.gate)


@pytest.mark.parametrize("name, cls", [("grad_partial", "Stack"), ("grad_closure", "Scaled"), ("grad_global", "Shared")])
def test_captured_tensor_graph_is_freed_by_the_reentrant_inner_backward(name: str, cls: str) -> None:
    model = getattr(_load("hazards", name), cls)()
    out = model(_x())
    with pytest.raises(RuntimeError, match=SECOND_BACKWARD):
        out.sum().backward()


@pytest.mark.parametrize(
    "name, cls, methods, trained",
    [
        ("grad_partial", "Stack", ("forward", "masked"), "layers"),
        ("grad_closure", "Scaled", ("forward", "once", "masked"), "block"),
        ("grad_global", "Shared", ("forward", "masked"), "block"),
    ],
)
def test_captured_tensor_safe_twins_train(name: str, cls: str, methods: tuple[str, ...], trained: str) -> None:
    safe = _load("safe", name)
    for method in methods:
        twin = getattr(safe, cls)()
        _trained(lambda: getattr(twin, method)(_x()), getattr(twin, trained))


def test_captured_tensor_used_once_gets_the_plain_gradient_under_reentrant_checkpoint() -> None:
    """Why a closure used by one region only is not reported: its gradient is right."""
    twin = _load("safe", "grad_closure").Scaled()
    x = _x()
    twin.once(x).sum().backward()
    checkpointed = twin.scale.weight.grad.clone()
    twin.zero_grad()
    (twin.block(x) * twin.scale(x)).sum().backward()
    assert torch.allclose(checkpointed, twin.scale.weight.grad)


def test_captured_tensor_gradient_is_dropped_when_no_positional_input_requires_grad() -> None:
    """The dropped-gradient variant of CKP302 (reported with CKP301 at the same call)."""
    torch.manual_seed(0)
    proj, block = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
    x = _x()
    bias = proj(x)
    for reentrant, dropped in ((True, True), (False, False)):
        proj.zero_grad()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = torch.utils.checkpoint.checkpoint(lambda h: block(h) + bias, x.detach(), use_reentrant=reentrant)
        (out.sum() + x.sum()).backward(retain_graph=True)
        assert (proj.weight.grad is None or bool(proj.weight.grad.abs().sum() == 0)) is dropped
