"""Safe twin: the same mixture-of-experts block wrapped by `checkpoint_wrapper`, whose router
only computes local token counts inside the forward; the counts are all-reduced after the
backward, outside the checkpointed region, to update the experts' load-balancing bias. The
replay recomputes local counts and issues no collective. Not a hazard."""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper


class Router(nn.Module):
    def __init__(self, width, num_experts):
        super().__init__()
        self.gate = nn.Linear(width, num_experts)
        self.num_experts = num_experts
        self.register_buffer("bias", torch.zeros(num_experts))

    def forward(self, x):
        probs = self.gate(x).softmax(dim=-1)
        choice = (probs + self.bias).argmax(dim=-1)
        counts = torch.bincount(choice, minlength=self.num_experts).float()
        return probs, choice, counts


class MoEBlock(nn.Module):
    def __init__(self, width, num_experts=4):
        super().__init__()
        self.router = Router(width, num_experts)
        self.experts = nn.ModuleList([nn.Linear(width, width) for _ in range(num_experts)])

    def forward(self, x):
        probs, choice, counts = self.router(x)
        out = torch.zeros_like(x)
        for index, expert in enumerate(self.experts):
            picked = choice == index
            out[picked] = expert(x[picked]) * probs[picked, index].unsqueeze(-1)
        return x + out, counts


def build(width=8, wrap=True):
    block = MoEBlock(width)
    return checkpoint_wrapper(block) if wrap else block


def train_step(model, batch, bias_rate=0.01):
    out, counts = model(batch)
    loss = out.pow(2).mean()
    loss.backward()
    dist.all_reduce(counts)
    with torch.no_grad():
        model.router.bias += bias_rate * torch.sign(counts.mean() - counts)
    return loss.detach()

