"""Safe twin: the same root module sharded with `fully_shard` (FSDP2), whose forward checkpoints
each of its layers non-reentrantly: the recompute runs inside the outer backward pass, the
composition FSDP2 is written for. Not a hazard."""
import torch
import torch.nn as nn
from torch.distributed.fsdp import fully_shard
from torch.utils.checkpoint import checkpoint


class Layer(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.tanh(self.proj(x))


class ShardedRoot(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.embed = nn.Linear(width, width)
        self.layers = nn.ModuleList([Layer(width) for _ in range(depth)])

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=False)
        return x


def build(width=8, depth=3, shard=True):
    model = ShardedRoot(width, depth)
    if shard:
        fully_shard(model)
    return model
