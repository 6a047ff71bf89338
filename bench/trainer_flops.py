"""The model FLOPs of one training token of the tiny DeepSeek-MoE model, the device's
peak, and which attention kernel runs: what ``bench/trainer.py`` divides by.

FLOPs per token (PaLM, Chowdhery et al. 2022, appendix B; nanoGPT's ``estimate_mfu``)::

    6 * N_active  +  12 * layers * dim * seq_len

* ``N_active`` counts the weights a token is multiplied by: each block's attention
  projections (qkv and out), its dense SwiGLU or, in an MoE block, the router, the
  shared experts and ``top_k`` of the routed experts (the ones it is sent to; the
  other routed experts' weights do no work for it), and the output head (tied to the
  embedding; the embedding lookup itself is no multiply). Norm gains are left out
  (a few hundred multiplies per token). A multiply-add is 2 FLOPs; backward does
  twice the forward's matmul work (gradients of inputs and of weights): 2 + 4 = 6.
  Routing sends exactly ``top_k`` experts per token however unbalanced it is, so
  the count is exact, not an average.
* The attention term is the two sequence-length matmuls (``q k^T`` and ``att v``),
  forward and backward, counted over the whole ``seq_len x seq_len`` square as PaLM
  and nanoGPT do, although a causal kernel skips about half of it: MFU stays
  comparable with published figures, and the attention share is reported beside it.

:func:`torch_count` checks the first term against torch's own ``FlopCounterMode``
on a real forward and backward of the model, and records which
``scaled_dot_product_attention`` kernel ran (torch's counter does not count the
CPU's fused SDPA kernel, so only the matmul term is compared everywhere).

Peak: dense bf16 tensor-core TFLOP/s from the vendor's datasheet by device name
(:data:`PEAK_BF16_TFLOPS`), or ``--peak-tflops``. Beside it, :func:`matmul_ceiling`
measures what one large matmul reaches on the device in the run's precision: on a
CPU, where no datasheet figure fits a shared virtual machine's cores, that measured
ceiling is the peak MFU is reported against (and said so).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from spotsweep.trainer.models.moe import MoE
from spotsweep.trainer.models.tinylm import TinyLM

# Dense (no sparsity) bf16 tensor-core TFLOP/s, NVIDIA datasheets; first match of the device name wins.
PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    (r"H100.*PCIe", 756.0),
    (r"H100 NVL", 835.0),
    (r"H100|H200|GH200", 989.0),  # SXM parts (H200 has H100's compute, more memory)
    (r"A100", 312.0),
    (r"L40S", 362.0),
    (r"\bL4\b", 121.0),
    (r"\bA10\b", 125.0),  # the A10, not AWS's A10G (a slower variant)
)


def active_params(model: TinyLM) -> dict[str, int]:
    """Weights a token is multiplied by, per kind (see the module docstring); ``total`` is every parameter."""
    def n(m: nn.Module) -> int:
        return sum(p.numel() for p in m.parameters())

    out = {"attention": 0, "dense_ffn": 0, "router": 0, "shared_experts": 0, "routed_experts": 0,
           "head": model.head.weight.numel()}
    for block in model.blocks:
        out["attention"] += n(block.attn)
        ffn = block.ffn
        if isinstance(ffn, MoE):
            out["router"] += n(ffn.router)
            out["shared_experts"] += sum(n(e) for e in ffn.shared)
            out["routed_experts"] += ffn.top_k * n(ffn.experts[0])  # experts are equal in size
        else:
            out["dense_ffn"] += n(ffn)
    out["active"] = sum(out.values())
    out["total"] = n(model)
    return out


def model_flops(model: TinyLM) -> dict[str, Any]:
    """FLOPs per trained token: the matmul term, the attention term and their sum."""
    cfg = model.cfg
    params = active_params(model)
    matmul = 6 * params["active"]
    attention = 12 * cfg.layers * cfg.dim * cfg.seq_len
    return {"per_token": matmul + attention, "matmul_per_token": matmul, "attention_per_token": attention,
            "attention_share": attention / (matmul + attention), "params": params}


class _OpNames(TorchDispatchMode):
    """Records the name of every aten op that runs (below autograd and autocast: the kernels chosen)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.names.add(str(func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))


def torch_count(step: Callable[[], None], tokens: int) -> dict[str, Any]:
    """Run ``step`` (one forward and backward over ``tokens`` tokens) under torch's FLOP counter.

    Returns torch's matmul and attention FLOPs per token and the SDPA kernels seen:
    ``sdpa_kernels`` empty means attention did not go through a fused
    ``scaled_dot_product_attention`` kernel (the math fallback decomposes into
    plain matmuls, which then land in the matmul count).
    """
    with FlopCounterMode(display=False) as counter, _OpNames() as ops:
        step()
    by_op = {str(op): int(v) for op, v in counter.get_flop_counts().get("Global", {}).items()}
    attention = sum(v for op, v in by_op.items() if "attention" in op)
    return {"matmul_per_token": (sum(by_op.values()) - attention) / tokens, "attention_per_token": attention / tokens,
            "by_op": by_op, "sdpa_kernels": sorted(x for x in ops.names if "scaled_dot_product" in x or
                                                  x.startswith(("_flash_attention", "_efficient_attention")))}


def datasheet_peak(device: torch.device) -> tuple[float | None, str]:
    """Dense bf16 TFLOP/s of a known GPU and the name it was found by; None on a CPU or an unknown GPU."""
    if device.type != "cuda":
        return None, cpu_name()
    name = torch.cuda.get_device_name(device)
    for pattern, tflops in PEAK_BF16_TFLOPS:
        if re.search(pattern, name):
            return tflops, name
    return None, name


def cpu_name() -> str:
    """The processor's model name, as ``lscpu`` shows it."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def matmul_ceiling(device: torch.device, dtype: torch.dtype, seconds: float = 0.5) -> float:
    """TFLOP/s of the best of repeated square matmuls in ``dtype``: what the device's GEMM reaches here.

    Sizes: 8192 on a GPU (enough to fill an H100), 1024 on a CPU (one product is a
    few milliseconds per core). Runs on the threads torch is set to.
    """
    size = 8192 if device.type == "cuda" else 1024
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    best, deadline = 0.0, time.perf_counter() + seconds
    for i in range(1000):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        torch.mm(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= 2:  # the first products load the library and warm the clocks
            best = max(best, 2 * size**3 / (time.perf_counter() - t0) / 1e12)
        if i >= 5 and time.perf_counter() > deadline:
            break
    return best
