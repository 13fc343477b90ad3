"""Train TinyGPT on random tokens for a few steps (run: python -m tinygpt.train).

It fails on its second step, on purpose: the hazards `ckptlint examples/` reports are real.
"""
import sys

import torch

from tinygpt.blocks import AUX_LOSSES
from tinygpt.model import TinyGPT


def main(steps: int = 3) -> None:
    torch.manual_seed(0)
    model = TinyGPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(steps):
        tokens = torch.randint(0, 256, (8, 32))
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten())
        loss = loss + 0.01 * sum(AUX_LOSSES)
        AUX_LOSSES.clear()
        optimizer.zero_grad()
        try:
            loss.backward()
        except RuntimeError as error:
            if "backward through the graph a second time" not in str(error):
                raise
            sys.exit(
                f"tinygpt.train: step {step + 1} failed as ckptlint predicts (CKP202 at tinygpt/blocks.py:32): "
                "backward replays the checkpointed Router.forward, which appends to the module-level "
                "AUX_LOSSES again; those replayed losses belong to a graph backward has already freed, and "
                "the next step sums them into its loss. Run `ckptlint examples/` to see every hazard."
            )
        optimizer.step()


if __name__ == "__main__":
    main()
