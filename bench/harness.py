"""What every benchmark shares: throwaway services, real spotsweep processes,
the Optuna peer's storage, repeated measurement, one table and a JSON file.

* :func:`services` makes a fresh RabbitMQ vhost (``rabbitmqctl add_vhost`` +
  ``set_permissions``) and fresh PostgreSQL databases, and deletes them after.
* :class:`Cluster` runs ``python -m spotsweep planner|collector|agent`` as
  separate processes with ``SPOTSWEEP_*`` settings, like a deployment would
  (artifacts in a local directory: ``SPOTSWEEP_S3_ENDPOINT`` unset).
* :func:`moto_s3` serves S3 from moto's server on loopback (the client code
  MinIO gets); ``Cluster(..., s3=env)`` puts the services on it, the
  production path, instead of local artifacts.
* :func:`summary` turns repeated runs into median, min, max and spread, so
  every table says how noisy the machine was.

Benchmarks print a table and write ``bench/results/<name>.json``; they never
assert a time (tests must not either: these machines are shared and noisy).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg

PG_ADMIN = os.environ.get("SPOTSWEEP_BENCH_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
RABBIT_HOST = os.environ.get("SPOTSWEEP_BENCH_RABBIT_HOST", "127.0.0.1")
RESULTS = Path(__file__).resolve().parent / "results"
RAY_VENV = Path(__file__).resolve().parent.parent / "build" / "peers" / "ray"  # the Ray Tune peer's own virtualenv
RAY_REQUIREMENT = "ray[tune]==2.60.0"


# -- services ---------------------------------------------------------------


def _rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=120)


@dataclass
class Services:
    amqp_url: str
    vhost: str
    databases: dict[str, str] = field(default_factory=dict)  # label -> URL

    def database(self, label: str) -> str:
        """A fresh database (created once per label), dropped at the end."""
        if label not in self.databases:
            name = f"spotsweep_bench_{label}_{uuid.uuid4().hex[:6]}"
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            self.databases[label] = PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"
        return self.databases[label]


@contextmanager
def services() -> Iterator[Services]:
    vhost = f"spotsweep-bench-{uuid.uuid4().hex[:8]}"
    _rabbitmqctl("add_vhost", vhost)
    s = Services(f"amqp://guest:guest@{RABBIT_HOST}:5672/{vhost}", vhost)
    try:
        _rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        yield s
    finally:
        _rabbitmqctl("delete_vhost", vhost)
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            for url in s.databases.values():
                conn.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')


@contextmanager
def moto_s3() -> Iterator[dict[str, str]]:
    """moto's S3 server on a free loopback port, for as long as the block runs; yields
    the ``SPOTSWEEP_S3_*`` settings of a fresh bucket on it (the agent creates it)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start on port {port}") from None
                time.sleep(0.1)
        yield {"SPOTSWEEP_S3_ENDPOINT": f"http://127.0.0.1:{port}", "SPOTSWEEP_S3_ACCESS_KEY": "testing",
               "SPOTSWEEP_S3_SECRET_KEY": "testing-secret", "SPOTSWEEP_S3_BUCKET": f"bench-{uuid.uuid4().hex[:8]}",
               "SPOTSWEEP_S3_REGION": "us-east-1"}
    finally:
        proc.terminate()
        proc.wait(10)


def settle() -> None:
    """Flush PostgreSQL's dirty buffers (``CHECKPOINT``) before a measured run, so that no
    system pays for the writes of the one measured before it (Optuna's commits wait on
    the disk)."""
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def load_1m() -> float:
    """The 1-minute load average now: printed beside each figure, as these machines are shared."""
    return round(os.getloadavg()[0], 2)


def ray_python(build: bool = True) -> tuple[Path | None, str]:
    """The Ray Tune peer's python (headline and search share its virtualenv), built with ``ray[tune]``
    when missing or broken; or None. The note says which, for the printed table and the JSON."""
    python = RAY_VENV / "bin" / "python"
    check = [str(python), "-c", "import ray, ray.tune"]
    if python.exists() and subprocess.run(check, capture_output=True, timeout=120).returncode == 0:
        return python, f"Ray Tune from {RAY_VENV}"
    if not build:
        return None, f"Ray Tune skipped: no peer virtualenv at {RAY_VENV} (--no-build-ray)"
    print(f"building the Ray Tune peer virtualenv at {RAY_VENV} ({RAY_REQUIREMENT}) ...", flush=True)
    for cmd in ([shutil.which("python3") or sys.executable, "-m", "venv", str(RAY_VENV)],
                [str(RAY_VENV / "bin" / "pip"), "install", "--quiet", RAY_REQUIREMENT]):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            shutil.rmtree(RAY_VENV, ignore_errors=True)
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            return None, f"Ray Tune skipped: `{Path(cmd[0]).name} {' '.join(cmd[1:])}` failed ({tail[0]})"
    return python, f"Ray Tune from {RAY_VENV} (built now)"


def sqlalchemy_url(url: str) -> str:
    """The same database for SQLAlchemy (Optuna's RDBStorage) through psycopg 3."""
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


# -- spotsweep processes ----------------------------------------------------


def revision_site(rev: str) -> Path:
    """spotsweep as it was at git revision ``rev``, installed (no deps) under
    ``build/bench-<rev>``; cached. For before/after runs of the services."""
    root = Path(__file__).resolve().parent.parent
    # Cached by commit, not by name: "HEAD" or a branch moves between runs.
    commit = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=root, check=True,
                            capture_output=True, text=True).stdout.strip()
    site = root / "build" / f"bench-{commit[:12]}"
    if not (site / "spotsweep").is_dir():
        with tempfile.TemporaryDirectory() as src:
            archive = subprocess.run(["git", "archive", commit], cwd=root, check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), src],
                           check=True, capture_output=True)
    return site


_BOOT = ("import os, runpy, sys; sys.path[:0] = sys.argv.pop(1).split(os.pathsep); sys.argv[0] = 'spotsweep'; "
         "runpy.run_module('spotsweep', run_name='__main__', alter_sys=True)")


class Cluster:
    """spotsweep services as separate processes, logs under ``tmp``.

    ``SPOTSWEEP_BENCH_SERVICES_REV=<git rev>`` runs the services of that
    revision instead of the working tree's (the "before" of a before/after).
    """

    def __init__(self, svc: Services, db_url: str, tmp: Path, log_level: str = "INFO",
                 s3: dict[str, str] | None = None) -> None:
        self.tmp = tmp
        self.db_url = db_url
        self.amqp_url = svc.amqp_url
        self.log_level = log_level
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")},
            "SPOTSWEEP_AMQP_URL": svc.amqp_url,
            "SPOTSWEEP_DATABASE_URL": db_url,
            "SPOTSWEEP_HOME": str(tmp / "home"),
            "SPOTSWEEP_ALLOW_ROOT_TRIALS": "1",  # benchmarks run as root, and their trials are our own
            **(s3 or {}),  # the SPOTSWEEP_S3_* settings: artifacts in S3, else in a local directory
        }
        self.python = [sys.executable, "-m", "spotsweep"]
        rev = os.environ.get("SPOTSWEEP_BENCH_SERVICES_REV")
        if rev:
            # The editable install's import hook would win over PYTHONPATH:
            # start without site (-S), with that revision first on the path.
            paths = [str(revision_site(rev)), *(p for p in sys.path if p.endswith("site-packages"))]
            self.python = [sys.executable, "-S", "-c", _BOOT, os.pathsep.join(paths)]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *args: str, ready: str | None = None, timeout: float = 60) -> subprocess.Popen[bytes]:
        """Start ``spotsweep ARGS``; wait for ``ready`` in its log when given."""
        log = (self.tmp / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            [*self.python, "--log-level", self.log_level, *args],
            env=self.env, stdout=log, stderr=log, start_new_session=True,
        )
        self.procs[name] = proc
        if ready:
            self.wait_log(name, ready, timeout)
        return proc

    def wait_log(self, name: str, text: str, timeout: float = 60) -> None:
        path = self.tmp / f"{name}.log"
        deadline = time.monotonic() + timeout
        while text not in path.read_text(errors="replace"):
            if self.procs[name].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} not ready ({text!r}):\n{path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.05)

    def agent(self, name: str, slots: int, resource_class: str = "cpu", *extra: str) -> subprocess.Popen[bytes]:
        return self.start(name, "agent", "--slots", str(slots), "--class", resource_class,
                          "--workdir", str(self.tmp / f"work-{name}"), *extra, ready="agent ready")

    def control_plane(self) -> None:
        """A planner and a collector, both ready (the schema migrated)."""
        self.start("planner", "planner", ready="planner running")
        self.start("collector", "collector", ready="collector running")

    def stop(self, timeout: float = 30) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in self.procs.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def profile(self, seconds: float, outdir: Path) -> list[subprocess.Popen[bytes]]:
        """Sample every service with py-spy for ``seconds`` (collapsed stacks, ``<name>.txt``);
        wait on the returned processes. Sampling costs CPU: profiled runs are not reported."""
        outdir.mkdir(parents=True, exist_ok=True)
        py_spy = Path(sys.executable).with_name("py-spy")
        return [
            subprocess.Popen([str(py_spy), "record", "--pid", str(p.pid), "--duration", str(int(seconds)), "--rate", "200",
                              "--format", "raw", "--nonblocking", "--threads", "-o", str(outdir / f"{name}.txt")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for name, p in self.procs.items() if p.poll() is None
        ]

    def profiled(self, outdir: Path | None, seconds: float, run: Callable[[], object]) -> None:
        """With ``outdir``: ``run()`` once more under py-spy (an extra, unreported run)."""
        if outdir is None:
            return
        spies = self.profile(seconds, outdir)
        run()
        for spy in spies:
            spy.wait()

    def logs(self, limit: int = 2000) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-limit:]}" for p in sorted(self.tmp.glob("*.log")))


@contextmanager
def cluster(svc: Services, db_label: str, tmp: Path, **kw: Any) -> Iterator[Cluster]:
    c = Cluster(svc, svc.database(db_label), tmp, **kw)
    try:
        yield c
    finally:
        c.stop()


def submit(amqp_url: str, spec: dict[str, Any], name: str | None = None) -> tuple[str, float]:
    """Post a spec as ``spotsweep submit`` does; returns the sweep id and the wall-clock time of the post."""
    from spotsweep.services.planner.bodies import new_sweep_id, submission
    from spotsweep.shared import topology
    from spotsweep.shared.broker.port import Outgoing
    from spotsweep.shared.broker.rabbit import RabbitBroker
    from spotsweep.shared.spec import parse_spec

    parsed = parse_spec(spec)
    sweep_id = new_sweep_id(name or parsed.name)
    broker = RabbitBroker(amqp_url)
    try:
        broker.declare([topology.dead_letter_queue(), topology.sweeps_queue()])
        message = submission(parsed, sweep_id)
        if os.environ.get("SPOTSWEEP_BENCH_SERVICES_REV"):
            # Services of another revision may predate the typed SubmitSweep
            # (and spec fields added since): post the bench's own spec as the
            # untyped body that every planner reads.
            message = Outgoing("", topology.SWEEPS_QUEUE, json.dumps(spec).encode(),
                               headers={"sweep_id": sweep_id}, message_id=sweep_id, priority=parsed.priority)
        posted = time.time()
        broker.publish(message)
    finally:
        broker.stop(drain=False)
    return sweep_id, posted


def wait_sweep(db_url: str, sweep_id: str, timeout: float, poll: float = 0.05) -> dict[str, Any]:
    """Block until the sweep is no longer running; its row (with ``finished_at``)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(db_url, autocommit=True) as conn:
        while True:
            try:
                row = conn.execute("SELECT state, finished_at, created_at FROM sweeps WHERE sweep_id = %s",
                                   (sweep_id,)).fetchone()
            except psycopg.errors.UndefinedTable:
                row = None
            if row and row[0] != "running":
                return {"state": row[0], "finished_at": row[1], "created_at": row[2]}
            if time.monotonic() > deadline:
                raise TimeoutError(f"sweep {sweep_id} not finished after {timeout}s (state {row and row[0]})")
            time.sleep(poll)


def epoch(ts: datetime) -> float:
    return ts.replace(tzinfo=ts.tzinfo or timezone.utc).timestamp()


# -- numbers, tables, JSON --------------------------------------------------


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median, min, max and spread ((max-min)/median) of repeated runs."""
    vals = sorted(values)
    med = statistics.median(vals)
    return {
        "median": med, "min": vals[0], "max": vals[-1], "runs": len(vals),
        "spread": (vals[-1] - vals[0]) / med if med else 0.0,
    }


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sample."""
    vals = sorted(values)
    k = max(0, min(len(vals) - 1, round(q / 100 * len(vals) + 0.5) - 1))
    return vals[k]


def machine() -> dict[str, Any]:
    load = os.getloadavg()
    return {
        "host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
        "load_avg_1m_at_start": round(load[0], 2), "platform": platform.platform(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    rev = os.environ.get("SPOTSWEEP_BENCH_SERVICES_REV")
    title += f" [services at {rev}]" if rev else ""
    cells = [[str(h) for h in header]] + [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [title, "  ".join(h.ljust(w) for h, w in zip(cells[0], widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells[1:]]
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if v == 0 or abs(v) >= 100:
            return f"{v:,.0f}"
        return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def write_json(name: str, payload: dict[str, Any], path: Path | None = None) -> Path:
    out = path or RESULTS / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    services_rev = os.environ.get("SPOTSWEEP_BENCH_SERVICES_REV") or "working tree"
    out.write_text(json.dumps({"benchmark": name, "machine": machine(), "services": services_rev, **payload},
                              indent=2, default=str))
    return out


def rss_mb(pid: int, children: bool = False) -> float:
    """Resident set size of a process (and its children), in MiB."""
    import psutil

    p = psutil.Process(pid)
    total = p.memory_info().rss
    if children:
        total += sum(c.memory_info().rss for c in p.children(recursive=True))
    return total / 2**20
