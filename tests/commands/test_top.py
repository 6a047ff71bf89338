"""`spotsweep top`'s pure parts: the ETA and the maximum step a trial's params name."""

from __future__ import annotations

from spotsweep.commands.top import eta_seconds, max_steps, table


def test_eta_from_the_step_rate_and_the_last_step() -> None:
    assert eta_seconds(0, 100.0, 50, 110.0, 1050) == 200.0  # 5 steps a second, 1000 to go
    assert eta_seconds(10, 100.0, 10, 110.0, 100) is None  # no rate yet
    assert eta_seconds(0, 100.0, 50, 100.0, 100) is None
    assert eta_seconds(0, 100.0, 50, 110.0, None) is None  # no last step known: blank
    assert eta_seconds(None, None, None, None, 100) is None  # no points yet
    assert eta_seconds(0, 100.0, 200, 110.0, 100) == 0.0  # past it


def test_max_steps_from_the_params() -> None:
    assert max_steps({"lr": 0.1, "steps": 60}) == 60
    assert max_steps({"max_steps": 10, "steps": 60}) == 10  # the first name listed wins
    assert max_steps({"steps": "60"}) is None and max_steps({"steps": True}) is None and max_steps({}) is None


def test_the_table_escapes_what_trials_chose() -> None:
    row = {"trial_name": "\x1b[2J<b>", "sweep_id": "s-1", "agent": "a", "gpu_util": None, "gpu_mem_mb": None,
           "cpu_percent": 99.5, "rss_mb": 120.0, "step": 7, "metric": "loss", "value": float("nan"),
           "eta_seconds": 3725.0, "flags": ["nan"]}
    from rich.console import Console

    console = Console(width=200, record=True, color_system=None)
    console.print(table([row]))
    text = console.export_text()
    assert "\\x1b[2J<b>" in text and "loss=nan" in text and "1:02:05" in text and "[nan]" in text and "\x1b" not in text
