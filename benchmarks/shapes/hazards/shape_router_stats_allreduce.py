"""A mixture-of-experts block wrapped by `checkpoint_wrapper` (non-reentrant) whose router
all-reduces its per-expert token counts inside the forward, to compute the load-balancing
auxiliary loss from global statistics. The recompute in backward re-runs the router, so the
all_reduce runs a second time per block per step, from inside the autograd engine. A hazard."""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper


class Router(nn.Module):
    def __init__(self, width, num_experts):
        super().__init__()
        self.gate = nn.Linear(width, num_experts)
        self.num_experts = num_experts

    def forward(self, x):
        probs = self.gate(x).softmax(dim=-1)
        choice = probs.argmax(dim=-1)
        counts = torch.bincount(choice, minlength=self.num_experts).float()
        dist.all_reduce(counts)  # expect: CKP401@9
        fraction = counts / counts.sum()
        aux_loss = self.num_experts * (fraction * probs.mean(dim=0)).sum()
        return probs, choice, aux_loss


class MoEBlock(nn.Module):
    def __init__(self, width, num_experts=4):
        super().__init__()
        self.router = Router(width, num_experts)
        self.experts = nn.ModuleList([nn.Linear(width, width) for _ in range(num_experts)])

    def forward(self, x):
        probs, choice, aux_loss = self.router(x)
        out = torch.zeros_like(x)
        for index, expert in enumerate(self.experts):
            picked = choice == index
            out[picked] = expert(x[picked]) * probs[picked, index].unsqueeze(-1)
        return x + out, aux_loss


def build(width=8, wrap=True):
    block = MoEBlock(width)
    return checkpoint_wrapper(block) if wrap else block


def train_step(model, batch):
    out, aux_loss = model(batch)
    loss = out.pow(2).mean() + 0.01 * aux_loss
    loss.backward()
    return loss.detach()
