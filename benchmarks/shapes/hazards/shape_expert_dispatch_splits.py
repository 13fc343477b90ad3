"""Expert-parallel MoE layers (one expert per rank) checkpointed whole, non-reentrantly: the
token dispatch and combine are all-to-alls whose split sizes the forward computes from its own
routing, once through a helper that returns the splits, once through attributes written earlier
in the same forward. The recompute in backward re-runs the count exchange and both all-to-alls
with split sizes recomputed from the replayed routing; a rank whose replay routes differently
posts mismatched sizes and the group hangs. A hazard."""
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
        dist.all_to_all_single(received, send)  # expect: CKP401@9
        return send.tolist(), received.tolist()

    def forward(self, x):
        gate, routing = self.router(x).softmax(dim=-1).max(dim=-1)
        order = routing.argsort()
        send_splits, receive_splits = self._split_sizes(routing)
        group = dist.group.WORLD
        tokens = funcol.all_to_all_single_autograd(x[order], receive_splits, send_splits, group)  # expect: CKP402@18
        processed = torch.relu(self.expert(tokens))
        combined = funcol.all_to_all_single_autograd(processed, send_splits, receive_splits, group)  # expect: CKP402@20
        return combined[order.argsort()] * gate.unsqueeze(-1)


class AttributeSplitMoE(ExpertParallelMoE):
    def forward(self, x):
        gate, routing = self.router(x).softmax(dim=-1).max(dim=-1)
        order = routing.argsort()
        counts = torch.bincount(routing, minlength=dist.get_world_size())
        self.input_splits = counts.tolist()
        self.output_splits = self._split_sizes(routing)[1]
        group = dist.group.WORLD
        tokens = funcol.all_to_all_single_autograd(x[order], self.output_splits, self.input_splits, group)  # expect: CKP402@18
        processed = torch.relu(self.expert(tokens))
        combined = funcol.all_to_all_single_autograd(processed, self.input_splits, self.output_splits, group)  # expect: CKP402@20
        return combined[order.argsort()] * gate.unsqueeze(-1)


class MoEModel(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.embed = nn.Linear(width, width)
        self.moe = nn.ModuleList([ExpertParallelMoE(width), AttributeSplitMoE(width)])

    def forward(self, x, use_checkpoint=True):
        x = self.embed(x)
        for layer in self.moe:
            x = x + (checkpoint(layer, x, use_reentrant=False) if use_checkpoint else layer(x))
        return x


def build(width=8):
    return MoEModel(width)
