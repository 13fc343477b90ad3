"""`apply_activation_checkpointing` with a reentrant `checkpoint_wrapper` (through
`functools.partial`) applied to a model whose blocks, one of them tied between the first and
the last position, were already sharded with `fully_shard` (FSDP2): each wrapper runs reentrant
checkpointing around a sharded unit. The nested backward pass of the reentrant recompute makes
FSDP2 keep only one use's gradient for the tied unit, so the shared block trains on a wrong
gradient. A hazard."""
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


def is_block(module):
    return isinstance(module, Block)


def parallelize(model):
    fully_shard(model.layers[0])
    fully_shard(model.layers[1])
    wrapper = functools.partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.REENTRANT)
    apply_activation_checkpointing(model, checkpoint_wrapper_fn=wrapper, check_fn=is_block)  # expect: CKP403@5, CKP405@5
    fully_shard(model)
    return model


def build(width=8):
    return TiedModel(width)
