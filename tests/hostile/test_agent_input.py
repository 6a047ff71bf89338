"""A trial that abuses its metrics file, through the real services.

Each test runs one hostile trial beside the bystander sweep and shows the
three things every hostile test shows: the trial ends (completed, since its
script exits 0) with its good points stored and what was skipped visible in
``trial_results``; the bystander completes with every point; ``ls``,
``status``, ``report`` and ``report --csv`` stay clean.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from hostile import Hostile

pytestmark = pytest.mark.integration

# Every script writes raw bytes to the metrics file, as any program could.
PRELUDE = """
import os, time
path = os.environ["SPOTSWEEP_METRICS"]
def raw(data):
    with open(path, "ab") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
raw('{"step": 0, "loss": 1.0}\\n')
"""
GOOD_END = """
raw('{"step": 1, "loss": 0.5}\\n')
"""


def spec(name: str, script: str, **extra: Any) -> dict[str, Any]:
    body = PRELUDE + script
    return {
        "name": name,
        "command": ["python", "-c", body.replace("{", "{{").replace("}", "}}")],  # no {param} slots in the script
        "metric": {"name": "loss", "mode": "min"},
        "space": {"x": [0]},
        "resources": {"gpus": 0, "class": "cpu"},
        **extra,
    }


def run_one(hostile: Hostile, body: dict[str, Any], points: int) -> dict[str, Any]:
    """Submit, wait for the sweep to end, wait for ``points`` points; the trial's row."""
    sweep_id = hostile.submit(body)
    assert hostile.wait_sweep(sweep_id, timeout=60) == "completed", (hostile.trials(sweep_id), hostile.cluster.logs())
    [row] = hostile.trials(sweep_id)
    deadline = time.monotonic() + 20
    while (n := stored(hostile, sweep_id)) < points and time.monotonic() < deadline:
        time.sleep(0.2)
    assert n == points, f"{n} of {points} points stored\n{hostile.cluster.logs()}"
    assert row["state"] == "completed" and row["metrics"]["loss"] == 0.5, row
    return row


def stored(hostile: Hostile, sweep_id: str) -> int:
    return int(hostile.sql("SELECT count(*) FROM metric_points WHERE sweep_id = %s AND name NOT LIKE 'sys/%%'", sweep_id)[0][0])


def bystander_and_outputs(hostile: Hostile) -> None:
    hostile.assert_bystander_complete()
    hostile.assert_outputs_clean()


def test_a_10_mb_metric_name_is_skipped_and_ingestion_goes_on(hostile: Hostile) -> None:
    script = "raw('{\"step\": 1, \"%s\": 1}\\n' % ('n' * 10_485_760))\n" + GOOD_END
    # Lines of 16 MiB are allowed here, so that the name itself is judged.
    row = run_one(hostile, spec("longname", script, limits={"line_bytes": 16 << 20}), points=2)
    assert row["flags"] == ["skipped_lines"]
    assert "metric name is 10485760 characters long (limit 200)" in row["warnings"][0]
    bystander_and_outputs(hostile)


def test_a_metric_name_holding_nul_is_skipped_and_the_trial_ends(hostile: Hostile) -> None:
    script = "raw('{\"step\": 1, \"a\\\\u0000b\": 1, \"c\\\\u001b]0;pwned\\\\u0007\": 2}\\n')\n" + GOOD_END
    row = run_one(hostile, spec("nulname", script), points=2)
    assert row["flags"] == ["skipped_lines"] and "control character" in row["warnings"][0]
    bystander_and_outputs(hostile)


def test_a_30_mb_line_without_newline_is_skipped_with_bounded_memory(hostile: Hostile) -> None:
    script = "raw(b'y' * (30 << 20))\ntime.sleep(0.5)\nraw('\\n')\n" + GOOD_END + "raw(b'z' * (30 << 20))\n"
    row = run_one(hostile, spec("longline", script), points=2)
    assert row["flags"] == ["skipped_lines"]
    assert row["warnings"][0].startswith("skipped 2 lines: line is longer than 1048576 bytes (limits.line_bytes)")
    assert peak_rss_mib(hostile) < 250
    bystander_and_outputs(hostile)


def test_a_1_gib_sparse_metrics_file_neither_hangs_nor_bloats_the_agent(hostile: Hostile) -> None:
    script = GOOD_END + "with open(path, 'ab') as f:\n    f.truncate(1 << 30)\n"
    row = run_one(hostile, spec("sparse", script), points=2)
    assert row["flags"] == ["skipped_lines"] and "limits.line_bytes" in row["warnings"][0]
    assert peak_rss_mib(hostile) < 250  # the old reader took the whole gibibyte (2.1 GB)
    bystander_and_outputs(hostile)


def test_a_metrics_file_swapped_for_a_fifo_is_refused_and_the_trial_ends(hostile: Hostile) -> None:
    script = GOOD_END + "time.sleep(0.5)\nos.unlink(path)\nos.mkfifo(path)\ntime.sleep(1)\n"
    row = run_one(hostile, spec("fifo", script, timeout={"total": "30s"}), points=2)  # not cut off by the 30 s
    assert row["flags"] == ["metrics_refused"] and "FIFO" in row["warnings"][0]
    bystander_and_outputs(hostile)


def test_100000_distinct_metric_names_stop_at_the_limit(hostile: Hostile) -> None:
    script = ("for i in range(1000):\n"
              "    raw('{\"step\": 2, %s}\\n' % ', '.join('\"m%d\": %d' % (i * 100 + j, j) for j in range(100)))\n"
              + GOOD_END)
    # loss and 999 of the m names make the 1,000 allowed: the line that would pass them is skipped whole.
    row = run_one(hostile, spec("names", script), points=2 + 900)
    assert row["flags"] == ["skipped_lines"]
    assert "and 99 more new names would make 1001 distinct names (limits.metric_names = 1000)" in row["warnings"][0]
    assert "skipped 991 lines" in row["warnings"][0]
    bystander_and_outputs(hostile)


def peak_rss_mib(hostile: Hostile) -> float:
    """The agent process's peak resident memory (VmHWM), MiB."""
    pid = hostile.cluster.procs["agent"].pid
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")
