"""Safe twin: the same expert-parallel MoE layers, with split sizes computed from the routing by
a helper and through attributes, but the layers are not checkpointed whole: only the expert
computation between the dispatch and the combine is checkpointed. The count exchange and both
all-to-alls run once per step, outside every region; the replay touches no collective. Not a
hazard."""
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class ExpertParallelMoE(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.router = nn.Linear(width, dist.get_world_size())
        self.expert = nn.Linear(width, width)

    def _split_sizes(self, routing):
        send = torch.bincount(routing, minlength=dist.get_world_size())
        received = torch.empty_like(send)
        dist.all_to_all_single(received, send)
        return send.tolist(), received.tolist()

    def _expert_mlp(self, tokens):
        return torch.relu(self.expert(tokens))

    def forward(self, x):
        gate, routing = self.router(x).softmax(dim=-1).max(dim=-1)
        order = routing.argsort()
        send_splits, receive_splits = self._split_sizes(routing)
        group = dist.group.WORLD
        tokens = funcol.all_to_all_single_autograd(x[order], receive_splits, send_splits, group)
        processed = checkpoint(self._expert_mlp, tokens, use_reentrant=False)
        combined = funcol.all_to_all_single_autograd(processed, send_splits, receive_splits, group)
        return combined[order.argsort()] * gate.unsqueeze(-1)


class AttributeSplitMoE(ExpertParallelMoE):
    def forward(self, x):
        gate, routing = self.router(x).softmax(dim=-1).max(dim=-1)
        order = routing.argsort()
        counts = torch.bincount(routing, minlength=dist.get_world_size())
        self.input_splits = counts.tolist()
        self.output_splits = self._split_sizes(routing)[1]
        group = dist.group.WORLD
        tokens = funcol.all_to_all_single_autograd(x[order], self.output_splits, self.input_splits, group)
        processed = checkpoint(self._expert_mlp, tokens, use_reentrant=False)
        combined = funcol.all_to_all_single_autograd(processed, self.input_splits, self.output_splits, group)
        return combined[order.argsort()] * gate.unsqueeze(-1)


class MoEModel(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.embed = nn.Linear(width, width)
        self.moe = nn.ModuleList([ExpertParallelMoE(width), AttributeSplitMoE(width)])

    def forward(self, x):
        x = self.embed(x)
        for layer in self.moe:
            x = x + layer(x)
        return x


def build(width=8):
    return MoEModel(width)
