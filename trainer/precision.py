"""Device and numeric precision: chosen once, so the training loop has no branches for them.

``choose`` is a pure function of the device and the requested mode, tested on
any machine; the loop then always enters ``autocast(...)`` and always calls the
``GradScaler``, which are no-ops when disabled (nanoGPT's pattern). ``auto`` is
bf16 on CUDA when the GPU supports it (Ampere and newer), else fp16; fp32 on the
CPU (CPU autocast is slower than fp32 for small models and would change the
numbers). Only fp16 needs the scaler: bf16 has fp32's exponent range.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch

from spotsweep.trainer.errors import SetupError

AmpMode = Literal["auto", "bf16", "fp16", "fp32"]
AMP_MODES: tuple[AmpMode, ...] = get_args(AmpMode)


@dataclass(frozen=True)
class Precision:
    name: Literal["bf16", "fp16", "fp32"]
    autocast_dtype: torch.dtype | None  # None: no autocast
    scaler: bool  # loss scaling, needed by fp16 only


_BY_NAME = {
    "bf16": Precision("bf16", torch.bfloat16, scaler=False),
    "fp16": Precision("fp16", torch.float16, scaler=True),
    "fp32": Precision("fp32", None, scaler=False),
}


def choose(device_type: str, amp: AmpMode, bf16_supported: bool = True) -> Precision:
    """The precision for ``amp`` on ``device_type`` (``"cuda"``, ``"cpu"``...)."""
    if amp not in AMP_MODES:
        raise ValueError(f"amp must be one of {', '.join(AMP_MODES)} (got {amp!r})")
    if amp == "auto":
        if device_type != "cuda":
            return _BY_NAME["fp32"]
        return _BY_NAME["bf16" if bf16_supported else "fp16"]
    return _BY_NAME[amp]


def resolve_device(requested: str) -> torch.device:
    """``auto`` is the first visible GPU when there is one (the agent sets CUDA_VISIBLE_DEVICES), else the CPU."""
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(requested)
    except RuntimeError as e:
        raise SetupError(f"--device: {e}") from e
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SetupError(f"--device {requested!r} asked for, but torch sees no CUDA GPU")
    return device


def for_device(device: torch.device, amp: AmpMode) -> Precision:
    """The precision for ``amp`` on this device; on CUDA also lets fp32 matmuls use TF32, unless fp32 was asked for.

    TF32 only touches the few matmuls that run outside autocast (nanoGPT turns
    it on too); ``--amp fp32`` means IEEE fp32 everywhere.
    """
    if device.type == "cuda":
        torch.set_float32_matmul_precision("highest" if amp == "fp32" else "high")
    bf16 = device.type != "cuda" or torch.cuda.is_bf16_supported()
    return choose(device.type, amp, bf16_supported=bf16)


def autocast(device: torch.device, precision: Precision) -> contextlib.AbstractContextManager[Any]:
    """The forward pass's context: autocast to the chosen dtype, or nothing."""
    if precision.autocast_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=precision.autocast_dtype)


def grad_scaler(device: torch.device, precision: Precision) -> torch.amp.GradScaler:
    """A GradScaler that is a pass-through unless the precision needs loss scaling."""
    return torch.amp.GradScaler(device.type, enabled=precision.scaler)


def restore_scaler(scaler: torch.amp.GradScaler, state: dict[str, Any] | None) -> bool:
    """Load a checkpoint's GradScaler state when that means something; True when it was loaded.

    A disabled scaler saves ``{}``, and an enabled one refuses ``{}``: a run
    that wrote its checkpoint in fp32 or bf16 (``--amp auto`` on the CPU, or
    on a bf16 GPU) and resumes where auto means fp16 starts with a fresh
    scaler instead of crashing. A disabled scaler has nothing to load into.
    """
    if not state or not scaler.is_enabled():
        return False
    scaler.load_state_dict(state)
    return True


def memory_metrics(device: torch.device) -> dict[str, float]:
    """Peak GPU memory since the start (MiB); nothing on devices without a caching allocator report."""
    if device.type != "cuda":
        return {}
    return {
        "peak_mem_mib": torch.cuda.max_memory_allocated(device) / 2**20,
        "peak_reserved_mib": torch.cuda.max_memory_reserved(device) / 2**20,
    }
