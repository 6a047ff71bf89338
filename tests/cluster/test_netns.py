"""Many hosts on a real network: a sweep survives a cut agent link and a partitioned collector.

RabbitMQ, PostgreSQL, moto's S3 and the planner run on one host (network
namespace), the collector on a second, two agents on a third and a fourth,
joined by a bridge (tests/cluster/conftest.py). While a sweep of
deterministic, checkpointing trials (tests/chaos/chaos_trial.py) runs:

1. agent1's link is cut while it runs trials, until RabbitMQ has dropped
   its connection (missed heartbeats) and the agent has noticed too (pika's
   own heartbeat check), then restored: its trials run again from their
   checkpoints (elsewhere or on agent1), and agent1 rejoins and takes work;
2. the collector is partitioned from the broker (and everything else) the
   same way, the smallest partition that outlasts the heartbeat timeout on
   both sides, while trials keep reporting: their points wait in its queue
   and are all stored once it is back.

Then what a user depends on: each trial completed exactly once with its
exact final metric, every step's point stored once with its exact value
(none lost, none twice), resumes from checkpoints, nothing dead-lettered
(tests/chaos/chaos_checks.py).
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest
from cluster import wait_for
from netns import Host, established
from netsite import Site
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "chaos"))
from chaos_checks import check  # noqa: E402

from spotsweep.shared.topology import COLLECTOR_QUEUE  # noqa: E402

# Its own RabbitMQ node, PostgreSQL cluster and moto server, like the chaos test.
pytestmark = [pytest.mark.integration, pytest.mark.needs_rabbit, pytest.mark.needs_pg, pytest.mark.needs_s3]

TRIAL = Path(__file__).resolve().parents[1] / "chaos" / "chaos_trial.py"
TRIALS, STEPS, PAUSE, CKPT_EVERY, SLOTS = 6, 80, 0.25, 4, 2
T = TypeVar("T")
LOST = "broker connection lost; reconnecting"  # what serve() logs when its connection died


def spec() -> dict[str, object]:
    return {
        "name": "netns",
        "command": [sys.executable, str(TRIAL), "--k", "{k}", "--steps", str(STEPS), "--pause", str(PAUSE),
                    "--ckpt-every", str(CKPT_EVERY)],
        "metric": {"name": "loss", "mode": "min"},
        "space": {"k": list(range(TRIALS))},
        "max_concurrent": 2 * SLOTS,
        "retries": {"max_failures": 0, "max_lost": 10},
        "resources": {"gpus": 0, "class": "net"},
    }


def one(url: str, sql: str, args: tuple[object, ...] = ()) -> object:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql, args).fetchone()
    return row[0] if row else None


def partition(site: Site, host: Host, name: str, port: int, while_cut: Callable[[], T]) -> tuple[float, T]:
    """Cut ``host`` until RabbitMQ has dropped its connections and ``name``'s log says it
    lost its own, call ``while_cut``, restore; the seconds it was cut and what ``while_cut``
    gave. Called on the servers' host (for /proc/net/tcp)."""
    before = site.cluster.log(name).count(LOST)
    began = time.monotonic()
    site.net.cut(host)
    try:
        saw: dict[str, float] = {}

        def noticed() -> bool:
            if "broker" not in saw and established(port, host.address) == 0:
                saw["broker"] = time.monotonic() - began
            if name not in saw and site.cluster.log(name).count(LOST) > before:
                saw[name] = time.monotonic() - began
            return len(saw) == 2

        assert wait_until(noticed, timeout=60), f"{name} cut for 60 s: noticed by {saw} only\n" + site.cluster.logs(3000)
        print(f"{name} cut: noticed after " + ", ".join(f"{k} {v:.1f} s" for k, v in saw.items()))
        return time.monotonic() - began, while_cut()
    finally:
        site.net.restore(host)


@pytest.mark.timeout(300)
def test_a_cut_agent_and_a_partitioned_collector_lose_nothing(site: Site) -> None:
    began = time.monotonic()
    c, port = site.cluster, site.rabbit.port
    collector, agent1, agent2 = site.host("collector"), site.host("agent1"), site.host("agent2")
    c.start_on(site.servers, "planner", "planner")
    c.start_on(collector, "collector", "collector")
    agents = {}
    for name, host in (("agent1", agent1), ("agent2", agent2)):
        proc = c.start_on(host, name, "agent", "--slots", str(SLOTS), "--class", "net", "--grace", "15",
                          "--workdir", str(site.root / "work" / name))
        agents[name] = f"{socket.gethostname()}-{proc.pid}"  # the agent's id (ip netns exec execs it: same pid)
    with site.on_servers():
        url = site.pg.url
        sweep = c.submit(spec())

        # 1. agent1 runs trials that have checkpointed: cut it, past the heartbeat timeout.
        held = ("SELECT count(*) FROM trials t WHERE sweep_id = %s AND state = 'running' AND agent = %s AND EXISTS"
                " (SELECT 1 FROM trial_events e WHERE e.trial_id = t.trial_id AND e.kind = 'trial.checkpoint')")
        assert wait_for(url, held, (sweep, agents["agent1"]), lambda n: n >= 1, timeout=90) >= 1, c.logs(3000)
        with psycopg.connect(url) as conn:
            cut_trials = [r[0] for r in conn.execute("SELECT trial_id FROM trials WHERE sweep_id = %s AND state = 'running'"
                                                     " AND agent = %s", (sweep, agents["agent1"])).fetchall()]
        cut_at = one(url, "SELECT now()")
        agent_cut, _ = partition(site, agent1, "agent1", port, lambda: None)
        print(f"{time.monotonic() - began:.1f} s: agent1 back")
        restored_at = one(url, "SELECT now()")

        # ... it rejoins and takes work again.
        later = "SELECT count(*) FROM run_events WHERE sweep_id = %s AND kind = 'trial.started' AND agent = %s AND recorded_at > %s"
        rejoined = wait_for(url, later, (sweep, agents["agent1"], restored_at), lambda n: n >= 1, timeout=90)
        assert rejoined >= 1, "agent1 ran no trial after its link came back\n" + c.logs(3000)

        # 2. The collector partitioned from the broker while trials report: a backlog, then caught up.
        print(f"{time.monotonic() - began:.1f} s: agent1 took work")
        collector_cut, backlog = partition(site, collector, "collector", port, lambda: collector_queue(site))
        print(f"{time.monotonic() - began:.1f} s: collector back")

        final = wait_for(url, "SELECT state FROM sweeps WHERE sweep_id = %s", (sweep,), lambda s: s != "running", timeout=150)
        assert final == "completed", c.logs(3000)
        print(f"{time.monotonic() - began:.1f} s: sweep over")
        stored = "SELECT count(DISTINCT (trial_id, step)) FROM metric_points WHERE sweep_id = %s AND name = 'loss'"
        assert wait_for(url, stored, (sweep,), lambda n: n >= TRIALS * STEPS, timeout=60) == TRIALS * STEPS, c.logs(3000)
        assert wait_until(lambda: collector_queue(site) == 0, timeout=60), "the collector's queue never drained"

        codes = c.stop(timeout=60)
        findings = check(url, sweep, TRIALS, STEPS, CKPT_EVERY, site.rabbit)
        reran = one(url, "SELECT count(DISTINCT trial_id) FROM run_events WHERE sweep_id = %s AND kind = 'trial.started'"
                         " AND trial_id = ANY(%s) AND recorded_at > %s", (sweep, cut_trials, cut_at))
    table = "\n".join(f"{f.check:45} expected {f.expected:30} found {f.found}" for f in findings)
    print(f"agent1 cut {agent_cut:.1f} s, collector cut {collector_cut:.1f} s (heartbeat {c.env['SPOTSWEEP_HEARTBEAT']} s),"
          f" collector backlog {backlog}, whole test {time.monotonic() - began:.0f} s\n{table}")
    assert all(f.ok for f in findings), table + "\n" + c.logs(3000)
    assert reran == len(cut_trials), f"of agent1's {len(cut_trials)} cut trials, {reran} ran again"
    assert backlog,  "no point waited for the partitioned collector: the test did not exercise catching up"
    assert all(code in (0, None) for code in codes.values()), codes


def collector_queue(site: Site) -> int | None:
    """Messages in the collector's queue (ready or unacked); None if rabbitmqctl failed."""
    out = site.rabbit.ctl("list_queues", "name", "messages", "--no-table-headers")
    rows = dict(line.split()[:2] for line in out.stdout.splitlines() if len(line.split()) >= 2)
    time.sleep(0.5)  # rabbitmqctl starts a VM per call: poll it gently
    return int(rows[COLLECTOR_QUEUE]) if out.returncode == 0 and COLLECTOR_QUEUE in rows else None
