"""Hostile input through the real services: one bad trial or message hurts no one.

:class:`Hostile` (the ``hostile`` fixture of tests/hostile) starts a planner, a collector and one agent (class
``cpu``, two slots) as separate processes over RabbitMQ (a fresh vhost),
PostgreSQL (a fresh database) and moto's S3, and submits a clean "bystander"
sweep that runs while the test does its worst. Every hostile test then shows
the three things a shared deployment depends on:

1. the bad trial or message ends (dead-lettered with a reason, or its trial
   in a terminal state);
2. the bystander sweep completes with every one of its points stored;
3. ``ls``, ``status``, ``report`` and ``report --csv`` exit 0, print no raw
   control byte, and write no live spreadsheet formula.
"""

from __future__ import annotations

import csv
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pika
import psycopg
import yaml
from cluster import Cluster

from spotsweep.shared import topology

BYSTANDER_TRIALS = 3
BYSTANDER_STEPS = 4
# Reports a point every 0.3 s for a second or so: long enough to overlap whatever the test sends.
BYSTANDER_SCRIPT = """
import time
from spotsweep import trial
for step in range({steps}):
    trial.report(step, score=trial.params["x"] * 10 + step)
    time.sleep(0.3)
""".format(steps=BYSTANDER_STEPS)
TERMINAL = {"completed", "failed", "cancelled", "pruned"}
# C0 controls but tab and newline, DEL, and the C1 controls as characters: none may reach a terminal raw.
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def bystander_spec() -> dict[str, Any]:
    return {
        "name": "bystander",
        "command": ["python", "-c", BYSTANDER_SCRIPT.replace("{", "{{").replace("}", "}}")],
        "metric": {"name": "score", "mode": "min"},
        "space": {"x": list(range(BYSTANDER_TRIALS))},
        "resources": {"gpus": 0, "class": "cpu"},
        "max_concurrent": 2,
    }


class Hostile:
    """The running services, a bystander sweep, and the checks every hostile test makes."""

    def __init__(self, cluster: Cluster, database_url: str, rabbit_url: str, tmp: Path) -> None:
        self.cluster, self.database_url, self.rabbit_url, self.tmp = cluster, database_url, rabbit_url, tmp
        self.bystander = ""

    def start(self) -> None:
        self.cluster.start("planner", "planner")
        self.cluster.start("collector", "collector")
        self.cluster.start("agent", "agent", "--slots", "2", "--class", "cpu", "--workdir", str(self.tmp / "agent"))
        self.bystander = self.submit(bystander_spec())

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.cluster.cli(*args)

    def submit(self, spec: dict[str, Any]) -> str:
        """Submit ``spec`` with ``spotsweep submit``; the new sweep's id."""
        return self.cluster.submit(spec)

    def post_raw(self, body: bytes, headers: dict[str, Any] | None = None, routing_key: str = topology.SWEEPS_QUEUE,
                 exchange: str = "") -> None:
        """Publish raw bytes as any AMQP client could (the queues are declared by the services)."""
        with pika.BlockingConnection(pika.URLParameters(self.rabbit_url)) as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_publish(exchange, routing_key, body,
                             pika.BasicProperties(headers=headers or {}, delivery_mode=2), mandatory=False)

    def sql(self, query: str, *args: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            return conn.execute(query, args).fetchall()

    def wait_sweep(self, sweep_id: str, timeout: float = 90) -> str:
        """The sweep's state once it is no longer running (its row may be written late)."""
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            rows = self.sql("SELECT state FROM sweeps WHERE sweep_id = %s", sweep_id)
            state = rows[0][0] if rows else None
            if state not in (None, "running"):
                return str(state)
            time.sleep(0.2)
        raise AssertionError(f"sweep {sweep_id!r} is {state} after {timeout}s\n{self.cluster.logs()}")

    def trials(self, sweep_id: str) -> list[dict[str, Any]]:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            cur = conn.cursor(row_factory=psycopg.rows.dict_row)
            return cur.execute("SELECT * FROM trial_results WHERE sweep_id = %s ORDER BY trial_name", (sweep_id,)).fetchall()

    def dead_letters(self, wait: float = 0.0) -> list[tuple[dict[str, Any], bytes]]:
        """Drain the dead-letter queue: each message's headers (``x-death`` among them) and body.
        With ``wait``, poll that long for at least one to arrive."""
        out: list[tuple[dict[str, Any], bytes]] = []
        deadline = time.monotonic() + wait
        with pika.BlockingConnection(pika.URLParameters(self.rabbit_url)) as conn:
            ch = conn.channel()
            while True:
                method, props, body = ch.basic_get(topology.DEAD_LETTER_QUEUE, auto_ack=True)
                if method is not None:
                    out.append((dict(props.headers or {}), body))
                elif out or time.monotonic() >= deadline:
                    return out
                else:
                    time.sleep(0.2)

    def assert_bystander_complete(self, timeout: float = 90) -> None:
        """The clean sweep that ran beside the hostile input completed with every point stored."""
        state = self.wait_sweep(self.bystander, timeout)
        rows = self.trials(self.bystander)
        assert state == "completed" and [r["state"] for r in rows] == ["completed"] * BYSTANDER_TRIALS, (
            state, rows, self.cluster.logs())
        expected = BYSTANDER_TRIALS * BYSTANDER_STEPS
        deadline = time.monotonic() + 30  # the collector may store the last points just after the end
        while (n := self._points(self.bystander)) < expected and time.monotonic() < deadline:
            time.sleep(0.2)
        assert n == expected, f"bystander has {n} of its {expected} points\n{self.cluster.logs()}"

    def assert_clean_sweep_completes(self) -> None:
        """The bystander completed, and a clean sweep submitted after the hostile input completes within a minute."""
        self.assert_bystander_complete()
        after = self.submit({**bystander_spec(), "name": "after"})
        assert self.wait_sweep(after, timeout=60) == "completed", self.cluster.logs()
        self.assert_outputs_clean()

    def _points(self, sweep_id: str) -> int:
        return int(self.sql("SELECT count(*) FROM metric_points WHERE sweep_id = %s AND name NOT LIKE 'sys/%%'", sweep_id)[0][0])

    def assert_outputs_clean(self) -> None:
        """Every command a user reads exits 0, with no raw control byte and no live formula."""
        outputs = [self._ok("ls"), self._ok("ls", "--json"), self._ok("status"), self._ok("status", "--json")]
        for (sweep_id,) in self.sql("SELECT sweep_id FROM sweeps WHERE state <> 'rejected' ORDER BY sweep_id"):
            outputs.append(self._ok("report", sweep_id))
            path = self.tmp / f"report-{len(outputs)}.csv"
            outputs.append(self._ok("report", sweep_id, "--csv", str(path)))
            check_csv(path)
        for out in outputs:
            bad = RAW_CONTROL.search(out)
            assert bad is None, f"raw control byte {bad.group()!r} in output:\n{out[:3000]!r}"

    def _ok(self, *args: str) -> str:
        proc = self.cli(*args)
        assert proc.returncode == 0, (args, proc.stdout[-3000:], proc.stderr[-3000:])
        assert "Traceback" not in proc.stderr, (args, proc.stderr[-3000:])
        return proc.stdout + proc.stderr


def check_csv(path: Path) -> None:
    """No cell a spreadsheet would run as a formula, and no raw control character."""
    with path.open(newline="") as f:
        for row in csv.reader(f):
            for cell in row:
                assert RAW_CONTROL.search(cell) is None, f"raw control character in CSV cell {cell[:200]!r}"
                if cell.startswith(FORMULA_START) and not _number(cell):
                    raise AssertionError(f"live formula cell in {path.name}: {cell[:200]!r}")


def _number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def spec_file(tmp: Path, spec: dict[str, Any]) -> Path:
    path = tmp / f"{spec.get('name', 'spec')}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


