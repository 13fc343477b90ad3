"""Replay region fixtures under the runtime companion: do hazards diverge and safe twins not?

Each case builds a fixture's model (from fixtures/regions/hazards or safe), runs two
training steps under `ckptlint.runtime.audit(sample="all", witness=True)` and prints each
probed call's verdict, whether the recompute ran, and what diverged. Used to check the
principle "a hazard is a replay that changes something" on the fixtures it moved.

    PYTHONPATH=. python benchmarks/replay_region_fixtures.py hazards,safe [CASE...]
"""
import importlib.util, sys, warnings, functools
import torch
from torch.utils.checkpoint import checkpoint
import ckptlint.runtime as runtime

warnings.filterwarnings("ignore")

def load(path):
    name = "fx_" + path.replace("/", "_").replace(".", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

def step(fn, steps=2, witness=True):
    import random; random.seed(0)
    torch.manual_seed(0)
    with runtime.audit(sample="all", witness=witness) as report:
        for _ in range(steps):
            out = fn()
            loss = out.sum() if isinstance(out, torch.Tensor) else sum(o.sum() for o in out if isinstance(o, torch.Tensor))
            loss.backward()
    return report

def show(label, report):
    verdicts = sorted({r.verdict for r in report.records})
    print(f"== {label}: {len(report.records)} calls probed, verdicts {verdicts}")
    for record in report.records:
        w = record.witness or {}
        print(f"   call {record.site['line']}: {record.verdict}; witness {w.get('status')} ({w.get('recomputed_ops')} recomputed ops)")
    for record in report.diverging():
        print(record.describe())

def x(*shape):
    return torch.randn(*shape, requires_grad=True)

CASES = {}
def case(fn):
    CASES[fn.__name__] = fn
    return fn

ROOT = str(__import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "regions") + "/"
def cases(kind):
    return ROOT + kind + "/"

@case
def attribute_store_then_inplace(kind):
    m = load(cases(kind) + "attribute_store_then_inplace.py")
    layer = m.Layer()
    return lambda: layer(x(3, 4))

@case
def cache_attribute_assignment(kind):
    m = load(cases(kind) + "cache_attribute_assignment.py")
    model = m.Model()
    return lambda: model(x(2, 3, 3))

@case
def huggingface_func_layer_call(kind):
    m = load(cases(kind) + "huggingface_func_layer_call.py")
    model = m.Model()
    model._gradient_checkpointing_func = functools.partial(checkpoint, use_reentrant=True)
    def run():
        out = model(x(2, 4))
        aux = [getattr(l, "aux_loss", None) for l in model.layers]
        aux = [a for a in aux if isinstance(a, torch.Tensor)]
        return [out, *aux] if aux else out
    return run

@case
def module_function_region(kind):
    m = load(cases(kind) + "module_function_region.py")
    return lambda: m.run(x(2, 3), x(2, 3))

@case
def restored_state(kind):
    m = load(cases(kind) + "restored_state.py")
    model = m.Model()
    return lambda: model(x(2, 4))

@case
def setattr_in_region(kind):
    m = load(cases(kind) + "setattr_in_region.py")
    probe = m.Probe()
    return lambda: probe.run(x(2, 4))

@case
def partial_region(kind):
    m = load(cases(kind) + "partial_region.py")
    stats = {}
    return lambda: m.run(x(2, 4), stats)


def simple(name, shape, cls="Model", make=None):
    """A case that builds the fixture's `cls()` (or `make(module)`) and feeds it `x(*shape)`."""
    def build(kind):
        m = load(cases(kind) + name + ".py")
        model = make(m) if make is not None else getattr(m, cls)()
        model.train()
        return lambda: model(x(*shape))
    build.__name__ = name
    CASES[name] = build

simple("rotary_cache", (2, 5, 8))
simple("lazy_padding", (2, 8))
simple("scratch_store", (2, 5, 8))
simple("call_parity", (2, 8))
simple("generation_cache", (2, 8))
simple("random_mask_store", (2, 5, 8))
simple("tensor_overwrite", (2, 8))
simple("fresh_norm_module", (2, 5, 8))

def rotary_longer(kind):
    m = load(cases(kind) + "rotary_cache.py")
    model = m.Model()
    lengths = iter([20, 20, 30])
    return lambda: model(x(2, next(lengths), 8))
CASES["rotary_longer"] = rotary_longer

simple("builder_value_cases", (2, 8), make=lambda m: m.Net(wide=True))
simple("stage_tuples_add_module", (2, 8, 4, 4), make=lambda m: m.Net(m.BasicBlock))
simple("balanced_stack", (2, 8), cls="Net")
simple("module_walk_flag", (2, 4, 12))
simple("config_helper_field", (2, 16), make=lambda m: m.Net(m.CONFIGS["large"]))

if __name__ == "__main__":
    kinds = sys.argv[1].split(",")
    names = sys.argv[2:] or list(CASES)
    for name in names:
        for kind in kinds:
            try:
                show(f"{kind}/{name}", step(CASES[name](kind)))
            except Exception as error:
                print(f"== {kind}/{name}: raised {type(error).__name__}: {error}")
