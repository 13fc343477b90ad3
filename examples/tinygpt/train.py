"""Train TinyGPT on random tokens for a few steps (run: python -m tinygpt.train)."""
import torch

from tinygpt.blocks import AUX_LOSSES
from tinygpt.model import TinyGPT


def main(steps: int = 3) -> None:
    torch.manual_seed(0)
    model = TinyGPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(steps):
        tokens = torch.randint(0, 256, (8, 32))
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten())
        loss = loss + 0.01 * sum(AUX_LOSSES)
        AUX_LOSSES.clear()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
