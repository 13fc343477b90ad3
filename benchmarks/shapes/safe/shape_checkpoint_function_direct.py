"""Safe twin: the same amax-scaled blocks, whose all_reduce runs once per block in the forward,
called without checkpointing; nothing replays the block, so the collective is never issued again
in backward. Not a hazard."""
import torch
import torch.distributed as dist
import torch.nn as nn


class AmaxScaledBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        hidden = torch.tanh(self.fc(x))
        amax = hidden.detach().abs().amax()
        dist.all_reduce(amax, op=dist.ReduceOp.MAX)
        return hidden / amax


class Stack(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.embed = nn.Linear(width, width)
        self.blocks = nn.ModuleList([AmaxScaledBlock(width) for _ in range(depth)])

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = x + block(x)
        return x


def build(width=8, depth=2):
    return Stack(width, depth)
