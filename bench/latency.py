"""Latency: from a trial message published to its process started (p50,
p99), and the idle gap a slot spends between two trials.

Each trial is ``/bin/sh`` that takes the time (``date +%s%N``) first thing,
sleeps ``--work`` seconds, takes the time again and writes both as one metric
line. The benchmark listens to the events exchange itself.

* publish -> start: the benchmark publishes one trial message at a time (as
  the planner's outbox does: ``spotsweep.trials``, persistent, confirmed) to
  an idle 1-slot agent; latency = the trial's first timestamp - the moment
  before the publish. Also shown: publish -> the agent's ``trial.started``
  (its time stamp, taken as the process started; a run over within one poll
  sends it inside its ``trial.finished``).
* slot gap, queue ahead: ``--trials`` messages queued at once for a 1-slot
  agent; gap = next trial's start - previous trial's end.
* slot gap, planner in the loop: a sweep with ``max_concurrent: 1`` on that
  slot, so each next trial waits for the planner to see the previous end.
* peer: Optuna (PostgreSQL storage, one worker) between two objective calls:
  its ``tell`` of one trial and ``ask`` of the next.

    python bench/latency.py --trials 40
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import harness
import optuna_peer
import psycopg

from spotsweep.shared import topology
from spotsweep.shared.broker.port import Delivery, Outgoing
from spotsweep.shared.broker.rabbit import RabbitBroker
from spotsweep.shared.messages import TrialFinished, TrialMessage, TrialMetrics, TrialStarted, decode, encode, unpack

SCRIPT = ('s=$(date +%s%N); sleep {work}; e=$(date +%s%N); '
          'printf \'{{"step": 0, "start_ns": %s, "end_ns": %s}}\\n\' "$s" "$e" >> "$SPOTSWEEP_METRICS"')


class Listener:
    """Every trial event of the vhost, by trial id, on a private queue."""

    def __init__(self, amqp_url: str) -> None:
        self.broker = RabbitBroker(amqp_url)
        self._cond = threading.Condition()
        self.started: dict[str, float] = {}
        self.points: dict[str, dict[str, float]] = defaultdict(dict)
        self.finished: set[str] = set()
        queue = self.broker.declare_private_queue([(topology.EVENTS_EXCHANGE, "trial.#")])
        self.broker.consume(queue, self._on, prefetch=1000)
        self._thread = threading.Thread(target=self.broker.run, daemon=True)
        self._thread.start()

    def _on(self, d: Delivery) -> None:
        with self._cond:
            for ev in unpack(decode(d.body)):  # a start sent alone, or inside its run's end
                if isinstance(ev, TrialStarted):
                    self.started.setdefault(str(ev.trial_id), ev.time.timestamp())
                elif isinstance(ev, TrialMetrics):
                    self.points[str(ev.trial_id)].update({p.name: p.value for p in ev.points})
                elif isinstance(ev, TrialFinished):
                    self.finished.add(str(ev.trial_id))
            self._cond.notify_all()
        d.ack()

    def wait_finished(self, ids: list[str], timeout: float = 60) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: all(i in self.finished for i in ids), timeout):
                raise TimeoutError(f"trials not finished: {[i for i in ids if i not in self.finished]}")

    def close(self) -> None:
        self.broker.stop(drain=False)
        self._thread.join(10)


def message(tag: str, k: int, work: float) -> Outgoing:
    msg = TrialMessage(sweep_id="bench-latency", trial_id=f"{tag}.{k}", attempt=1, trial_name=f"{tag}_{k}", index=k,
                       params={}, argv=["/bin/sh", "-c", SCRIPT.format(work=work)], metric="start_ns",
                       resource_class="cpu", gpus=0)
    return Outgoing(topology.TRIALS_EXCHANGE, "cpu", encode(msg), headers={"sweep_id": msg.sweep_id,
                    "trial_id": msg.trial_id, "attempt": 1}, message_id=f"{msg.trial_id}#1")


def gaps(spans: list[tuple[float, float]]) -> list[float]:
    """Seconds from each trial's end to the next trial's start on the same slot."""
    spans = sorted(spans)
    return [b[0] - a[1] for a, b in zip(spans, spans[1:])]


def publish_to_start(lst: Listener, pub: RabbitBroker, n: int, work: float) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"process": [], "started_event": []}
    for k in range(n):
        m = message("idle", k, work)
        t0 = time.time()
        pub.publish(m)
        tid = f"idle.{k}"
        lst.wait_finished([tid])
        out["process"].append(lst.points[tid]["start_ns"] / 1e9 - t0)
        out["started_event"].append(lst.started[tid] - t0)
        time.sleep(0.1)  # the agent is idle again when the next one comes
    return out


def queue_ahead(lst: Listener, pub: RabbitBroker, n: int, work: float, rep: int) -> list[float]:
    tag = f"ahead{rep}"
    pub.publish_many([message(tag, k, work) for k in range(n)])
    ids = [f"{tag}.{k}" for k in range(n)]
    lst.wait_finished(ids, timeout=60 + n * (work + 1))
    return gaps([(lst.points[i]["start_ns"] / 1e9, lst.points[i]["end_ns"] / 1e9) for i in ids])


def planner_loop(c: harness.Cluster, n: int, work: float) -> list[float]:
    spec = {"name": "bench-gap", "command": ["/bin/sh", "-c", SCRIPT.format(work=work).replace("{", "{{").replace("}", "}}")],
            "metric": {"name": "start_ns", "mode": "min"}, "space": {"i": {"type": "int", "low": 0, "high": n - 1}},
            "max_concurrent": 1, "resources": {"gpus": 0, "class": "cpu"}}
    sweep_id, _ = harness.submit(c.amqp_url, spec)
    harness.wait_sweep(c.db_url, sweep_id, 60 + n * (work + 2))
    with psycopg.connect(c.db_url) as conn:
        rows = conn.execute("SELECT metrics FROM trials WHERE sweep_id = %s", (sweep_id,)).fetchall()
    return gaps([(r[0]["start_ns"] / 1e9, r[0]["end_ns"] / 1e9) for r in rows])


def optuna_gaps(storage: str, name: str, n: int, work: float) -> list[float]:
    spans: list[tuple[float, float]] = []

    def objective(trial: Any) -> float:
        s = time.time()
        time.sleep(work)
        spans.append((s, time.time()))
        return 0.0

    objective.collected = spans  # type: ignore[attr-defined]
    res = optuna_peer.run(storage, name, n, 1, objective)
    return gaps([tuple(s) for s in res["workers"][0]["extra"]])


def stats_ms(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {"p50": harness.percentile(ms, 50), "p99": harness.percentile(ms, 99), "max": max(ms), "n": len(ms)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=40, help="samples per measurement (smoke: 8)")
    ap.add_argument("--work", type=float, default=0.1, help="seconds each trial sleeps")
    ap.add_argument("--repeat", type=int, default=2, help="repeats of the queue-ahead gap (for its noise)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    res: dict[str, Any] = {}
    with harness.services() as svc, tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp, \
            harness.cluster(svc, "spotsweep", Path(tmp)) as c:
        c.control_plane()
        c.agent("agent", 1)
        lst, pub = Listener(c.amqp_url), RabbitBroker(c.amqp_url)
        try:
            publish_to_start(lst, pub, 3, args.work)  # warm-up
            p2s = publish_to_start(lst, pub, args.trials, args.work)
            res["publish_to_process_start"] = stats_ms(p2s["process"])
            res["publish_to_started_event"] = stats_ms(p2s["started_event"])
            ahead = [queue_ahead(lst, pub, args.trials, args.work, r) for r in range(args.repeat)]
            res["gap_queue_ahead"] = stats_ms([g for run in ahead for g in run])
            res["gap_queue_ahead_p50_per_run"] = [stats_ms(run)["p50"] for run in ahead]
            res["gap_planner_in_loop"] = stats_ms(planner_loop(c, args.trials, args.work))
        finally:
            lst.close()
            pub.stop(drain=False)
        storage = harness.sqlalchemy_url(svc.database("optuna"))
        peer = [optuna_gaps(storage, f"gap-{r}", args.trials, args.work) for r in range(args.repeat)]
        res["optuna_gap"] = stats_ms([g for run in peer for g in run])
        res["optuna_gap_p50_per_run"] = [stats_ms(run)["p50"] for run in peer]
    labels = {
        "publish_to_process_start": ("spotsweep: publish -> process started", "< 20 ms (p50)"),
        "publish_to_started_event": ("spotsweep: publish -> trial.started stamped", ""),
        "gap_queue_ahead": ("spotsweep: slot gap, queue ahead", "< 50 ms"),
        "gap_planner_in_loop": ("spotsweep: slot gap, planner in the loop", ""),
        "optuna_gap": ("optuna: gap between two trials", ""),
    }
    rows = [[label, res[k]["n"], res[k]["p50"], res[k]["p99"], res[k]["max"], target] for k, (label, target) in labels.items()]
    ratio = res["optuna_gap"]["p50"] / res["gap_queue_ahead"]["p50"]
    print(harness.table(f"latency: 1-slot agent, trials sleep {args.work}s, {args.trials} samples each",
                        ["measure", "n", "p50 ms", "p99 ms", "max ms", "target"], rows))
    print(f"gap p50 per run: spotsweep {res['gap_queue_ahead_p50_per_run']}, optuna {res['optuna_gap_p50_per_run']}")
    print(f"ratio optuna gap / spotsweep gap (p50): {ratio:.2f}x")
    path = harness.write_json("latency", {"args": vars(args) | {"json": str(args.json)}, "results": res,
                                          "ratio_gap": ratio}, args.json)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
