"""Recovery: how long a trial is not running when its node goes, and how
much work it loses.

One long trial (a step every ``--step-s``, a checkpoint every
``--ckpt-every`` steps, a checkpoint on SIGTERM as the trial contract asks)
runs on one of two 1-slot agents, with the real planner and collector. Each
cycle, ``--repeat`` times:

* graceful preemption: SIGTERM to the agent running it -> the trial running
  again (``trial.started`` of the next attempt, on the other agent);
* kill -9 of the agent running it and of its trial (the node is lost) ->
  RabbitMQ's redelivery started on the other agent.

The stopped agent is started again before the next step, so one always
waits. Work lost = last step the stopped process executed (from a trace file
the trial appends to) - the step the next run resumed from.

Peer: Optuna (PostgreSQL storage) recovers a killed worker's trial with
heartbeats and its retry callback (``RetryHeartbeatStaleTrialCallback``); at its fastest settings
(``heartbeat_interval=1``, ``grace_period=2``) another worker fails the
stale trial and runs its retry. Optuna has no checkpoints, so the retry
starts from step 0; it has no graceful path either (SIGTERM ends a worker
like a kill).

    python bench/recovery.py --repeat 2
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
import optuna_peer
import psutil
import psycopg

TRIAL = """
import json, os, signal, time
from spotsweep import trial
step_s, every = float(os.environ["BENCH_STEP_S"]), int(os.environ["BENCH_CKPT_EVERY"])
state = trial.checkpoint_dir / "state.json"
step = json.loads(state.read_text())["step"] if state.exists() else 0
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
trace = open(os.environ["BENCH_TRACE"], "a", buffering=1)
while step < 10**9:
    step += 1
    time.sleep(step_s)
    trial.report(step, loss=1.0 / step)
    trace.write(f"{os.getpid()} {step}\\n")
    if stop or step % every == 0:
        tmp = state.with_suffix(".tmp")
        tmp.write_text(json.dumps({"step": step}))
        os.replace(tmp, state)
        trial.checkpoint_saved(step)
    if stop:
        raise SystemExit(143)
"""


def spec(args: argparse.Namespace, trace: Path) -> dict[str, Any]:
    return {
        "name": "bench-recovery",
        "command": ["python", "-c", TRIAL.replace("{", "{{").replace("}", "}}")],
        "metric": {"name": "loss", "mode": "min"},
        "space": {"i": [0]},
        "max_concurrent": 1,
        "retries": {"max_failures": 10},
        "env": {"BENCH_STEP_S": str(args.step_s), "BENCH_CKPT_EVERY": str(args.ckpt_every), "BENCH_TRACE": str(trace)},
        "resources": {"gpus": 0, "class": "cpu"},
    }


def last_step(trace: Path, pid: int) -> int:
    steps = [int(s) for p, s in (line.split() for line in trace.read_text().splitlines() if line.strip()) if int(p) == pid]
    return max(steps, default=0)


def wait_start(conn: psycopg.Connection[Any], after: float, timeout: float = 120) -> dict[str, Any]:
    """The first ``trial.started`` sent after ``after`` (wall clock)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = conn.execute("SELECT body FROM trial_events WHERE kind = 'trial.started' AND sweep_id LIKE 'bench-recovery-%'"
                            ).fetchall()
        later = [(t, r[0]) for r in rows if (t := _ts(r[0]["time"])) > after]
        if later:
            t, body = min(later, key=lambda x: x[0])
            return {"time": t, "agent": body["agent"], "attempt": body["attempt"], "resume_step": body.get("resume_step")}
        time.sleep(0.02)
    raise TimeoutError(f"no trial.started after {after}")


def _ts(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def agent_name(c: harness.Cluster, agent_id: str) -> str:
    pid = int(agent_id.rsplit("-", 1)[1])
    return next(n for n, p in c.procs.items() if p.pid == pid)


def trial_pid(agent_pid: int) -> int:
    """The agent's one child: its running trial."""
    kids = psutil.Process(agent_pid).children()
    return kids[0].pid if kids else -1


def run_spotsweep(c: harness.Cluster, args: argparse.Namespace, tmp: Path) -> dict[str, list[dict[str, Any]]]:
    trace = tmp / "trace"
    trace.touch()
    out: dict[str, list[dict[str, Any]]] = {"graceful": [], "kill9": []}
    _, posted = harness.submit(c.amqp_url, spec(args, trace))
    n_agents = 2
    with psycopg.connect(c.db_url, autocommit=True) as conn:
        current = wait_start(conn, posted - 1)
        for _ in range(args.repeat):
            for how in ("graceful", "kill9"):
                time.sleep(args.run_s)
                name = agent_name(c, current["agent"])
                proc = c.procs[name]
                child = trial_pid(proc.pid)
                stopped_at = time.time()
                if how == "graceful":
                    proc.send_signal(signal.SIGTERM)
                else:
                    os.kill(proc.pid, signal.SIGKILL)
                    if child > 0:
                        os.kill(child, signal.SIGKILL)  # the node is gone with its trials
                nxt = wait_start(conn, stopped_at)
                proc.wait(args.grace + 30)
                exited = time.time()
                lost = last_step(trace, child) - (nxt["resume_step"] or 0)
                out[how].append({"seconds": nxt["time"] - stopped_at, "lost_steps": lost, "agent_exit_s": exited - stopped_at,
                                 "resume_step": nxt["resume_step"], "attempt": nxt["attempt"]})
                if nxt["agent"] == current["agent"]:
                    raise RuntimeError(f"the trial came back on the stopped agent?\n{c.logs()}")
                c.agent(f"agent{n_agents}", 1)
                n_agents += 1
                current = nxt
    return out


def optuna_objective(tmp: Path, step_s: float) -> Any:
    def objective(trial: Any) -> float:
        # The retry callback copies user attributes into the retry.
        retried = trial.number != 0 and bool(trial.user_attrs.get("long"))
        if trial.number == 0:
            trial.set_user_attr("long", True)
        elif not retried:
            time.sleep(step_s)  # the other worker's short trials: each start checks for stale trials
            return 1.0
        (tmp / f"optuna-start-{trial.number}").write_text(f"{os.getpid()} {time.time()}")
        with (tmp / "optuna-trace").open("a", buffering=1) as trace:
            for step in range(1, 10**9 if not retried else 3):
                time.sleep(step_s)
                trial.report(1.0 / step, step)
                trace.write(f"{os.getpid()} {step}\n")
        return 0.0

    return objective


def run_optuna(storage: str, name: str, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    procs, _ = optuna_peer.start(storage, name, [10**6, 10**6], optuna_objective(tmp, args.step_s), heartbeat=1)
    try:
        first = tmp / "optuna-start-0"
        deadline = time.monotonic() + 60
        while not first.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(args.run_s)
        pid = int(first.read_text().split()[0])
        killed_at = time.time()
        os.kill(pid, signal.SIGKILL)
        while time.monotonic() < deadline + 120:
            retries = [p for p in tmp.glob("optuna-start-*") if p != first]
            if retries:
                started = float(retries[0].read_text().split()[1])
                return {"seconds": started - killed_at, "lost_steps": last_step(tmp / "optuna-trace", pid)}
            time.sleep(0.02)
        raise TimeoutError("optuna never retried the killed trial")
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=2, help="cycles of (graceful, kill -9)")
    ap.add_argument("--step-s", type=float, default=0.05)
    ap.add_argument("--ckpt-every", type=int, default=20, help="steps between checkpoints")
    ap.add_argument("--run-s", type=float, default=1.5, help="seconds the trial runs before each stop")
    ap.add_argument("--grace", type=float, default=90.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with harness.services() as svc, tempfile.TemporaryDirectory(prefix="bench-recovery-") as tmp, \
            harness.cluster(svc, "spotsweep", Path(tmp)) as c:
        c.control_plane()
        c.agent("agent0", 1)
        c.agent("agent1", 1)
        ours = run_spotsweep(c, args, Path(tmp))
        storage = harness.sqlalchemy_url(svc.database("optuna"))
        peer = []
        for r in range(args.repeat):
            (Path(tmp) / f"optuna-{r}").mkdir()
            peer.append(run_optuna(storage, f"recovery-{r}", Path(tmp) / f"optuna-{r}", args))
    res: dict[str, Any] = {}
    rows = []
    for label, runs in (("spotsweep: graceful preemption -> running again", ours["graceful"]),
                        ("spotsweep: kill -9 -> redelivered and running", ours["kill9"]),
                        ("optuna: kill -9 -> heartbeat retry running", peer)):
        secs = harness.summary([r["seconds"] for r in runs])
        lost = harness.summary([r["lost_steps"] for r in runs])
        res[label] = {"seconds": secs, "lost_steps": lost, "runs": runs}
        rows.append([label, len(runs), secs["median"], f"{secs['min']:.2f}-{secs['max']:.2f}", lost["median"],
                     f"{lost['min']:.0f}-{lost['max']:.0f}"])
    ratio = res[rows[2][0]]["seconds"]["median"] / res[rows[1][0]]["seconds"]["median"]
    print(harness.table(f"recovery: step {args.step_s}s, checkpoint every {args.ckpt_every} steps, {args.repeat} cycles",
                        ["event", "n", "seconds", "range", "steps lost", "range"], rows))
    print(f"ratio optuna/spotsweep time to running again after kill -9 (medians): {ratio:.1f}x")
    path = harness.write_json("recovery", {"args": vars(args) | {"json": str(args.json)}, "results": res,
                                           "ratio_kill9": ratio}, args.json)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
