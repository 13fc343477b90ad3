"""Safe twin: the model is checkpointed once. Either the composable
`torch.distributed._composable.checkpoint(module)` is applied to a model whose forward runs its
layers plainly, or the model's forward checkpoints its layers with
`checkpoint_sequential(..., use_reentrant=False)` and nothing wraps it again. Every layer runs
twice per step. Not a hazard."""
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


class PlainModel(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.layers = nn.Sequential(*[Layer(width) for _ in range(depth)])

    def forward(self, x):
        return self.layers(x)


class SegmentedModel(PlainModel):
    def forward(self, x):
        return checkpoint_sequential(self.layers, 2, x, use_reentrant=False)


def build(width=8, depth=4):
    model = PlainModel(width, depth)
    composable_checkpoint(model)
    return model


def build_segmented(width=8, depth=4):
    return SegmentedModel(width, depth)
