"""A tiny DeepSeek-style decoder-only language model over bytes.

Pre-norm blocks with RMSNorm, causal self-attention with rotary position
embeddings (RoPE), and a feed-forward that is a SwiGLU in the first
``dense_layers`` blocks and a DeepSeekMoE layer (shared + top-k routed
experts) in the rest, as in DeepSeekMoE; ``experts=0`` makes every block
dense. Input embedding and output head share weights (nanoGPT). Attention is
``F.scaled_dot_product_attention``, which picks a fused kernel on the GPU.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from spotsweep.trainer.models.moe import MoE, SwiGLU
from spotsweep.trainer.models.tinylm_config import TinyLMConfig

__all__ = ["TinyLM", "TinyLMConfig", "apply_rotary", "rotary_tables"]


def rotary_tables(seq_len: int, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotation angles, (seq_len, head_dim / 2) each."""
    freqs = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), freqs)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each (even, odd) channel pair of ``x`` (batch, heads, time, head_dim) by its angle."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    t = x.shape[-2]
    c, s = cos[:t], sin[:t]
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: TinyLMConfig) -> None:
        super().__init__()
        self.heads, self.dropout = cfg.heads, cfg.dropout
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.proj = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.resid_dropout(self.proj(y.transpose(1, 2).reshape(b, t, d)))


class Block(nn.Module):
    def __init__(self, cfg: TinyLMConfig, layer: int) -> None:
        super().__init__()
        self.attn_norm = nn.RMSNorm(cfg.dim)
        self.attn = Attention(cfg)
        self.ffn_norm = nn.RMSNorm(cfg.dim)
        self.moe = cfg.is_moe(layer)
        self.ffn: nn.Module = (
            MoE(cfg.dim, cfg.moe_hidden, cfg.experts, cfg.top_k, cfg.shared_experts) if self.moe
            else SwiGLU(cfg.dim, cfg.dense_hidden)
        )
        self.ffn_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        if self.moe:
            h, aux = self.ffn(self.ffn_norm(x))
        else:
            h, aux = self.ffn(self.ffn_norm(x)), x.new_zeros(())
        return x + self.ffn_dropout(h), aux


class TinyLM(nn.Module):
    def __init__(self, cfg: TinyLMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.layers))
        self.norm = nn.RMSNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        self.head.weight = self.embed.weight  # tied
        cos, sin = rotary_tables(cfg.seq_len, cfg.dim // cfg.heads, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.grad_checkpointing = False
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2: residual projections scaled by depth
            if name.endswith(("proj.weight", "w2.weight")):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.layers))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def set_grad_checkpointing(self, enabled: bool) -> None:
        """Recompute each block's activations in the backward pass: less memory, ~30% more compute."""
        self.grad_checkpointing = enabled

    def forward(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (batch, time, vocab) and the mean balance loss of the MoE layers (0 for a dense model)."""
        x = self.drop(self.embed(idx))
        cos, sin = self.rope_cos, self.rope_sin
        aux = x.new_zeros(())
        for block in self.blocks:
            if self.grad_checkpointing and self.training:
                # Dropout masks are replayed in the recomputation: checkpoint() saves and restores the RNG.
                x, a = checkpoint(block, x, cos, sin, use_reentrant=False)
            else:
                x, a = block(x, cos, sin)
            aux = aux + a
        moe_layers = sum(1 for b in self.blocks if b.moe)
        return self.head(self.norm(x)), aux / max(1, moe_layers)

    def loss(self, idx: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The training objective (cross-entropy + weighted balance loss) and its parts, detached."""
        logits, aux = self(idx)
        ce = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))
        total = ce + self.cfg.aux_loss_weight * aux
        parts = {"loss": ce.detach()}
        if self.cfg.experts:
            parts["aux_loss"] = aux.detach()
        return total, parts

    @torch.no_grad()
    def eval_metrics(self, idx: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """Validation cross-entropy and next-byte accuracy of one batch (means over its tokens)."""
        logits, _ = self(idx)
        flat = logits.float().view(-1, logits.shape[-1])
        return {
            "val_loss": F.cross_entropy(flat, targets.reshape(-1)),
            "val_acc": (flat.argmax(-1) == targets.reshape(-1)).float().mean(),
        }
