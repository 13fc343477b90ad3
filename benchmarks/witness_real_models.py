"""The runtime companion (replay and witness) on real Hugging Face models, tiny configurations.

    python benchmarks/witness_real_models.py [MODEL_TYPE ...] [--mode reentrant|non-reentrant]

Needs `transformers` (installed next to torch; weights are never downloaded: every model is
built from a tiny configuration with random weights). For each model type it enables
gradient checkpointing, runs one training step (`model.train()`, random token ids, loss,
backward) under `ckptlint.runtime.audit(witness=True)`, and prints per checkpointed layer
class: the replay's verdict, the witness's status and the first reason. It also checks the
companion left the step bit-identical (gradients of a twin model stepped without it).
"""

from __future__ import annotations

import argparse
import collections
import copy
import sys
import traceback

import torch

import ckptlint.runtime as runtime

TINY = dict(
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=128,
    n_embd=32,
    n_layer=2,
    n_head=4,
    d_model=32,
    d_ff=64,
    d_kv=8,
    num_layers=2,
    num_heads=4,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    block_size=4,
    num_random_blocks=2,
    pad_token_id=0,
)
DEFAULT_TYPES = (
    "llama", "mistral", "qwen2", "gemma", "phi", "gpt2", "gpt_neox", "opt", "bert", "roberta",
    "electra", "big_bird", "t5", "bart", "deberta-v2", "falcon",
)  # fmt: skip


def build(model_type: str) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM

    config = AutoConfig.for_model(model_type, **TINY)
    for factory in (AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM):
        try:
            return factory.from_config(config)
        except (ValueError, KeyError):
            continue
    raise ValueError(f"no causal, masked or seq2seq head for {model_type}")


def step(model: torch.nn.Module, seed: int) -> torch.Tensor:
    torch.manual_seed(seed)
    ids = torch.randint(1, 128, (2, 64))  # long enough for BigBird's block-sparse (random) attention
    kwargs = {"labels": ids}
    if getattr(model.config, "is_encoder_decoder", False):
        kwargs["decoder_input_ids"] = ids
    loss = model(input_ids=ids, **kwargs).loss
    loss.backward()
    return loss.detach()


def audit_model(model_type: str, reentrant: bool) -> tuple[list[str], bool]:
    torch.manual_seed(0)
    model = build(model_type)
    model.train()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    twin = copy.deepcopy(model)
    with runtime.audit(sample="first", witness=True) as report:
        loss = step(model, 1)
    twin_loss = step(twin, 1)
    identical = torch.equal(loss, twin_loss) and all(
        (a.grad is None and b.grad is None) or (a.grad is not None and b.grad is not None and torch.equal(a.grad, b.grad))
        for a, b in zip(model.parameters(), twin.parameters())
    )
    by_region: dict[str, list[str]] = collections.defaultdict(list)
    for record in report.records:
        witness = (record.witness or {}).get("status", "-")
        first = record.reasons[0] if record.reasons else None
        why = f" {first['category']} {first['name']}: {first.get('detail', '')[:90]}" if first else ""
        by_region[record.region.get("name", "?")].append(f"{record.verdict}/witness {witness}{why}")
    lines = [f"  {region}: {'; '.join(sorted(set(items)))}" for region, items in sorted(by_region.items())]
    return lines, identical


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("types", nargs="*", default=list(DEFAULT_TYPES))
    parser.add_argument("--mode", choices=("reentrant", "non-reentrant"), default="non-reentrant")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, mode {args.mode}")
    for model_type in args.types:
        try:
            lines, identical = audit_model(model_type, args.mode == "reentrant")
        except Exception as exc:  # noqa: BLE001 - one model's failure must not stop the survey
            print(f"{model_type}: not run ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})")
            if "-v" in sys.argv:
                traceback.print_exc()
            continue
        print(f"{model_type}: step {'bit-identical' if identical else 'CHANGED by the companion'}, {len(lines)} region class(es)")
        print("\n".join(lines) if lines else "  no checkpoint call observed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
