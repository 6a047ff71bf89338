"""Input staging throughput (issue 30): the agent's ``inputs`` path against boto3 on the same prefix.

One S3 prefix is staged cold (an empty cache each time) by spotsweep's real staging
(``services/agent/inputs.staged``: one listing, the checkpoints' parallel download with every
size checked, a second listing, the tree made read-only and renamed into place), and fetched by
boto3 two ways: ``download_file`` one object after the other (the transfer manager's defaults:
8 MiB parts, 10 threads per object) and a parallel sync, ``download_file`` over 10 objects at
once (what ``aws s3 sync`` does with its default ``max_concurrent_requests`` of 10). Against
moto's S3 server on loopback and through bench/s3_proxy.py adding 20 ms of round trip, the
clients interleaved (their order rotates every round). Data sets: a few large incompressible
files, and many 4 KiB files. ``vs boto3 sync`` is the parallel sync's time over the client's
in the same round (above 1: faster than it). The warm figure is a second trial on the node:
the version is listed and found in the cache, nothing is downloaded.

    python bench/inputs.py [--quick] [--json bench/results/inputs.json]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import harness
from checkpoint import make_checkpoint
from s3_proxy import DelayProxy

from spotsweep.services.agent import inputs
from spotsweep.shared.artifacts.s3 import S3ArtifactStore
from spotsweep.shared.inputs import Input
from spotsweep.shared.messages import TrialMessage

MiB = 1 << 20
BUCKET = "datasets"
CLIENTS = ("spotsweep", "boto3 one by one", "boto3 sync")


class Clients:
    def __init__(self, endpoint: str, env: dict[str, str]) -> None:
        key, secret = env["SPOTSWEEP_S3_ACCESS_KEY"], env["SPOTSWEEP_S3_SECRET_KEY"]
        self.store = S3ArtifactStore(endpoint, key, secret, env["SPOTSWEEP_S3_BUCKET"], region="us-east-1")
        self.boto = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key, aws_secret_access_key=secret,
                                 region_name="us-east-1")

    def keys(self, prefix: str) -> list[str]:
        pages = self.boto.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]

    def fetch(self, client: str, prefix: str, dest: Path, trial: str) -> None:
        if client == "spotsweep":
            msg = TrialMessage(sweep_id="bench", trial_id=trial, attempt=1, trial_name="t", index=0, params={},
                               argv=["true"], metric="loss",
                               inputs=[Input.model_validate({"from": f"s3://{BUCKET}/{prefix}", "to": "data"})])
            run = dest / trial
            run.mkdir(parents=True)
            with inputs.staged(msg, self.store, dest / "cache", run, 2**40):
                pass
            return

        def one(key: str) -> None:
            target = dest / key[len(prefix):]
            target.parent.mkdir(parents=True, exist_ok=True)
            self.boto.download_file(BUCKET, key, str(target))

        keys = self.keys(prefix)
        if client == "boto3 sync":
            with ThreadPoolExecutor(10) as pool:
                list(pool.map(one, keys))
        else:
            for key in keys:
                one(key)


def upload(env: dict[str, str], src: Path, prefix: str) -> None:
    clients = Clients(env["SPOTSWEEP_S3_ENDPOINT"], env)
    with ThreadPoolExecutor(10) as pool:
        list(pool.map(lambda p: clients.boto.upload_file(str(p), BUCKET, prefix + str(p.relative_to(src))),
                      [p for p in src.rglob("*") if p.is_file()]))


def measure(env: dict[str, str], links: dict[str, str], sets: dict[str, tuple[str, int]], rounds: int,
            tmp: Path) -> list[dict[str, Any]]:
    runs: dict[tuple[str, str, str], list[float]] = {}
    for r in range(rounds):
        order = CLIENTS[r % 3:] + CLIENTS[:r % 3]
        for link, endpoint in links.items():
            clients = Clients(endpoint, env)
            for name, (prefix, _size) in sets.items():
                for client in order:
                    dest = tmp / f"dest-{uuid.uuid4().hex[:6]}"
                    began = time.perf_counter()
                    clients.fetch(client, prefix, dest, f"bench.{uuid.uuid4().hex[:6]}")
                    runs.setdefault((link, name, client), []).append(time.perf_counter() - began)
                    if client == "spotsweep":  # a second trial on the node: listed, found, not downloaded
                        began = time.perf_counter()
                        clients.fetch(client, prefix, dest, f"bench.{uuid.uuid4().hex[:6]}")
                        runs.setdefault((link, name, "spotsweep, cached"), []).append(time.perf_counter() - began)
                    inputs.evict(dest / "cache", 0)
                    shutil.rmtree(dest, ignore_errors=True)
                    print(f"  round {r + 1} {link:8} {name:14} {client:17} {runs[(link, name, client)][-1]:6.2f} s "
                          f"(load {harness.load_1m()})", flush=True)
    rows = []
    for (link, name, client), times in sorted(runs.items()):
        size, sync = sets[name][1], runs[(link, name, "boto3 sync")]
        mean = statistics.fmean(times)
        rows.append({"link": link, "data": name, "client": client, "seconds": round(mean, 3),
                     "rounds_s": [round(t, 3) for t in times], "MB_s": round(size / mean / 1e6, 1),
                     "vs_boto3_sync": round(statistics.fmean(sync) / mean, 2),
                     "vs_boto3_sync_rounds": [round(b / t, 2) for b, t in zip(sync, times)]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke size: 32 MiB in 4 files and 100 small files, one round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--mib", type=int, default=512, help="the large data set, MiB")
    ap.add_argument("--files", type=int, default=8, help="files of the large data set")
    ap.add_argument("--small", type=int, default=1000, help="4 KiB files of the small-files data set")
    ap.add_argument("--delay-ms", type=float, default=10.0, help="added each way by the proxy")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    mib, files, small, rounds = (32, 4, 100, 1) if args.quick else (args.mib, args.files, args.small, args.rounds)
    with harness.moto_s3() as env, tempfile.TemporaryDirectory(prefix="bench-inputs-") as t:
        tmp = Path(t)
        Clients(env["SPOTSWEEP_S3_ENDPOINT"], env).boto.create_bucket(Bucket=BUCKET)
        sets = {f"{files} x {mib // files} MiB": ("large/", mib * MiB), f"{small} x 4 KiB": ("small/", small * 4096)}
        upload(env, make_checkpoint(tmp / "large", mib * MiB, files), "large/")
        upload(env, make_checkpoint(tmp / "small", small * 4096, small), "small/")
        port = int(env["SPOTSWEEP_S3_ENDPOINT"].rsplit(":", 1)[1])
        with DelayProxy(port, args.delay_ms / 1000) as proxy:
            links = {"loopback": env["SPOTSWEEP_S3_ENDPOINT"], f"+{2 * args.delay_ms:g} ms": proxy.endpoint}
            rows = measure(env, links, sets, rounds, tmp)
    print(harness.table(f"Input staging, cold, mean of {rounds} round(s) (vs boto3 sync = its time / this client's)",
                        ["link", "data", "client", "s", "MB/s", "vs boto3 sync", "per round"],
                        [[r["link"], r["data"], r["client"], r["seconds"], r["MB_s"], r["vs_boto3_sync"],
                          " ".join(f"{v:g}" for v in r["vs_boto3_sync_rounds"])] for r in rows]))
    out = harness.write_json("inputs", {"args": vars(args), "machine": harness.machine(), "rows": rows}, args.json)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
