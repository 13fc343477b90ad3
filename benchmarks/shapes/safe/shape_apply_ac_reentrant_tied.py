"""Safe twin: the same tied model, its blocks sharded with `fully_shard` (FSDP2), and
`apply_activation_checkpointing` with a non-reentrant `checkpoint_wrapper` (through
`functools.partial`) that wraps each block's MLP, inside the sharded unit; the recompute runs in
the outer backward pass and the shared block's gradient sums both uses. Not a hazard."""
import functools

import torch
import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    apply_activation_checkpointing,
    checkpoint_wrapper,
)
from torch.distributed.fsdp import fully_shard


class MLP(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        return torch.tanh(self.fc(x))


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.mlp = MLP(width)

    def forward(self, x):
        return self.mlp(x)


class TiedModel(nn.Module):
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


def is_mlp(module):
    return isinstance(module, MLP)


def parallelize(model):
    fully_shard(model.layers[0])
    fully_shard(model.layers[1])
    wrapper = functools.partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
    apply_activation_checkpointing(model, checkpoint_wrapper_fn=wrapper, check_fn=is_mlp)
    fully_shard(model)
    return model


def build(width=8):
    return TiedModel(width)
