"""Device and precision choice as a pure function; the loop's autocast and scaler follow it."""

from __future__ import annotations

import pytest

import torch

from spotsweep.trainer.errors import SetupError
from spotsweep.trainer.precision import autocast, choose, grad_scaler, memory_metrics, resolve_device, restore_scaler


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


def test_a_scaler_state_is_loaded_only_where_it_means_something() -> None:
    cpu = torch.device("cpu")
    fp16, fp32 = choose("cpu", "fp16"), choose("cpu", "fp32")
    written = torch.amp.GradScaler("cpu", init_scale=1024.0).state_dict()
    # why: an enabled scaler refuses the {} a disabled one saves (fp32 or bf16 checkpoint, fp16 resume)
    with pytest.raises(RuntimeError):
        grad_scaler(cpu, fp16).load_state_dict(grad_scaler(cpu, fp32).state_dict())
    fresh = grad_scaler(cpu, fp16)
    assert restore_scaler(fresh, grad_scaler(cpu, fp32).state_dict()) is False
    assert fresh.is_enabled() and fresh.get_scale() == 2.0**16  # starts like a new fp16 run
    enabled = grad_scaler(cpu, fp16)
    assert restore_scaler(enabled, written) is True and enabled.get_scale() == 1024.0
    assert restore_scaler(grad_scaler(cpu, fp32), written) is False  # fp16 checkpoint, fp32 resume: nothing to load


def test_peak_memory_is_reported_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[object] = []

    def allocated(device: object = None) -> int:
        asked.append(device)
        return 3 * 2**20

    monkeypatch.setattr(torch.cuda, "max_memory_allocated", allocated)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device=None: 5 * 2**20 + 2**19)
    cuda = torch.device("cuda")
    assert memory_metrics(cuda) == {"peak_mem_mib": 3.0, "peak_reserved_mib": 5.5}
    assert asked == [cuda]  # the run's own device, not whichever GPU is current
