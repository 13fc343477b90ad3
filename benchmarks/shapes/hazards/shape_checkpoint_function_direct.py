"""Reentrant checkpointing spelled as the autograd Function itself:
`CheckpointFunction.apply(run_fn, preserve_rng_state, *args)` around a block that scales its
activations by a global amax, all-reduced (MAX) across ranks inside the block. The backward of
CheckpointFunction re-runs the block, so the all_reduce runs again during backward: one extra
collective per block per step, issued from the autograd engine. A hazard."""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.checkpoint import CheckpointFunction


class AmaxScaledBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        hidden = torch.tanh(self.fc(x))
        amax = hidden.detach().abs().amax()
        dist.all_reduce(amax, op=dist.ReduceOp.MAX)  # expect: CKP401@9
        return hidden / amax


class Stack(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.embed = nn.Linear(width, width)
        self.blocks = nn.ModuleList([AmaxScaledBlock(width) for _ in range(depth)])

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = x + CheckpointFunction.apply(block, True, x)
        return x


def build(width=8, depth=2):
    return Stack(width, depth)
