"""Safe twin: the same checkpoint call with `preserve_rng_state` given by a local flag, here
bound to True: the recompute restores the forward's RNG state and draws the same dropout mask.
Not a hazard."""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class DropoutBlock(nn.Module):
    def __init__(self, width, p=0.5):
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return x + self.drop(torch.tanh(self.proj(x)))


class Model(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.embed = nn.Linear(width, width)
        self.block = DropoutBlock(width)

    def forward(self, x):
        flag = True
        hidden = self.embed(x)
        return checkpoint(self.block, hidden, use_reentrant=False, preserve_rng_state=flag)


def build(width=8):
    return Model(width)
