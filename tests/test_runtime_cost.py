"""`confirm --cost`: the activation bytes checkpointing frees and the FLOPs its recompute adds,
asserted exactly on two fixed blocks; hints; the user's run untouched; the CLI's text and JSON.

Conventions the expected numbers follow (derived by hand, not copied from a run):
- bytes are whole storages, float32 = 4 bytes an element, each storage counted once;
- FlopCounterMode counts a (m, k) @ (k, n) product as 2*m*k*n (addmm and mm alike), a
  convolution as 2 * batch * out_channels * in_channels * kh * kw * out_h * out_w, and
  elementwise ops and norms as 0;
- autograd saves an op's inputs before it computes and its outputs after; non-reentrant
  checkpoint stops its recompute as soon as the last tensor backward needs is rebuilt
  (early stop), reentrant checkpoint recomputes the whole forward.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.checkpoint import checkpoint

from ckptlint import runtime
from conftest import REPO, run_cli

IMPORTABLE = {"PYTHONPATH": str(REPO)}  # the scripts run from tmp_path: ckptlint from this checkout


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))


def _conv() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU()
    )


def _cost(region: torch.nn.Module, x: torch.Tensor, use_reentrant: bool) -> dict:
    with runtime.audit(cost=True) as report:
        checkpoint(region, x, use_reentrant=use_reentrant).sum().backward()
    (record,) = report.records
    assert record.verdict == "equivalent"
    return record.cost


# MLP Linear(64, 256) - GELU - Linear(256, 64) on x (8, 64) float32, x requiring grad.
# The plain forward saves:
#   linear 1 (addmm(b1, x, W1.t())): x (8x64: 2048 B, an input) and W1.t() (W1's storage,
#     256x64: 65536 B, a parameter)
#   gelu: its input h1 = linear 1's output (8x256: 8192 B, an activation)
#   linear 2: its input g = gelu's output (8x256: 8192 B, an activation) and W2.t() (65536 B)
# so 16384 B of activations, 2048 B of input, 131072 B of parameters, no output (addmm does
# not save its result). The checkpointed forward saves only x (non-reentrant checkpoint's
# inputs, reentrant's save_for_backward): 2048 B, by reference. Freed: 16384 B.
# FLOPs: each linear is 2*8*64*256 = 262144 forward; the forward 524288.
#   non-reentrant: the last tensor backward needs is g, saved by linear 2 before it computes,
#     so the recompute stops there: linear 1 only, 262144 FLOPs;
#   reentrant: the whole forward again, 524288 FLOPs.
# MiB per GFLOP (non-reentrant): (16384 / 2**20) / (262144 / 1e9) = 1e9 / 2**24 = 59.604644775390625.
MLP_SAVED_PLAIN = {"activation": 16384, "output": 0, "input": 2048, "parameter": 131072, "captured": 0}
MLP_SAVED_CHECKPOINTED = {"activation": 0, "output": 0, "input": 2048, "parameter": 0, "captured": 0}


@pytest.mark.parametrize(("use_reentrant", "recomputed"), [(False, 262144), (True, 524288)])
def test_mlp_block_bytes_and_flops_exactly(use_reentrant: bool, recomputed: int) -> None:
    cost = _cost(_mlp(), torch.randn(8, 64, requires_grad=True), use_reentrant)
    assert cost["saved_bytes"] == {"plain": MLP_SAVED_PLAIN, "checkpointed": MLP_SAVED_CHECKPOINTED}
    assert cost["freed_bytes"] == 16384
    assert cost["forward_flops"] == 524288
    assert cost["recomputed_flops"] == recomputed
    assert cost["mib_per_gflop"] == pytest.approx((16384 / 2**20) / (recomputed / 1e9), rel=1e-12)  # 1e9 / 2**24 non-reentrant
    assert sorted((s["shape"], s["bytes"], s["kind"], s["saved_by"]) for s in cost["largest_saved"]) == [
        ([8, 256], 8192, "activation", ["gelu"]),
        ([8, 256], 8192, "activation", ["linear"]),
    ]
    assert cost["forward_ops"] == {"aten.addmm": 2, "aten.gelu": 1}
    assert cost["hints"] == []


# Conv block Conv2d(3, 8, 3, padding=1) - ReLU - Conv2d(8, 8, 3, padding=1) - ReLU on x
# (2, 3, 8, 8) float32, x requiring grad. The plain forward saves:
#   conv 1: x (2*3*8*8*4 = 1536 B, input) and W1 (8*3*3*3*4 = 864 B, parameter)
#   relu 1: its result r1 (2*8*8*8*4 = 4096 B, an activation)
#   conv 2: its input, r1 again (the same storage: counted once) and W2 (8*8*3*3*4 = 2304 B)
#   relu 2: its result r2 (4096 B), the region's output: held by the caller, not freed
# so 4096 B of activations, 4096 B of output, 1536 B of input, 864 + 2304 = 3168 B of
# parameters; checkpointed: x alone, 1536 B. Freed: 4096 B.
# FLOPs: conv 1 is 2*2*8*3*3*3*8*8 = 55296, conv 2 is 2*2*8*8*3*3*8*8 = 147456; forward 202752.
# The last tensor backward needs is relu 2's result, saved after relu 2 computes: even
# non-reentrant checkpoint recomputes the whole forward, 202752 FLOPs.
def test_conv_block_bytes_and_flops_exactly() -> None:
    cost = _cost(_conv(), torch.randn(2, 3, 8, 8, requires_grad=True), False)
    assert cost["saved_bytes"] == {
        "plain": {"activation": 4096, "output": 4096, "input": 1536, "parameter": 3168, "captured": 0},
        "checkpointed": {"activation": 0, "output": 0, "input": 1536, "parameter": 0, "captured": 0},
    }
    assert cost["freed_bytes"] == 4096
    assert cost["forward_flops"] == 202752
    assert cost["recomputed_flops"] == 202752
    assert cost["largest_saved"] == [
        {"shape": [2, 8, 8, 8], "dtype": "float32", "bytes": 4096, "kind": "activation", "saved_by": ["relu", "conv2d"]},
        {"shape": [2, 8, 8, 8], "dtype": "float32", "bytes": 4096, "kind": "output", "saved_by": ["relu"]},
    ]
    assert [hint["kind"] for hint in cost["hints"]] == ["output-saved"]
    assert "4.0 KiB the region saves is its own output" in cost["hints"][0]["message"]


# Attention on the CPU: F.scaled_dot_product_attention(q, q, q) with q (2, 4, 16, 8) float32
# runs `_scaled_dot_product_flash_attention_for_cpu`, for which torch 2.13 registers no FLOP
# formula; the companion counts it with torch's own (sdpa_flop_count): q @ k^T is
# 2 * (2*4) * 16 * 16 * 8 = 32768, attention @ v the same: 65536, recomputed in full (the
# kernel saves its output and logsumexp after computing). Saved: q (= k = v, one storage:
# 2*4*16*8*4 = 4096 B, the input), the output (4096 B, not freed) and logsumexp (2, 4, 16):
# 512 B, the only activation.
def test_cpu_attention_counts_flops_with_torchs_formula() -> None:
    cost = _cost(_Attend(), torch.randn(2, 4, 16, 8, requires_grad=True), False)
    assert cost["forward_ops"] == {"aten._scaled_dot_product_flash_attention_for_cpu": 1}
    assert (cost["forward_flops"], cost["recomputed_flops"]) == (65536, 65536)
    assert cost["saved_bytes"]["plain"] == {"activation": 512, "output": 4096, "input": 4096, "parameter": 0, "captured": 0}
    assert cost["freed_bytes"] == 512


class _Attend(torch.nn.Module):
    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, q, q)


def _hint_kinds(region: torch.nn.Module, x: torch.Tensor) -> list[str]:
    return [hint["kind"] for hint in _cost(region, x, False)["hints"]]


def test_hints_for_one_cheap_op() -> None:
    # LayerNorm(64) on (8, 64): native_layer_norm saves x (input), weight and bias
    # (parameters), mean and rstd (8x1 each: 32 B + 32 B): 64 B freed, no FLOPs counted
    cost = _cost(torch.nn.LayerNorm(64), torch.randn(8, 64, requires_grad=True), False)
    assert cost["freed_bytes"] == 64 and cost["recomputed_flops"] == 0 and cost["mib_per_gflop"] is None
    assert [hint["kind"] for hint in cost["hints"]] == ["single-cheap-op"]
    assert "one op (aten.native_layer_norm)" in cost["hints"][0]["message"]
    # GELU alone saves only its input, which is the region's input: frees nothing
    assert _hint_kinds(torch.nn.GELU(), torch.randn(8, 64, requires_grad=True)) == ["single-cheap-op", "frees-nothing"]
    # one Linear is one op too, but not a cheap one (2*8*64*64 FLOPs counted); it saves only x
    # and its weight, by reference
    assert _hint_kinds(torch.nn.Linear(64, 64), torch.randn(8, 64, requires_grad=True)) == ["frees-nothing"]


def test_hint_for_an_embedding() -> None:
    # embedding backward keeps only the indices (4x8 int64: 256 B, the input), not the weight
    cost = _cost(torch.nn.Embedding(100, 16), torch.randint(0, 100, (4, 8)), False)
    assert cost["freed_bytes"] == 0
    assert cost["saved_bytes"]["plain"]["input"] == 256
    assert [hint["kind"] for hint in cost["hints"]] == ["embedding"]


def test_hint_for_a_block_whose_output_is_all_it_saves() -> None:
    # Linear then ReLU: linear saves x and W.t() (by reference), relu its result: the output
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
    cost = _cost(block, torch.randn(4, 16, requires_grad=True), False)
    assert cost["saved_bytes"]["plain"]["output"] == 4 * 16 * 4 and cost["freed_bytes"] == 0
    assert [hint["kind"] for hint in cost["hints"]] == ["output-saved", "frees-nothing"]


def test_without_cost_no_record_carries_one() -> None:
    with runtime.audit() as report:
        checkpoint(_mlp(), torch.randn(8, 64, requires_grad=True), use_reentrant=False).sum().backward()
    assert report.records[0].cost is None and "cost" not in report.records[0].to_dict()


class _Noisy(torch.nn.Module):
    """Dropout (torch's stream), BatchNorm (running statistics), a Python and a NumPy draw."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.drop = torch.nn.Dropout(0.3)
        self.bn = torch.nn.BatchNorm1d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = 1.0 + 0.01 * random.random() + 0.01 * float(np.random.rand())
        return self.bn(self.drop(torch.relu(self.lin(x)))) * scale


def _train(cost: bool | None, use_reentrant: bool) -> tuple:
    """Three optimizer steps; `cost` None runs without the companion."""
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    blocks = torch.nn.ModuleList([_Noisy() for _ in range(2)])
    head = torch.nn.Linear(8, 1)
    parameters = [*blocks.parameters(), *head.parameters()]
    optimizer = torch.optim.Adam(parameters, lr=1e-2)
    records = []
    for _ in range(3):
        with runtime.audit(sample="all", cost=cost) if cost is not None else _Unobserved() as report:
            x = torch.randn(16, 8, requires_grad=True)
            for block in blocks:
                x = checkpoint(block, x, use_reentrant=use_reentrant)
            loss = head(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        records.extend(report.records if report is not None else [])
    state = {**{f"blocks.{k}": v for k, v in blocks.state_dict().items()}, **{f"head.{k}": v for k, v in head.state_dict().items()}}
    grads = [p.grad for p in parameters]
    moments = [t for s in optimizer.state_dict()["state"].values() for t in s.values()]
    return state, grads, moments, torch.get_rng_state(), random.getstate(), np.random.get_state(), records


class _Unobserved:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_cost_replays_leave_the_run_bit_identical(use_reentrant: bool) -> None:
    unobserved = _train(None, use_reentrant)
    probed = _train(False, use_reentrant)
    costed = _train(True, use_reentrant)
    assert all(r.cost is None for r in probed[6]) and len(costed[6]) == 6
    assert all(r.cost is not None and r.cost["freed_bytes"] > 0 for r in costed[6])
    for other in (probed, costed):
        assert other[0].keys() == unobserved[0].keys()
        for name, value in unobserved[0].items():
            assert torch.equal(value, other[0][name]), name  # parameters and buffers (running stats)
        assert all(torch.equal(a, b) for a, b in zip(unobserved[1], other[1]))  # .grad
        assert all(torch.equal(torch.as_tensor(a), torch.as_tensor(b)) for a, b in zip(unobserved[2], other[2]))
        assert torch.equal(unobserved[3], other[3])  # torch's stream
        assert unobserved[4] == other[4]  # Python's
        assert unobserved[5][0] == other[5][0] and (unobserved[5][1] == other[5][1]).all() and unobserved[5][2:] == other[5][2:]


STEP = """\
import torch
from torch.utils.checkpoint import checkpoint
torch.manual_seed(0)
mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
checkpoint(mlp, torch.randn(8, 64, requires_grad=True), use_reentrant=False).sum().backward()
print("step done")
"""


def test_confirm_cost_prints_a_section_and_writes_the_json_fields(tmp_path: Path) -> None:
    (tmp_path / "step.py").write_text(STEP)
    completed = run_cli("confirm", "--cost", "--report", "r.json", "step.py", cwd=tmp_path, env=IMPORTABLE)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == b"step done\n"
    text = completed.stderr.decode()
    section = text[text.index("what each checkpoint costs (--cost):"):].splitlines()
    assert section[1] == "step.py:5:1: region Sequential.forward [non-reentrant]"
    assert section[2] == (
        "    frees 16.0 KiB of activations: the plain forward saves 16.0 KiB of activations, 0 B of its own output "
        "and 130.0 KiB by reference (inputs, parameters, captured tensors), the checkpointed one 2.0 KiB by reference"
    )
    assert section[3] == "    recomputes 262,144 FLOPs (the forward: 524,288): 59.6 MiB freed per GFLOP"
    assert section[4:6] == [
        "    - saved 8x256 float32 8.0 KiB (activation) by gelu",
        "    - saved 8x256 float32 8.0 KiB (activation) by linear",
    ]
    (record,) = json.loads((tmp_path / "r.json").read_text())["records"]
    cost = record["cost"]
    assert (cost["freed_bytes"], cost["recomputed_flops"], cost["forward_flops"]) == (16384, 262144, 524288)
    assert cost["saved_bytes"]["plain"] == MLP_SAVED_PLAIN and cost["hints"] == []
    assert set(cost) == {"freed_bytes", "recomputed_flops", "forward_flops", "mib_per_gflop", "saved_bytes", "largest_saved", "forward_ops", "hints"}


def test_confirm_without_cost_has_neither_section_nor_field(tmp_path: Path) -> None:
    (tmp_path / "step.py").write_text(STEP)
    completed = run_cli("confirm", "--report", "r.json", "step.py", cwd=tmp_path, env=IMPORTABLE)
    assert completed.returncode == 0, completed.stderr
    assert "what each checkpoint costs" not in completed.stderr.decode()
    assert "cost" not in json.loads((tmp_path / "r.json").read_text())["records"][0]


def test_confirm_cost_hints_in_text_and_json(tmp_path: Path) -> None:
    (tmp_path / "norm.py").write_text(
        "import torch\nfrom torch.utils.checkpoint import checkpoint\n"
        "norm = torch.nn.LayerNorm(64)\n"
        "checkpoint(norm, torch.randn(8, 64, requires_grad=True), use_reentrant=False).sum().backward()\n"
    )
    completed = run_cli("confirm", "--cost", "--report", "r.json", "norm.py", cwd=tmp_path, env=IMPORTABLE)
    assert completed.returncode == 0, completed.stderr
    text = completed.stderr.decode()
    assert "    recomputes 0 FLOPs (the forward: 0): no FLOPs counted (FlopCounterMode counts matmuls, convolutions, attention)" in text
    assert "    hint (single-cheap-op): the region is one op (aten.native_layer_norm)" in text
    cost = json.loads((tmp_path / "r.json").read_text())["records"][0]["cost"]
    assert cost["mib_per_gflop"] is None and [h["kind"] for h in cost["hints"]] == ["single-cheap-op"]


HINTED = """\
import torch
from torch.utils.checkpoint import checkpoint


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.norm = torch.nn.LayerNorm(16)
        self.blocks = torch.nn.ModuleList(
            [torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 16)) for _ in range(2)]
        )

    def forward(self, x):
        x = checkpoint(self.norm, x, use_reentrant=False)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return x


Model()(torch.randn(4, 16, requires_grad=True)).sum().backward()
"""


def test_confirm_cost_with_lint_shows_the_static_hints_beside_the_measured_ones(tmp_path: Path) -> None:
    """`--lint` joins the calls' static cost hints (analysis/regions/cost_hints.py) to the measured call
    sites, as it joins findings: the norm gets both single-cheap-op hints, the block loop the
    last-block hint that no replay of one call can give."""
    (tmp_path / "model.py").write_text(HINTED)
    completed = run_cli("confirm", "--cost", "--lint", "model.py", "--report", "r.json", "model.py", cwd=tmp_path, env=IMPORTABLE)
    assert completed.returncode == 0, completed.stderr
    text = completed.stderr.decode()
    section = text[text.index("what each checkpoint costs (--cost):"):].splitlines()
    norm = section.index("model.py:15:13: region LayerNorm.forward [non-reentrant]")
    block = section.index("model.py:17:17: region Sequential.forward [non-reentrant]")
    norm_lines, block_lines = section[norm + 1 : block], section[block + 1 :]
    assert [line.split(":")[0] for line in norm_lines if "hint (" in line] == ["    hint (single-cheap-op)", "    static hint (single-cheap-op)"]
    assert "    hint (single-cheap-op): the region is one op (aten.native_layer_norm)" in "\n".join(norm_lines)
    assert "    static hint (single-cheap-op): the region is one elementwise op or norm (nn.LayerNorm): " in "\n".join(norm_lines)
    static_block = [line for line in block_lines if "hint (" in line]
    assert static_block == [
        "    static hint (last-block): every block of `self.blocks` is checkpointed, the last one included: its recompute "
        "runs first in backward, right after the head's forward, so checkpointing it lowers no peak memory while it still "
        "pays the recompute; skip the last block (`if i < len(self.blocks) - 1`, or loop over `self.blocks[:-1]` and call "
        "the last block plainly)"
    ]
    records = {r["site"]["line"]: r for r in json.loads((tmp_path / "r.json").read_text())["records"]}
    assert [h["kind"] for h in records[15]["cost"]["hints"]] == ["single-cheap-op"]
    assert [h["kind"] for h in records[15]["cost"]["static_hints"]] == ["single-cheap-op"]
    assert records[17]["cost"]["hints"] == []
    assert [h["kind"] for h in records[17]["cost"]["static_hints"]] == ["last-block"]
    # without --lint no static analysis runs: measured hints only
    completed = run_cli("confirm", "--cost", "--report", "plain.json", "model.py", cwd=tmp_path, env=IMPORTABLE)
    assert completed.returncode == 0, completed.stderr
    assert "static hint" not in completed.stderr.decode()
    assert all("static_hints" not in r["cost"] for r in json.loads((tmp_path / "plain.json").read_text())["records"])
