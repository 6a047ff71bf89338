"""Confirmed publishes through the RabbitMQ adapter: single messages from one
thread and from 8 threads at once, and ``publish_many`` batches of 100, with
the connection's loop running as in a service. ``--rev`` runs the adapter of
a git revision instead (the "before" of a before/after), in a fresh process.

    python bench/publish.py && python bench/publish.py --rev 4b1ce38
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import harness

BODY = b"x" * 300


def measure(amqp_url: str, singles: int) -> dict[str, float]:
    from spotsweep.shared.broker.port import Outgoing
    from spotsweep.shared.broker.rabbit import RabbitBroker
    from spotsweep.shared.topology import SWEEPS_QUEUE, service_queues

    broker = RabbitBroker(amqp_url)
    broker.declare(service_queues())
    loop = threading.Thread(target=broker.run, daemon=True)
    loop.start()
    out = {}

    def one_by_one(n: int) -> None:
        for _ in range(n):
            broker.publish(Outgoing("", SWEEPS_QUEUE, BODY))

    for label, threads in (("1 thread, single publishes", 1), ("8 threads, single publishes", 8)):
        n = singles // threads
        ts = [threading.Thread(target=one_by_one, args=(n,)) for _ in range(threads)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        out[label] = n * threads / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(singles // 100):
        broker.publish_many([Outgoing("", SWEEPS_QUEUE, BODY)] * 100)
    out["publish_many of 100"] = singles // 100 * 100 / (time.perf_counter() - t0)
    broker.stop(drain=False)
    loop.join(10)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1000)
    ap.add_argument("--rev", help="measure the adapter of this git revision")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.rev and not os.environ.get("_SPOTSWEEP_BENCH_CHILD"):
        # Without site, so the editable install cannot shadow the revision.
        paths = [str(harness.revision_site(args.rev)), str(Path(__file__).parent),
                 *(p for p in sys.path if p.endswith("site-packages"))]
        boot = "import runpy, sys; sys.path[:0] = sys.argv.pop(1).split(':'); sys.argv.pop(0); runpy.run_path(sys.argv[0], run_name='__main__')"
        env = {**os.environ, "_SPOTSWEEP_BENCH_CHILD": "1"}
        raise SystemExit(subprocess.call([sys.executable, "-S", "-c", boot, ":".join(paths), __file__, *sys.argv[1:]], env=env))
    with harness.services() as svc:
        res = measure(svc.amqp_url, args.messages)
    import spotsweep.shared.broker.rabbit as adapter

    print(harness.table(f"confirmed publishes, 300-byte persistent messages ({adapter.__file__})", ["how", "msg/s"],
                        [[k, v] for k, v in res.items()]))
    harness.write_json("publish", {"args": vars(args) | {"json": str(args.json)}, "msg_per_s": res}, args.json)


if __name__ == "__main__":
    main()
