"""One training step of a tiny Llama from the real-model corpus (transformers, pinned in
realmodels/pins.py; random weights, no download) with Hugging Face gradient checkpointing
enabled: the script docs/performance.md runs under `ckptlint confirm --cost`.

    python benchmarks/real_models.py setup /tmp/venv-rm
    PYTHONPATH=. /tmp/venv-rm/bin/python -m ckptlint confirm --cost benchmarks/checkpoint_cost.py
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from realmodels.zoo_common import torchvision_without_native_ops  # noqa: E402

torchvision_without_native_ops()  # transformers imports torchvision, a CUDA wheel on a CPU torch
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

CONFIG = LlamaConfig(
    vocab_size=1000,
    hidden_size=128,
    intermediate_size=512,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
)
BATCH, SEQUENCE = 2, 64

torch.manual_seed(0)
model = LlamaForCausalLM(CONFIG)
model.gradient_checkpointing_enable()  # transformers 5.24: use_reentrant=False by default
model.train()
ids = torch.randint(0, CONFIG.vocab_size, (BATCH, SEQUENCE))
model(input_ids=ids, labels=ids).loss.backward()
print("step done")
