"""Device and precision choice as a pure function; the loop's autocast and scaler follow it."""

from __future__ import annotations

import pytest

import torch

from spotsweep.trainer.errors import SetupError
from spotsweep.trainer.precision import autocast, choose, grad_scaler, memory_metrics, resolve_device


@pytest.mark.parametrize(
    ("device", "amp", "bf16", "expected", "dtype", "scaler"),
    [
        ("cuda", "auto", True, "bf16", torch.bfloat16, False),  # the GPU default
        ("cuda", "auto", False, "fp16", torch.float16, True),  # pre-Ampere GPUs: fp16 needs loss scaling
        ("cpu", "auto", True, "fp32", None, False),  # plain fp32 on the CPU
        ("cuda", "fp16", True, "fp16", torch.float16, True),
        ("cuda", "fp32", True, "fp32", None, False),
        ("cpu", "bf16", True, "bf16", torch.bfloat16, False),  # asked for explicitly
    ],
)
def test_choose(device: str, amp: str, bf16: bool, expected: str, dtype: object, scaler: bool) -> None:
    p = choose(device, amp, bf16_supported=bf16)  # type: ignore[arg-type]
    assert (p.name, p.autocast_dtype, p.scaler) == (expected, dtype, scaler)


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="amp must be one of auto, bf16, fp16, fp32"):
        choose("cuda", "int8")  # type: ignore[arg-type]


def test_the_contexts_follow_the_choice() -> None:
    cpu = torch.device("cpu")
    assert not grad_scaler(cpu, choose("cpu", "fp32")).is_enabled()
    assert grad_scaler(cpu, choose("cpu", "fp16")).is_enabled()
    with autocast(cpu, choose("cpu", "bf16")):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with autocast(cpu, choose("cpu", "auto")):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    assert memory_metrics(cpu) == {}


def test_device_selection() -> None:
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(SetupError, match="--device"):
        resolve_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(SetupError, match="torch sees no CUDA GPU"):
            resolve_device("cuda:0")
