"""A root module sharded with `fully_shard` (FSDP2) whose own forward checkpoints each of its
layers reentrantly. The layers are not sharded on their own: their parameters belong to the
root's unit, and each reentrant recompute re-runs them from a nested backward pass inside that
unit, a composition FSDP2 is not written for (it expects non-reentrant checkpointing). A hazard
under the contract, reported at the checkpoint call inside `forward`; on torch 2.13 with one
unit the gradients still come out right."""
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
            x = checkpoint(layer, x, use_reentrant=True)  # expect: CKP405@17
        return x


def build(width=8, depth=3, shard=True):
    model = ShardedRoot(width, depth)
    if shard:
        fully_shard(model)
    return model
