"""DeepSeekMoE's feed-forward layer: shared experts for every token plus top-k routed ones.

(Dai et al., 2024, "DeepSeekMoE: Towards Ultimate Expert Specialization".)
Each expert is a small SwiGLU. ``shared`` experts process every token; a
linear router scores the ``routed`` experts with a softmax, each token goes
to its ``top_k`` best, and their outputs are summed weighted by the
(unnormalised) router scores, as in the paper. The expert-level balance loss
is ``sum_i f_i * P_i`` with ``f_i = N / (K T) * (tokens routed to i)`` and
``P_i`` the mean router probability of expert i: it is 1 when routing is
uniform and grows as experts are favoured, and its gradient (through
``P_i``) pushes the router towards balance.

Dispatch is a loop over experts gathering their tokens: plain PyTorch, exact
and deterministic on the CPU, and fast enough for the handful of experts a
sweep's small models have (a grouped-GEMM kernel is what a large model wants).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


class SwiGLU(nn.Module):
    """``W2(silu(W1 x) * W3 x)`` (Shazeer, 2020): the FFN of LLaMA and DeepSeek."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


@dataclass(frozen=True)
class Routing:
    experts: torch.Tensor  # (tokens, top_k) expert indices, distinct per token
    weights: torch.Tensor  # (tokens, top_k) router probabilities of those experts (fp32)
    probs: torch.Tensor  # (tokens, routed) the router's softmax (fp32)


def balance_loss(routing: Routing, routed: int) -> torch.Tensor:
    """DeepSeekMoE's expert-level balance loss (unweighted); 1.0 for perfectly uniform routing."""
    tokens, top_k = routing.experts.shape
    counts = F.one_hot(routing.experts, routed).sum(dim=(0, 1)).to(routing.probs.dtype)
    load = counts * routed / (top_k * tokens)  # f_i
    importance = routing.probs.mean(dim=0)  # P_i
    return (load * importance).sum()


class MoE(nn.Module):
    def __init__(self, dim: int, hidden: int, routed: int, top_k: int, shared: int) -> None:
        super().__init__()
        if not 1 <= top_k <= routed:
            raise ValueError(f"top_k must be between 1 and the number of routed experts {routed} (got {top_k})")
        self.routed, self.top_k = routed, top_k
        self.router = nn.Linear(dim, routed, bias=False)
        self.experts = nn.ModuleList(SwiGLU(dim, hidden) for _ in range(routed))
        self.shared = nn.ModuleList(SwiGLU(dim, hidden) for _ in range(shared))

    def route(self, x: torch.Tensor) -> Routing:
        """Top-k routing of ``x`` (tokens, dim); the softmax runs in fp32 even under autocast."""
        probs = self.router(x).float().softmax(dim=-1)
        weights, experts = probs.topk(self.top_k, dim=-1)
        return Routing(experts=experts, weights=weights, probs=probs)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's output (same shape as ``x``) and its balance loss."""
        flat = x.reshape(-1, x.shape[-1])
        routing = self.route(flat)
        out = torch.zeros_like(flat)
        for expert in self.shared:
            out = out + expert(flat)
        for e, expert in enumerate(self.experts):
            token, slot = torch.where(routing.experts == e)
            y = expert(flat[token]) * routing.weights[token, slot].unsqueeze(-1)
            out = out.index_add(0, token, y.to(out.dtype))
        return out.view_as(x), balance_loss(routing, self.routed)
