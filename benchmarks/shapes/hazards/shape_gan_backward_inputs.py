"""CKP304: a GAN's generator step calls `backward(inputs=...)` through a reentrant generator. Reentrant
checkpointing re-runs its region inside a nested backward, which autograd forbids when `backward` is
restricted to `inputs`: the generator step raises. The discriminator step is fine: it backpropagates
from detached fakes and never reaches the generator's region.
"""
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Generator(nn.Module):
    def __init__(self, noise_dim=4, width=8, out_dim=6):
        super().__init__()
        self.stem = nn.Linear(noise_dim, width)
        self.body = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, out_dim))

    def forward(self, noise):
        return checkpoint(self.body, self.stem(noise), use_reentrant=True)


def build_discriminator(in_dim=6, width=8):
    return nn.Sequential(nn.Linear(in_dim, width), nn.LeakyReLU(0.2), nn.Linear(width, 1))


def alternating_step(gen, disc, gen_opt, disc_opt, real, noise):
    fake = gen(noise)
    disc_loss = F.softplus(-disc(real)).mean() + F.softplus(disc(fake.detach())).mean()
    disc_opt.zero_grad()
    disc_loss.backward(inputs=list(disc.parameters()))
    disc_opt.step()

    gen_loss = F.softplus(-disc(fake)).mean()
    gen_opt.zero_grad()
    gen_loss.backward(inputs=list(gen.parameters()))  # expect: CKP304@5
    gen_opt.step()
    return disc_loss.detach(), gen_loss.detach()
