"""Runtime evidence for the gradient-flow shapes (CKP301-CKP305) in benchmarks/shapes.

Each hazard is run on CPU and shown to fail or to lose gradients; each safe twin is shown to train
exactly as the same code with checkpointing replaced by a plain call.
"""
import functools
import importlib.util
import pathlib
from contextlib import nullcontext
from unittest import mock

import pytest
import torch
import torch.distributed as dist

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "shapes"
REENTRANT_REFUSES_GRAD = r"incompatible with \.grad\(\) or passing an `inputs` parameter to \.backward\(\)"
GRAPH_FREED = "backward through the graph a second time"

pytestmark = [
    pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad=True"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]


def load(kind, name):
    path = FIXTURES / kind / f"shape_{name}.py"
    spec = importlib.util.spec_from_file_location(f"shape_{kind}_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _plain_call(function, *args, use_reentrant=None, **kwargs):
    return function(*args)


def checkpointing(module, enabled):
    """Run the fixture as written, or with its `checkpoint` replaced by a plain call."""
    return nullcontext() if enabled else mock.patch.object(module, "checkpoint", _plain_call)


def grads(model):
    return [None if p.grad is None else p.grad.clone() for p in model.parameters()]


def assert_same_grads(actual, expected):
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert (got is None) == (want is None)
        if want is not None:
            torch.testing.assert_close(got, want)


def run(module, make_model, step, enabled):
    torch.manual_seed(0)
    with checkpointing(module, enabled):
        model = make_model()
        step(model)
    return model


# --- CKP301: frozen embedding / frozen ModuleList / token ids feeding a reentrant region ---------

def _token_step(module):
    return lambda model: module.train_step(model, torch.randint(0, 16, (4, 5)), torch.randint(0, 3, (4,)))


def _feature_step(module):
    return lambda model: module.train_step(model, torch.randn(4, 8), torch.randn(4, 1))


CKP301_SHAPES = [
    ("frozen_embed_loop", "FrozenEmbeddingClassifier", _token_step, "block"),
    ("frozen_layers_modulelist", "PartlyFrozenTower", _feature_step, "block"),
    ("token_ids_reentrant", "TokenClassifier", _token_step, "stem"),
]


@pytest.mark.parametrize("name,cls,step,region", CKP301_SHAPES)
def test_ckp301_hazard_region_parameters_get_no_gradient(name, cls, step, region):
    module = load("hazards", name)
    make = getattr(module, cls)
    reference = run(module, make, step(module), enabled=False)
    checkpointed = run(module, make, step(module), enabled=True)
    region_params = list(getattr(checkpointed, region).parameters())
    assert region_params and all(p.grad is None for p in region_params)
    assert all(p.grad.abs().sum() > 0 for p in getattr(reference, region).parameters())
    assert checkpointed.head.weight.grad is not None


@pytest.mark.parametrize("name,cls,step,region", CKP301_SHAPES)
def test_ckp301_safe_twin_matches_uncheckpointed(name, cls, step, region):
    module = load("safe", name)
    make = getattr(module, cls)
    reference = run(module, make, step(module), enabled=False)
    checkpointed = run(module, make, step(module), enabled=True)
    assert_same_grads(grads(checkpointed), grads(reference))
    assert all(p.grad is not None for p in getattr(checkpointed, region).parameters())


# --- CKP302: tensors needing grad reaching reentrant regions by closure or partial keyword -------

def _encoder_decoder_step(module):
    def step(model):
        source = torch.randn(2, 5, 8)
        source[:, -1] = 0.0
        module.train_step(model, source, torch.randn(2, 3, 8))
    return step


CKP302_SHAPES = [
    ("cross_attention_closure", "EncoderDecoder", _encoder_decoder_step),
    ("relative_bias_partial", "RelativeBiasEncoder", lambda m: (lambda model: m.train_step(model, torch.randn(2, 6, 8)))),
]


@pytest.mark.parametrize("name,cls,step", CKP302_SHAPES)
def test_ckp302_hazard_nested_backward_reuses_freed_graph(name, cls, step):
    module = load("hazards", name)
    make = getattr(module, cls)
    reference = run(module, make, step(module), enabled=False)
    assert all(p.grad is not None for p in reference.parameters())
    with pytest.raises(RuntimeError, match=GRAPH_FREED):
        run(module, make, step(module), enabled=True)


@pytest.mark.parametrize("name,cls,step", CKP302_SHAPES)
def test_ckp302_safe_twin_matches_uncheckpointed(name, cls, step):
    module = load("safe", name)
    make = getattr(module, cls)
    reference = run(module, make, step(module), enabled=False)
    checkpointed = run(module, make, step(module), enabled=True)
    assert_same_grads(grads(checkpointed), grads(reference))
    assert all(p.grad is not None for p in checkpointed.parameters())


def test_ckp302_bare_parameter_by_keyword_still_gets_its_gradient():
    """What really happens when the keyword carries a leaf Parameter rather than a tensor computed
    from one: the nested backward of each reentrant recompute accumulates into the leaf's .grad, so
    the gradient is correct (the failure needs a non-leaf graph shared by several regions)."""
    module = load("hazards", "relative_bias_partial")

    def run_blocks(enabled):
        torch.manual_seed(0)
        blocks = torch.nn.ModuleList([module.BiasedSelfAttention(8) for _ in range(2)])
        bias = torch.nn.Parameter(torch.randn(6, 6) * 0.1)
        x = torch.randn(2, 6, 8, requires_grad=True)
        for block in blocks:
            function = functools.partial(block, bias=bias)
            x = module.checkpoint(function, x, use_reentrant=True) if enabled else function(x)
        x.pow(2).mean().backward()
        return [bias.grad, *grads(blocks)]

    assert_same_grads(run_blocks(enabled=True), run_blocks(enabled=False))


# --- CKP303: reentrant activation checkpointing under DDP(find_unused_parameters=True) -----------

@pytest.fixture
def gloo_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _ddp_step(module, wrap):
    torch.manual_seed(0)
    model = module.Tower()
    trained = module.wrap_for_training(model) if wrap else model
    module.train_step(trained, torch.randn(4, 8), torch.randn(4, 1))
    return model


def test_ckp303_hazard_ddp_marks_checkpointed_parameters_twice(gloo_group):
    module = load("hazards", "activation_ckpt_ddp_unused")
    with pytest.raises(RuntimeError, match="Expected to mark a variable ready only once"):
        _ddp_step(module, wrap=True)


def test_ckp303_safe_twin_matches_unwrapped_model(gloo_group):
    module = load("safe", "activation_ckpt_ddp_unused")
    reference = _ddp_step(module, wrap=False)
    wrapped = _ddp_step(module, wrap=True)
    assert any("checkpoint_wrapped" in n for n, _ in wrapped.named_modules())
    assert_same_grads(grads(wrapped), grads(reference))


# --- CKP304: autograd.grad / backward(inputs=...) through reentrant regions ----------------------

def _gan_round(module, enabled):
    torch.manual_seed(0)
    with checkpointing(module, enabled):
        gen, disc = module.Generator(), module.build_discriminator()
        disc_before = [p.detach().clone() for p in disc.parameters()]
        gen_opt = torch.optim.SGD(gen.parameters(), lr=0.1)
        disc_opt = torch.optim.SGD(disc.parameters(), lr=0.1)
        try:
            module.alternating_step(gen, disc, gen_opt, disc_opt, torch.randn(4, 6), torch.randn(4, 4))
        finally:
            disc_moved = any(not torch.equal(a, b) for a, b in zip(disc_before, disc.parameters()))
    return gen, disc, disc_moved


def test_ckp304_hazard_gan_generator_backward_inputs_raises():
    module = load("hazards", "gan_backward_inputs")
    _gan_round(module, enabled=False)
    with pytest.raises(RuntimeError, match=REENTRANT_REFUSES_GRAD):
        _gan_round(module, enabled=True)


def test_ckp304_safe_gan_twin_matches_uncheckpointed():
    module = load("safe", "gan_backward_inputs")
    gen_ref, disc_ref, _ = _gan_round(module, enabled=False)
    gen, disc, disc_moved = _gan_round(module, enabled=True)
    assert disc_moved
    for got, want in zip([*gen.parameters(), *disc.parameters()], [*gen_ref.parameters(), *disc_ref.parameters()]):
        torch.testing.assert_close(got, want)


def _critic_step(module):
    return lambda critic: module.critic_step(critic, torch.randn(4, 6), torch.randn(4, 6), torch.rand(4, 1))


def test_ckp304_hazard_gradient_penalty_raises():
    module = load("hazards", "gradient_penalty")
    reference = run(module, module.Critic, _critic_step(module), enabled=False)
    assert all(p.grad is not None for p in reference.parameters())
    with pytest.raises(RuntimeError, match=REENTRANT_REFUSES_GRAD):
        run(module, module.Critic, _critic_step(module), enabled=True)


def test_ckp304_safe_gradient_penalty_matches_uncheckpointed():
    module = load("safe", "gradient_penalty")
    reference = run(module, module.Critic, _critic_step(module), enabled=False)
    checkpointed = run(module, module.Critic, _critic_step(module), enabled=True)
    assert_same_grads(grads(checkpointed), grads(reference))


def _saliency(module, function_name, enabled):
    torch.manual_seed(0)
    with checkpointing(module, enabled):
        model = module.Classifier()
        x, labels = torch.randn(4, 6), torch.randint(0, 3, (4,))
        module.train_step(model, x, labels)
        return grads(model), getattr(module, function_name)(model, x, labels)


def test_ckp304_hazard_input_saliency_through_region_raises():
    module = load("hazards", "grad_outside_region")
    _saliency(module, "input_saliency", enabled=False)
    with pytest.raises(RuntimeError, match=REENTRANT_REFUSES_GRAD):
        _saliency(module, "input_saliency", enabled=True)


def test_ckp304_safe_grad_of_loss_outside_region_matches_uncheckpointed():
    module = load("safe", "grad_outside_region")
    ref_grads, ref_saliency = _saliency(module, "feature_saliency", enabled=False)
    got_grads, got_saliency = _saliency(module, "feature_saliency", enabled=True)
    assert_same_grads(got_grads, ref_grads)
    torch.testing.assert_close(got_saliency, ref_saliency)
    assert got_saliency.abs().sum() > 0


# --- CKP305: HF-style gradient_checkpointing_enable on a model with frozen bottom layers ---------

def _finetune(module, enabled):
    torch.manual_seed(0)
    with checkpointing(module, enabled):
        model = module.prepare_for_finetuning(module.TinyCausalLM(), num_frozen_layers=2)
        model.train()
        module.train_step(model, torch.randint(0, 16, (3, 7)))
    return model


def test_ckp305_hazard_unfrozen_top_layers_get_no_gradient():
    module = load("hazards", "hf_frozen_bottom_layers")
    reference = _finetune(module, enabled=False)
    model = _finetune(module, enabled=True)
    assert model.gradient_checkpointing
    top = [p for layer in model.layers[2:] for p in layer.parameters()]
    assert top and all(p.requires_grad and p.grad is None for p in top)
    assert all(p.grad.abs().sum() > 0 for layer in reference.layers[2:] for p in layer.parameters())
    assert model.lm_head.weight.grad is not None


def test_ckp305_safe_twin_matches_uncheckpointed():
    module = load("safe", "hf_frozen_bottom_layers")
    reference = _finetune(module, enabled=False)
    model = _finetune(module, enabled=True)
    assert_same_grads(grads(model), grads(reference))
    assert all(p.grad is not None for layer in model.layers[2:] for p in layer.parameters())
    assert all(p.grad is None for p in model.embed_tokens.parameters())
