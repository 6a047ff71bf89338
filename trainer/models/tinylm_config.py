"""The tiny language model's shape: a pydantic model without torch, so that
``spotsweep train tinylm --help`` and flag errors need no torch import.

Fields with a ``description`` are ``spotsweep train tinylm`` flags
(``trainer/cli.py`` makes them from the fields); the others keep their defaults.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TinyLMConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    vocab: int = Field(default=256, ge=2)
    seq_len: int = Field(default=64, ge=2, description="context length in bytes")
    dim: int = Field(default=96, ge=8, description="model width")
    layers: int = Field(default=2, ge=1, description="transformer blocks")
    heads: int = Field(default=4, ge=1, description="attention heads; dim / heads must be even")
    dropout: float = Field(default=0.0, ge=0, lt=1, description="dropout rate")
    experts: int = Field(default=4, ge=0, description="routed experts per MoE layer; 0 = dense model")
    top_k: int = Field(default=2, ge=1, description="routed experts per token")
    shared_experts: int = Field(default=1, ge=0, description="experts every token uses")
    dense_layers: int = Field(default=1, ge=0, description="leading blocks with a dense FFN (DeepSeekMoE)")
    ffn_hidden: int | None = Field(default=None, ge=1)  # dense SwiGLU width; None: 8/3 dim, rounded up to 32
    expert_hidden: int | None = Field(
        default=None, ge=1, description="expert FFN width (default: dense width / (top-k + shared), rounded up to 8)")
    aux_loss_weight: float = Field(default=0.01, ge=0, description="weight of the balance loss")
    rope_theta: float = Field(default=10000.0, gt=0)

    @model_validator(mode="after")
    def _shapes(self) -> TinyLMConfig:
        if self.dim % self.heads:
            raise ValueError(f"dim must be a multiple of heads (got dim={self.dim}, heads={self.heads})")
        if (self.dim // self.heads) % 2:
            raise ValueError(f"dim / heads must be even for rotary embeddings (got {self.dim} / {self.heads} = "
                             f"{self.dim // self.heads})")
        if self.experts and self.top_k > self.experts:
            raise ValueError(f"top_k must not exceed experts (got top_k={self.top_k}, experts={self.experts})")
        return self

    @property
    def dense_hidden(self) -> int:
        return self.ffn_hidden or 32 * math.ceil(8 * self.dim / 3 / 32)

    @property
    def moe_hidden(self) -> int:
        # Fine-grained experts: the activated width per token stays that of the dense FFN.
        return self.expert_hidden or 8 * math.ceil(self.dense_hidden / (self.top_k + self.shared_experts) / 8)

    def is_moe(self, layer: int) -> bool:
        return self.experts > 0 and layer >= self.dense_layers


# The fields that fix the weights' shapes and the function they compute: --init-from refuses a checkpoint
# that differs in one of them. Dropout and the balance-loss weight are training settings (a fine-tuning
# sweep varies them); seq_len only sizes the rotary tables, which checkpoints do not hold.
ARCHITECTURE = tuple(name for name in TinyLMConfig.model_fields if name not in ("dropout", "aux_loss_weight", "seq_len"))
