"""One block instance shared (tied) between the first and the last position of a stack; the
shared block and its neighbour are each sharded with `fully_shard` (FSDP2), and the stack's
forward checkpoints every block reentrantly, around the sharded units. Reentrant checkpointing
runs each unit's backward in a nested backward pass, and FSDP2's post-backward for the tied unit
then keeps only one position's gradient: the shared block's gradient silently loses the other
use. A hazard."""
import torch
import torch.nn as nn
from torch.distributed.fsdp import fully_shard
from torch.utils.checkpoint import checkpoint


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

    def forward(self, x, use_checkpoint=True):
        x = self.embed(x)
        for layer in self.layers:
            if use_checkpoint:
                x = checkpoint(layer, x, use_reentrant=True)  # expect: CKP403@21, CKP405@21
            else:
                x = layer(x)
        return x


def shard(model):
    fully_shard(model.layers[0])
    fully_shard(model.layers[1])
    fully_shard(model)
    return model


def build(width=8):
    return TiedStack(width)
