"""The composable `torch.distributed._composable.checkpoint(module)` applied to a model whose own
forward already checkpoints its layers with `checkpoint_sequential(..., use_reentrant=False)`.
The regions nest: the outer recompute re-runs the forward, which builds the inner checkpoints,
and their own recompute runs the layers once more, so every layer runs three times per step
instead of two, for no memory gain. A hazard (the model is checkpointed twice)."""
import torch
import torch.nn as nn
from torch.distributed._composable import checkpoint as composable_checkpoint
from torch.utils.checkpoint import checkpoint_sequential


class Layer(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.tanh(self.proj(x))


class SegmentedModel(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.layers = nn.Sequential(*[Layer(width) for _ in range(depth)])

    def forward(self, x):
        return checkpoint_sequential(self.layers, 2, x, use_reentrant=False)


def build(width=8, depth=4):
    model = SegmentedModel(width, depth)
    composable_checkpoint(model)  # expect: CKP404@5
    return model
