"""spotsweep's services as real separate processes, for integration and chaos tests.

Each service runs as ``python -m spotsweep <service>`` in its own session
(process group) with the environment given, logging into a file per process.
``kill9`` is a node loss: the service and every process it started die at once
(trials included, as when a spot VM vanishes).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import yaml


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, from /proc (trials run in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


class Cluster:
    def __init__(self, env: dict[str, str], tmp: Path) -> None:
        self.env, self.tmp = env, tmp
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"{name}.log").open("ab")
        proc = subprocess.Popen([sys.executable, "-m", "spotsweep", *args], env={**self.env, **(env or {})}, stdout=log,
                                stderr=log, start_new_session=True)
        self.procs[name] = proc
        return proc

    def kill9(self, name: str) -> None:
        """The process, its group and everything it started, at once."""
        proc = self.procs[name]
        victims = descendants(proc.pid)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(10)

    def term(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGTERM)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "spotsweep", *args], env=self.env, capture_output=True, text=True,
                              timeout=120)

    def submit(self, body: dict[str, Any]) -> str:
        path = self.tmp / f"{body['name']}.yaml"
        path.write_text(yaml.safe_dump(body))
        proc = self.cli("submit", str(path))
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip().splitlines()[-1]

    def stop(self, timeout: float = 60) -> dict[str, int | None]:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        return {n: p.wait(timeout) for n, p in self.procs.items()}

    def kill_all(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is None:
                self.kill9(name)

    def logs(self, tail: int = 2000) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-tail:]}" for p in sorted(self.tmp.glob("*.log")))


def wait_for(database_url: str, sql: str, args: tuple[Any, ...], until: Any, timeout: float = 90) -> Any:
    """Poll ``sql``'s first column until ``until(value)``; the last value either way."""
    deadline = time.monotonic() + timeout
    value = None
    while True:
        try:
            with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as conn:
                while True:
                    try:
                        row = conn.execute(sql, args).fetchone()
                    except psycopg.errors.UndefinedTable:  # the services have not migrated yet
                        row = None
                    value = row[0] if row else None  # no row yet: the planner has not written it
                    if (value is not None and until(value)) or time.monotonic() > deadline:
                        return value
                    time.sleep(0.2)
        except psycopg.OperationalError:  # the database is restarting
            if time.monotonic() > deadline:
                return value
            time.sleep(0.5)
