"""Safe twin: the same tied stack, but each block is first wrapped by a non-reentrant
`checkpoint_wrapper` (the shared block once, and that one wrapper placed at both positions), and
`fully_shard` is applied to the wrappers: checkpointing runs inside each sharded unit, in the
outer backward pass, and the shared block's gradient sums both uses. Not a hazard."""
import torch
import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
from torch.distributed.fsdp import fully_shard


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        return torch.tanh(self.proj(x))


class TiedStack(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.embed = nn.Linear(width, width)
        shared = Block(width)
        self.layers = nn.ModuleList([shared, Block(width), shared])

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return x


def shard(model):
    shared = checkpoint_wrapper(model.layers[0], checkpoint_impl=CheckpointImpl.NO_REENTRANT)
    middle = checkpoint_wrapper(model.layers[1], checkpoint_impl=CheckpointImpl.NO_REENTRANT)
    model.layers[0], model.layers[1], model.layers[2] = shared, middle, shared
    fully_shard(shared)
    fully_shard(middle)
    fully_shard(model)
    return model


def build(width=8):
    return TiedStack(width)
