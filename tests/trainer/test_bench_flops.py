"""bench/trainer.py's FLOP count (the numerator of its MFU) against torch's own counter.

The benchmark counts 6 x the weights a token is multiplied by: for an MoE block
the router, the shared experts and top-k routed experts, not all of them. Here
that count must equal what ``torch.utils.flop_counter`` sees in a real forward
and backward of the model, for dense and MoE shapes, and attention must run
through a fused ``scaled_dot_product_attention`` kernel (the benchmark reports
the attention term on that basis).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import torch

from spotsweep.trainer.models.tinylm import TinyLM, TinyLMConfig

BENCH = Path(__file__).resolve().parents[2] / "bench" / "trainer_flops.py"
SHAPE = {"dim": 32, "heads": 2, "layers": 3, "seq_len": 16}


def _flops_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_trainer_flops", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def flops() -> ModuleType:
    return _flops_module()


def _counted(flops: ModuleType, model: TinyLM) -> dict:
    idx = torch.randint(0, model.cfg.vocab, (2, model.cfg.seq_len + 1))

    def step() -> None:
        loss, _ = model.loss(idx[:, :-1], idx[:, 1:])
        loss.backward()

    return flops.torch_count(step, 2 * model.cfg.seq_len)


@pytest.mark.parametrize("moe", [
    {"experts": 0},
    {"experts": 4, "top_k": 2, "shared_experts": 1},
    {"experts": 6, "top_k": 1, "shared_experts": 0, "dense_layers": 0},
    {"experts": 5, "top_k": 3, "shared_experts": 2, "dense_layers": 2},
])
def test_six_times_active_parameters_is_what_torch_counts(flops: ModuleType, moe: dict) -> None:
    torch.manual_seed(0)
    model = TinyLM(TinyLMConfig(**SHAPE, **moe))
    ours = flops.model_flops(model)
    counted = _counted(flops, model)
    assert ours["matmul_per_token"] == pytest.approx(counted["matmul_per_token"], rel=1e-12)
    assert ours["attention_per_token"] == 12 * SHAPE["layers"] * SHAPE["dim"] * SHAPE["seq_len"]


def test_active_parameters_leave_out_the_routed_experts_a_token_skips(flops: ModuleType) -> None:
    cfg = TinyLMConfig(**SHAPE, experts=8, top_k=2, shared_experts=1, dense_layers=1)
    model = TinyLM(cfg)
    params = flops.active_params(model)
    norms = sum(p.numel() for name, p in model.named_parameters() if "norm" in name)
    expert = sum(p.numel() for p in model.blocks[1].ffn.experts[0].parameters())
    skipped = (cfg.layers - cfg.dense_layers) * (cfg.experts - cfg.top_k) * expert
    assert params["active"] == params["total"] - norms - skipped
    assert params["routed_experts"] == (cfg.layers - cfg.dense_layers) * cfg.top_k * expert


def test_attention_runs_through_a_fused_sdpa_kernel(flops: ModuleType) -> None:
    counted = _counted(flops, TinyLM(TinyLMConfig(**SHAPE)))
    assert any("scaled_dot_product" in k for k in counted["sdpa_kernels"]), counted["sdpa_kernels"]
