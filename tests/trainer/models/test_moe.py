"""DeepSeekMoE routing: exactly top_k routed experts per token plus every shared one; a sane balance loss."""

from __future__ import annotations

import math

import pytest

import torch

from spotsweep.trainer.models.moe import MoE, Routing, balance_loss


def _layer(routed: int = 6, top_k: int = 2, shared: int = 2) -> MoE:
    torch.manual_seed(0)
    return MoE(dim=16, hidden=24, routed=routed, top_k=top_k, shared=shared)


def test_every_token_goes_to_exactly_top_k_distinct_experts() -> None:
    layer = _layer(routed=6, top_k=3)
    x = torch.randn(50, 16)
    routing = layer.route(x)
    assert routing.experts.shape == (50, 3)
    assert all(len(set(row)) == 3 for row in routing.experts.tolist())
    # the chosen experts are the highest-scoring ones, with their router probabilities as weights
    best = routing.probs.topk(3, dim=-1)
    assert torch.equal(routing.experts.sort(-1).values, best.indices.sort(-1).values)
    assert torch.allclose(routing.weights, routing.probs.gather(1, routing.experts))


def test_output_is_shared_experts_plus_the_weighted_top_k() -> None:
    layer = _layer(routed=5, top_k=2, shared=2)
    x = torch.randn(3, 7, 16)
    out, aux = layer(x)
    flat = x.reshape(-1, 16)
    routing = layer.route(flat)
    # reference: run every expert on every token, keep each token's top_k only
    expected = sum(s(flat) for s in layer.shared)
    for e, expert in enumerate(layer.experts):
        weight = (routing.weights * (routing.experts == e)).sum(-1, keepdim=True)  # 0 unless e is in the token's top_k
        expected = expected + weight * expert(flat)
    assert torch.allclose(out.reshape(-1, 16), expected, atol=1e-6)
    assert out.shape == x.shape and math.isfinite(aux.item())


def test_dropping_a_shared_expert_changes_every_token() -> None:
    layer = _layer(shared=1)
    x = torch.randn(20, 16)
    with torch.no_grad():
        with_shared, _ = layer(x)
        contribution = layer.shared[0](x)
    assert (contribution.abs().sum(-1) > 0).all()  # a shared expert touches every token
    layer.shared = torch.nn.ModuleList()
    with torch.no_grad():
        without, _ = layer(x)
    assert torch.allclose(with_shared - without, contribution, atol=1e-6)


def test_balance_loss_is_one_when_uniform_and_grows_when_skewed() -> None:
    tokens, routed, top_k = 8, 4, 2
    uniform = Routing(
        experts=torch.tensor([[0, 1], [2, 3]] * 4),
        weights=torch.full((tokens, top_k), 0.25),
        probs=torch.full((tokens, routed), 0.25),
    )
    assert balance_loss(uniform, routed).item() == pytest.approx(1.0)
    skewed = Routing(
        experts=torch.tensor([[0, 1]] * tokens),
        weights=torch.full((tokens, top_k), 0.45),
        probs=torch.tensor([[0.45, 0.45, 0.05, 0.05]] * tokens),
    )
    assert balance_loss(skewed, routed).item() == pytest.approx(1.8)  # 2 * 0.45 + 2 * 0.45


def test_balance_loss_is_finite_positive_and_trains_the_router() -> None:
    layer = _layer()
    out, aux = layer(torch.randn(4, 10, 16))
    assert math.isfinite(aux.item()) and aux.item() > 0
    aux.backward()
    assert layer.router.weight.grad is not None and layer.router.weight.grad.abs().sum() > 0


def test_top_k_larger_than_the_experts_is_refused() -> None:
    with pytest.raises(ValueError, match="top_k must be between 1 and the number of routed experts 2"):
        MoE(dim=8, hidden=8, routed=2, top_k=3, shared=0)
