"""Broken sweeps cost their submitter, not the fleet (issue 28, item 1).

Two sweeps whose trials ``exit 1`` and one whose code archive is refused
used to trip the agent's broken-node breaker ("5 trials of at least 2 sweeps
failed"), and a clean sweep submitted next waited 10 minutes in the queue.
Now those failures say nothing about the node; each sweep is stopped by its
own breaker, with the reason, and the clean sweep runs on the same agent.
"""

from __future__ import annotations

import csv
import time
from typing import Any

from hostile import Hostile, TERMINAL, bystander_spec

MAX_FAILED = 3


def failing(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "command": ["sh", "-c", "echo 'ValueError: this sweep is broken' >&2; exit 1"],
        "metric": {"name": "score", "mode": "min"},
        "space": {"x": list(range(8))},
        "resources": {"gpus": 0, "class": "cpu"},
        "max_concurrent": 2,
        "retries": {"max_failures": 1, "max_failed_trials": MAX_FAILED},
        **extra,
    }


def all_ended(hostile: Hostile, sweep_id: str, timeout: float = 60) -> list[str]:
    """The sweep's trials' states once every one of them is terminal."""
    deadline = time.monotonic() + timeout
    while True:
        states = [str(s) for (s,) in hostile.sql("SELECT state FROM trials WHERE sweep_id = %s", sweep_id)]
        if states and set(states) <= TERMINAL:
            return states
        assert time.monotonic() < deadline, (states, hostile.cluster.logs())
        time.sleep(0.2)


def test_sweeps_that_fail_everywhere_are_stopped_and_idle_no_agent(hostile: Hostile) -> None:
    hostile.assert_bystander_complete()  # the agent's last success is behind it: only the failures below follow
    broken = [hostile.submit(failing("exits-a")), hostile.submit(failing("exits-b")),
              # a code archive that is not in the store: every attempt is refused before anything runs
              hostile.submit(failing("refused", workdir_sha256="ab" * 32))]
    for sweep_id in broken:
        assert hostile.wait_sweep(sweep_id, timeout=120) == "failed"
        (error,) = hostile.sql("SELECT error FROM sweeps WHERE sweep_id = %s", sweep_id)[0]
        assert error.startswith("stopped by its breaker: ") and f"max_failed_trials={MAX_FAILED}" in error, error
        states = all_ended(hostile, sweep_id)
        assert states.count("failed") >= MAX_FAILED and "completed" not in states, states
    errors = [e for (e,) in hostile.sql("SELECT error FROM sweeps WHERE sweep_id = ANY(%s)", broken)]
    assert sum("this sweep is broken" in e for e in errors) == 2 and sum("code archive" in e for e in errors) == 1
    status = hostile.cli("status")
    assert status.returncode == 0 and status.stdout.count("stopped by its breaker") == 3, status.stdout[-3000:]
    csv_path = hostile.tmp / "broken.csv"
    assert hostile.cli("report", broken[0], "--csv", str(csv_path)).returncode == 0
    rows = list(csv.DictReader(csv_path.open()))
    assert rows and all(  # every trial says why it ended: its own error, or the breaker for those it cancelled
        (r["state"] == "failed" and "this sweep is broken" in r["error"])
        or (r["state"] == "cancelled" and r["error"].startswith("the sweep failed: stopped by its breaker: "))
        for r in rows), rows

    # The agent that ran every one of those failures takes the next clean sweep at once.
    clean = hostile.submit({**bystander_spec(), "name": "after"})
    assert hostile.wait_sweep(clean, timeout=60) == "completed"
    agents = {a for (a,) in hostile.sql("SELECT DISTINCT agent FROM trials WHERE sweep_id = %s", clean)}
    ran_broken = {a for (a,) in hostile.sql("SELECT DISTINCT agent FROM trials WHERE sweep_id = ANY(%s) AND agent IS NOT NULL",
                                            broken)}
    assert len(agents) == 1 and agents == ran_broken, (agents, ran_broken)
    hostile.assert_outputs_clean()
