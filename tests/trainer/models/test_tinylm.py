"""The tiny DeepSeek-style LM: shapes it accepts, causality, dense vs MoE blocks, tied embeddings."""

from __future__ import annotations

import pytest

import torch

from pydantic import ValidationError

from spotsweep.trainer.models.moe import MoE
from spotsweep.trainer.models.tinylm import TinyLM, TinyLMConfig, apply_rotary, rotary_tables


def test_shapes_are_checked_with_the_values() -> None:
    with pytest.raises(ValidationError, match=r"dim must be a multiple of heads \(got dim=96, heads=7\)"):
        TinyLMConfig(dim=96, heads=7)
    with pytest.raises(ValidationError, match="must be even for rotary"):
        TinyLMConfig(dim=96, heads=32)  # head dim 3
    with pytest.raises(ValidationError, match="top_k must not exceed experts"):
        TinyLMConfig(experts=2, top_k=3)
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        TinyLMConfig(width=3)  # type: ignore[call-arg]
    for heads in (8, 12, 16):  # the DeepSeek grid's head counts at the examples' width
        TinyLMConfig(dim=96, heads=heads)


def test_dense_layers_then_moe_and_experts_zero_is_dense() -> None:
    moe = TinyLM(TinyLMConfig(layers=3, dense_layers=1, experts=4, dim=32, heads=2))
    assert [isinstance(b.ffn, MoE) for b in moe.blocks] == [False, True, True]
    dense = TinyLM(TinyLMConfig(layers=3, experts=0, dim=32, heads=2))
    assert not any(isinstance(m, MoE) for m in dense.modules())
    _, aux = dense(torch.zeros(1, 8, dtype=torch.long))
    assert aux.item() == 0.0


def test_the_model_is_causal() -> None:
    torch.manual_seed(0)
    model = TinyLM(TinyLMConfig(dim=32, heads=2, seq_len=12)).eval()
    idx = torch.randint(0, 256, (2, 12))
    changed = idx.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % 256
    with torch.no_grad():
        a, _ = model(idx)
        b, _ = model(changed)
    assert torch.allclose(a[:, :8], b[:, :8], atol=1e-6)
    assert not torch.allclose(a[:, 8:], b[:, 8:])


def test_rotary_keeps_norms_and_makes_attention_relative() -> None:
    cos, sin = rotary_tables(16, 8, 10000.0)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    at = lambda x, pos: apply_rotary(x.expand(1, 1, 16, 8), cos, sin)[0, 0, pos]  # noqa: E731
    assert torch.allclose(at(q, 5).norm(), q.norm(), atol=1e-5)
    # <R(m)q, R(n)k> depends on m - n only
    assert torch.allclose(at(q, 7) @ at(k, 3), at(q, 10) @ at(k, 6), atol=1e-5)


def test_embedding_and_head_are_tied() -> None:
    model = TinyLM(TinyLMConfig(dim=32, heads=2))
    assert model.head.weight is model.embed.weight
