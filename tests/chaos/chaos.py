"""Chaos: a real sweep through RabbitMQ, PostgreSQL and S3 while nodes and services die.

``python tests/chaos/chaos.py [--short|--long] [--seed N]`` (``make chaos``;
CI runs ``--short`` through tests/chaos/test_chaos.py). It starts a private
RabbitMQ node and PostgreSQL cluster (so it may kill them), moto's S3 server,
a planner, a collector and several agents as separate processes; submits a
sweep of deterministic, checkpointing trials (tests/chaos/chaos_trial.py);
and while it runs injects, on a seeded schedule:

* graceful preemptions (SIGTERM to an agent, which drains: checkpoint,
  report, hand back) followed by a fresh agent, as a new spot node;
* node losses: kill -9 of an agent with its trials, and a fresh agent;
* kill -9 of the planner, of the collector, of the broker, of the database,
  each started again after a moment.

Then it checks what a user depends on: every trial completed exactly once,
with the exact final metric; interrupted trials resumed from their
checkpoints, not from step 0; every reported step is stored, with the exact
value, and none twice; nothing left in the dead-letter queue; and that the
graceful path really ran: a preempted agent's trials were counted as
preemptions and the agent itself drained and exited 0. It prints a
table of what it injected and one of what it found, and exits 0 only if
every check holds.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "support")]

from chaos_checks import Finding, check  # noqa: E402
from cluster import Cluster, wait_for  # noqa: E402
from servers import MotoS3, PrivatePostgres, PrivateRabbit  # noqa: E402
from waiting import wait_until  # noqa: E402

from spotsweep.shared.topology import COLLECTOR_QUEUE  # noqa: E402

KINDS = ("preempt", "kill-agent", "kill-planner", "kill-collector", "kill-broker", "kill-postgres")


@dataclass(frozen=True)
class Plan:
    trials: int
    steps: int
    pause: float
    ckpt_every: int
    agents: int
    slots: int
    injections: tuple[str, ...]
    every: float  # seconds between injections
    timeout: float = 600.0


SHORT = Plan(trials=12, steps=90, pause=0.12, ckpt_every=5, agents=2, slots=2, every=3.0,
             injections=("preempt", "kill-agent", "kill-planner", "kill-collector", "kill-broker", "preempt",
                         "kill-postgres", "kill-agent"))
LONG = Plan(trials=40, steps=80, pause=0.1, ckpt_every=8, agents=3, slots=2, every=4.0, timeout=1200.0,
            injections=KINDS * 4)


@dataclass
class Injection:
    at: float
    kind: str
    target: str
    took: float = 0.0


@dataclass
class Chaos:
    plan: Plan
    root: Path
    rng: random.Random
    injected: list[Injection] = field(default_factory=list)
    agent_no: int = 0
    codes: dict[str, int | None] = field(default_factory=dict)  # exit code of every process, at the end

    def setup(self) -> None:
        self.rabbit = PrivateRabbit(self.root / "rabbit")
        self.rabbit.start()
        self.pg = PrivatePostgres(self.root / "pg")
        self.pg.start()
        self.s3 = MotoS3()
        env = {**os.environ, "SPOTSWEEP_AMQP_URL": self.rabbit.url, "SPOTSWEEP_DATABASE_URL": self.pg.url,
               "SPOTSWEEP_HOME": str(self.root / "home"), "SPOTSWEEP_HEARTBEAT": "5", **self.s3.env("chaos"),
               "SPOTSWEEP_ALLOW_ROOT_TRIALS": "1"}  # `make chaos` runs as root, outside pytest: our own trials
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        self.cluster = Cluster(env, self.root / "logs")

    def teardown(self) -> None:
        self.cluster.kill_all()
        for server in (self.s3, self.pg, self.rabbit):
            try:
                server.stop()
            except Exception as e:  # noqa: BLE001 - best effort, report and go on
                print(f"chaos: stopping {type(server).__name__} failed: {e}", file=sys.stderr)

    def new_agent(self) -> str:
        self.agent_no += 1
        name = f"agent-{self.agent_no}"
        self.cluster.start(name, "agent", "--slots", str(self.plan.slots), "--class", "chaos", "--grace", "15",
                           "--workdir", str(self.root / "work" / name))
        return name

    def live_agents(self) -> list[str]:
        return [n for n, p in self.cluster.procs.items() if n.startswith("agent-") and p.poll() is None
                and n not in self.draining]

    def spec(self) -> dict[str, Any]:
        p = self.plan
        return {
            "name": "chaos",
            "command": ["python", str(HERE / "chaos_trial.py"), "--k", "{k}", "--steps", str(p.steps),
                        "--pause", str(p.pause), "--ckpt-every", str(p.ckpt_every)],
            "metric": {"name": "loss", "mode": "min"},
            "space": {"k": list(range(p.trials))},
            "max_concurrent": p.agents * p.slots,
            "retries": {"max_failures": 0, "max_lost": 50},  # a failure is a bug here; losses are the point
            "resources": {"gpus": 0, "class": "chaos"},
        }

    def inject(self, kind: str, t0: float) -> Injection:
        started = time.monotonic()
        target = kind.removeprefix("kill-")
        if kind == "preempt":
            target = self.rng.choice(self.live_agents())
            self.cluster.term(target)  # it drains in the background; a new node joins now
            self.draining.add(target)
            self.new_agent()
        elif kind == "kill-agent":
            target = self.rng.choice(self.live_agents())
            self.cluster.kill9(target)
            self.new_agent()
        elif kind in ("kill-planner", "kill-collector"):
            self.cluster.kill9(target)
            time.sleep(1.0)
            self.cluster.start(target, target)
        elif kind == "kill-broker":
            self.rabbit.kill9()
            time.sleep(1.0)
            self.rabbit.start()
        elif kind == "kill-postgres":
            self.pg.kill9()
            time.sleep(1.0)
            self.pg.start()
        return Injection(round(started - t0, 1), kind, target, round(time.monotonic() - started, 1))

    def run(self) -> str:
        self.draining: set[str] = set()
        for name in ("planner", "collector"):
            self.cluster.start(name, name)
        for _ in range(self.plan.agents):
            self.new_agent()
        sweep_id = self.cluster.submit(self.spec())
        running = "SELECT count(*) FROM trials WHERE sweep_id = %s AND state = 'running'"
        wait_for(self.pg.url, running, (sweep_id,), lambda n: n >= 1, timeout=60)
        t0 = time.monotonic()
        schedule = list(self.plan.injections)
        state = "SELECT state FROM sweeps WHERE sweep_id = %s"
        for kind in schedule:
            time.sleep(self.plan.every * self.rng.uniform(0.6, 1.4))
            if wait_for(self.pg.url, state, (sweep_id,), lambda s: True, timeout=30) != "running":
                break  # finished early: the rest of the schedule is moot
            self.injected.append(self.inject(kind, t0))
            print(f"chaos: {self.injected[-1]}", file=sys.stderr, flush=True)
        final = wait_for(self.pg.url, state, (sweep_id,), lambda s: s != "running", timeout=self.plan.timeout)
        if final != "running":  # the collector's last points: stored once its queue is empty and nothing unacked
            wait_until(lambda: self.collector_idle(), timeout=60)
        self.codes = self.cluster.stop(timeout=60)
        bad = {n: c for n, c in self.codes.items() if c not in (0, -9)}
        if bad:
            print(f"chaos: services exited badly: {bad}", file=sys.stderr)
        return sweep_id

    def collector_idle(self) -> bool:
        out = self.rabbit.ctl("list_queues", "name", "messages", "--no-table-headers")
        rows = dict(line.split()[:2] for line in out.stdout.splitlines() if len(line.split()) >= 2)
        return out.returncode == 0 and rows.get(COLLECTOR_QUEUE) == "0"

    def drained(self) -> dict[str, int | None]:
        """Exit code of each agent preempted by the run (a SIGTERM it had to drain)."""
        return {name: self.codes.get(name) for name in sorted(self.draining)}


def print_tables(chaos: Chaos, findings: list[Finding]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=140)
    injected = Table(title="injected")
    for col in ("t (s)", "what", "target", "took (s)"):
        injected.add_column(col)
    for i in chaos.injected:
        injected.add_row(str(i.at), i.kind, i.target, str(i.took))
    console.print(injected)
    found = Table(title="found")
    for col in ("check", "expected", "found", "ok"):
        found.add_column(col)
    for f in findings:
        found.add_row(f.check, f.expected, f.found, "yes" if f.ok else "NO")
    console.print(found)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--long", action="store_true", help="more trials and injections (make chaos)")
    p.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED", "0")))
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs) afterwards")
    args = p.parse_args(argv)
    plan = LONG if args.long else SHORT
    root = Path(tempfile.mkdtemp(prefix="spotsweep-chaos-"))
    chaos = Chaos(plan, root, random.Random(args.seed))
    print(f"chaos: seed {args.seed}, work in {root}", file=sys.stderr, flush=True)
    chaos.setup()
    try:
        sweep_id = chaos.run()
        findings = check(chaos.pg.url, sweep_id, plan.trials, plan.steps, plan.ckpt_every, chaos.rabbit,
                         preempts=sum(i.kind == "preempt" for i in chaos.injected), drained=chaos.drained())
    finally:
        chaos.teardown()
    print_tables(chaos, findings)
    ok = all(f.ok for f in findings)
    if not ok:
        print(chaos.cluster.logs(3000), file=sys.stderr)
        print(f"chaos: FAILED; logs kept in {root}", file=sys.stderr)
    elif not args.keep:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
