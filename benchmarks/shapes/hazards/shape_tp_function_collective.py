"""Tensor-parallel mappings written as autograd Functions whose forward runs a collective
(`_ReduceFromRegion` all-reduces, `_GatherFromRegion` all-gathers), applied from the forward of
layers that the model checkpoints non-reentrantly. The recompute in backward re-runs each Function's
forward, so every all_reduce and all_gather runs a second time per step: extra communication, and a
desynchronised collective if ranks recompute differently. A hazard.
"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class _ReduceFromRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)  # expect: CKP401@9
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class _GatherFromRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, x.contiguous())  # expect: CKP401@9
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx, grad):
        return grad.chunk(dist.get_world_size(), dim=-1)[dist.get_rank()]


class ParallelMLP(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.up = nn.Linear(width, width)
        self.down = nn.Linear(width * dist.get_world_size(), width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        hidden = _GatherFromRegion.apply(torch.relu(self.up(x)))
        reduced = _ReduceFromRegion.apply(self.down(hidden))
        return self.norm(x + reduced)


class TensorParallelModel(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.embed = nn.Linear(width, width)
        self.blocks = nn.ModuleList([ParallelMLP(width) for _ in range(depth)])

    def forward(self, x, use_checkpoint=True):
        x = self.embed(x)
        for block in self.blocks:
            if use_checkpoint:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return x


def build(width=8, depth=2):
    return TensorParallelModel(width, depth)
