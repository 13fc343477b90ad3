"""A checkpoint call whose `preserve_rng_state` is a local flag bound to False a few lines
above it, around a block with dropout. The recompute does not restore the RNG state, so it
draws a different dropout mask from the forward's: the gradient is computed for activations the
forward never produced. A hazard."""
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
        flag = False
        hidden = self.embed(x)
        return checkpoint(self.block, hidden, use_reentrant=False, preserve_rng_state=flag)  # expect: CKP102@68


def build(width=8):
    return Model(width)
