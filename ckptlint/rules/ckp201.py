"""CKP201: Python `random` or NumPy draws inside a checkpointed region."""

from ckptlint.analysis.regions.summary import RANDOM_DRAW
from ckptlint.rules.base import RegionRule


class UnsavedRandomDraw(RegionRule):
    code = "CKP201"
    name = "unsaved-random-draw"
    summary = "The region draws from Python's `random` or NumPy, whose state checkpoint does not save."
    explanation = """
        With `preserve_rng_state=True` (the default) checkpoint saves and restores torch's
        generators (CPU and the inputs' CUDA devices), nothing else. A draw from Python's
        `random`, from NumPy's global generator, or from a generator object that outlives
        the region gives a different number in the replay: stochastic depth decides to
        drop a layer in forward and keep it in backward, a random crop size changes, a
        random expert is picked twice. The gradient is computed for a different network
        than the loss; shapes usually match, so nothing fails.

        A generator created inside the region with a fixed seed replays identically and
        is not flagged; torch's own random ops (`torch.rand`, dropout) are restored and
        are not flagged either.
    """
    bad = """
        import random

        import torch
        from torch.utils.checkpoint import checkpoint


        class Block(torch.nn.Module):
            def forward(self, x):
                if random.random() < 0.1:  # stochastic depth
                    return x
                return self.mlp(x)


        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Block()

            def forward(self, x):
                return checkpoint(self.block, x, use_reentrant=False)
    """
    good = """
        import torch
        from torch.utils.checkpoint import checkpoint


        class Block(torch.nn.Module):
            def forward(self, x):
                if torch.rand(()) < 0.1:  # torch's RNG is saved and restored
                    return x
                return self.mlp(x)


        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Block()

            def forward(self, x):
                return checkpoint(self.block, x, use_reentrant=False)
    """
    remedy = """
        Draw with torch (`torch.rand`, `torch.randint`, `torch.bernoulli`), whose state
        checkpoint restores, or draw outside the region and pass the result in as an
        argument.
    """
    under_contexts = """
        Under `torch.compile`, torch 2.14 traces a Python draw once: the value becomes a constant of
        the graph, so forward and recompute agree but compiled and eager runs differ (warning, "traced
        once under compile"). torch 2.13 refuses the draw instead: with `fullgraph=True` compile raises
        (error, "rejected by compile"), without it the region graph-breaks and runs eager, drawing again
        at recompute (warning, "replayed after a graph break"). With no torch version known, both are
        named. Under SAC, a policy that saves every op keeps backward from reading anything recomputed:
        "neutralised by a saved op" (note; the draw is still made again, so Python's stream advances
        twice); an op list masks the draw only where backward reads nothing downstream of it but saved
        outputs (saving `relu` in `mm(relu(x - random.random()), w)` does, saving only `mm` does not),
        so the finding stays a warning. See [regions.md](../regions.md#execution-contexts) for how the context is read; the finding's site says it and the severity follows.
    """
    confirmed_by = frozenset({"rng-python", "recompute"})
    kinds = frozenset({RANDOM_DRAW})
    messages = {
        "python-global": "`{callee}()` draws from Python's global `random` generator, which checkpoint does not save: "
        "the replay draws a different number",
        "numpy-global": "`{callee}()` draws from NumPy's global generator, which checkpoint does not save: "
        "the replay draws different numbers",
        "generator": "`{callee}()` draws from a {library} generator that checkpoint does not save: "
        "the replay draws different numbers",
    }
