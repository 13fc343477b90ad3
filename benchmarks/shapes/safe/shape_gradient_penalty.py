"""Safe twin: the same WGAN-GP penalty through a critic checkpointed in non-reentrant mode.
Non-reentrant checkpointing supports `torch.autograd.grad` with `create_graph=True`: the recomputed
region is differentiated twice and the critic's gradients equal those of the run without
checkpointing.
"""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class Critic(nn.Module):
    def __init__(self, in_dim=6, width=8):
        super().__init__()
        self.stem = nn.Linear(in_dim, width)
        self.body = nn.Sequential(nn.Tanh(), nn.Linear(width, width), nn.Tanh())
        self.score = nn.Linear(width, 1)

    def forward(self, x):
        return self.score(checkpoint(self.body, self.stem(x), use_reentrant=False))


def gradient_penalty(critic, real, fake, alpha):
    mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    (slopes,) = torch.autograd.grad(critic(mixed).sum(), mixed, create_graph=True)
    return (slopes.norm(dim=1) - 1).pow(2).mean()


def critic_step(critic, real, fake, alpha, weight=10.0):
    loss = critic(fake).mean() - critic(real).mean() + weight * gradient_penalty(critic, real, fake, alpha)
    loss.backward()
    return loss
