"""Large checkpoints inside a spot notice (issue 23 section 3).

Upload and restore throughput of spotsweep's checkpoint path (upload_checkpoint_files +
commit, restore_checkpoint, over the S3 adapter) against the raw ``minio`` client
(``fput_object``/``fget_object`` one file after the other, its defaults) and boto3's
transfer manager at its defaults (``upload_file``/``download_file`` per file: 8 MiB
parts, 10 threads), on loopback to moto's S3 server and through bench/s3_proxy.py
adding 20 ms of round trip (10 ms each way, bandwidth not limited), the same proxy
for every client. Clients are interleaved (their order rotates every round); objects
are deleted after each transfer (moto keeps them in memory). Checkpoints: several
incompressible files of 256 MiB and 2 GiB in all, and 5,000 one-byte files.

Then: what hashing costs per GiB; a checkpoint whose large files did not change since
the last commit (copied in the store); and issue 23's spot notice, through the agent's
real runner: a trial that committed a checkpoint of the largest size at step 60 announces
one at step 120 (every file new) and the preemption comes at once, with a 25 s notice
(grace 20 s + 5 s after), on the +20 ms link and on that link throttled (``--slow-mb-s``)
so that the upload cannot finish: whether the upload finished within the grace or was
abandoned, the step the trial resumes at (steps lost: never more than the 60 since the
committed checkpoint) and how long each took.

Table figures are the mean of the rounds, with the best and each round's ratio to boto3
in the JSON.

    python bench/checkpoint.py [--quick] [--json bench/results/checkpoint.json]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import boto3
import harness
from minio import Minio
from s3_proxy import DelayProxy

from spotsweep.services.agent.runner import RunControls, RunnerConfig, run_trial
from spotsweep.shared.artifacts.checkpoints import (
    commit_checkpoint, latest_checkpoint, restore_checkpoint, upload_checkpoint_files,
)
from spotsweep.shared.artifacts.hash_cache import HASHES
from spotsweep.shared.artifacts.s3 import S3ArtifactStore
from spotsweep.shared.artifacts.transfer import CHUNK
from spotsweep.shared.messages import CheckpointSaved, TrialMessage

MiB = 1 << 20
CLIENTS = ("spotsweep", "minio", "boto3")


def make_checkpoint(root: Path, total: int, files: int) -> Path:
    """``files`` files of random bytes, ``total`` bytes in all (or ``files`` one-byte files when total == files)."""
    root.mkdir(parents=True, exist_ok=True)
    each = total // files
    for i in range(files):
        with open(root / f"part-{i:05d}.bin", "wb") as f:
            left = each
            while left:
                n = min(left, 64 * MiB)
                f.write(os.urandom(n))
                left -= n
    return root


class Clients:
    """The three clients, on one endpoint (loopback or the proxy), into one bucket."""

    def __init__(self, endpoint: str, env: dict[str, str]) -> None:
        key, secret, self.bucket = env["SPOTSWEEP_S3_ACCESS_KEY"], env["SPOTSWEEP_S3_SECRET_KEY"], env["SPOTSWEEP_S3_BUCKET"]
        self.store = S3ArtifactStore(endpoint, key, secret, self.bucket, region="us-east-1")
        self.minio = Minio(endpoint.removeprefix("http://"), key, secret, secure=False, region="us-east-1")
        self.boto = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key, aws_secret_access_key=secret,
                                 region_name="us-east-1")

    def upload(self, client: str, src: Path, prefix: str) -> None:
        files = sorted(p for p in src.rglob("*") if p.is_file())
        if client == "spotsweep":
            sweep, trial = prefix.split("/")[:2]
            folder = upload_checkpoint_files(self.store, sweep, trial, 1, src)
            commit_checkpoint(self.store, sweep, trial, folder)
        elif client == "minio":
            for p in files:
                self.minio.fput_object(self.bucket, f"{prefix}/{p.relative_to(src)}", str(p))
        else:
            for p in files:
                self.boto.upload_file(str(p), self.bucket, f"{prefix}/{p.relative_to(src)}")

    def restore(self, client: str, prefix: str, dest: Path) -> None:
        if client == "spotsweep":
            sweep, trial = prefix.split("/")[:2]
            assert restore_checkpoint(self.store, sweep, trial, dest) == 1
            return
        for key in self.store.list(prefix + "/"):
            target = dest / key[len(prefix) + 1:]
            target.parent.mkdir(parents=True, exist_ok=True)
            if client == "minio":
                self.minio.fget_object(self.bucket, key, str(target))
            else:
                self.boto.download_file(self.bucket, key, str(target))

    def clear(self, prefix: str) -> None:
        keys = self.store.list(prefix + "/") + self.store.list(f"sweeps/{prefix.split('/')[0]}/")
        for key in keys:
            self.store.delete(key)


def timed(fn: Callable[[], object]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def throughput(env: dict[str, str], links: dict[str, str], sets: dict[str, tuple[Path, int]], rounds: int,
               tmp: Path) -> list[dict[str, Any]]:
    """Seconds of each client, link and checkpoint, interleaved: the mean of ``rounds``, the best, and
    against boto3 per round (boto3's time in that round over the client's)."""
    runs: dict[tuple[str, str, str, str], list[float]] = {}
    for r in range(rounds):
        order = CLIENTS[r % 3:] + CLIENTS[:r % 3]
        for link, endpoint in links.items():
            clients = Clients(endpoint, env)
            for name, (src, _size) in sets.items():
                for client in order:
                    prefix = f"b{uuid.uuid4().hex[:8]}/{client}"
                    up = timed(partial(clients.upload, client, src, prefix))
                    dest = tmp / f"restore-{uuid.uuid4().hex[:6]}"
                    down = timed(partial(clients.restore, client, prefix, dest))
                    shutil.rmtree(dest, ignore_errors=True)
                    clients.clear(prefix)
                    for op, s in (("upload", up), ("restore", down)):
                        runs.setdefault((link, name, client, op), []).append(s)
                    print(f"  round {r + 1} {link:8} {name:12} {client:9} up {up:6.2f} s  down {down:6.2f} s  "
                          f"(load {harness.load_1m()})", flush=True)
    rows = []
    for (link, name, client, op), times in sorted(runs.items()):
        size, boto = sets[name][1], runs[(link, name, "boto3", op)]
        mean = statistics.fmean(times)
        rows.append({"link": link, "checkpoint": name, "client": client, "op": op, "seconds": round(mean, 3),
                     "best_s": round(min(times), 3), "rounds_s": [round(t, 3) for t in times],
                     "MB_s": round(size / mean / 1e6, 1), "vs_boto3": round(statistics.fmean(boto) / mean, 2),
                     "vs_boto3_rounds": [round(b / t, 2) for b, t in zip(boto, times)]})
    return rows


def hash_cost(path: Path) -> float:
    """Seconds of one core per GiB for the MANIFEST's hash (SHA-256 of each 8 MiB chunk, then of those)."""
    size = path.stat().st_size
    began = time.process_time()
    with open(path, "rb") as f:
        digests = [hashlib.sha256(chunk).digest() for chunk in iter(lambda: f.read(CHUNK), b"")]
    hashlib.sha256(b"".join(digests)).hexdigest()
    return (time.process_time() - began) / (size / (1 << 30))


def unchanged(env: dict[str, str], endpoint: str, src: Path, tmp: Path) -> dict[str, float]:
    """A second checkpoint of the trial with one file of several changed, the rest hard links of the first's
    (as the agent's snapshot links a trial's files): seconds and CPU seconds, with the agent's hash cache
    empty (every unchanged file hashed before its copy) and holding the first checkpoint's hashes."""
    clients = Clients(endpoint, env)
    sweep, trial = f"u{uuid.uuid4().hex[:6]}", "t"
    long_ago = time.time() - 3600  # a base model written long before the trial (hash_cache's racy margin)
    for f in src.iterdir():
        os.utime(f, (long_ago, long_ago))

    def upload(step: int, path: Path) -> tuple[float, float]:
        cpu = time.process_time()
        wall = timed(lambda: commit_checkpoint(clients.store, sweep, trial,
                                               upload_checkpoint_files(clients.store, sweep, trial, step, path)))
        return wall, time.process_time() - cpu

    def changed(name: str) -> Path:
        """A snapshot of ``src``: hard links, but the first file rewritten (an adapter; the rest a frozen base)."""
        into = tmp / name
        into.mkdir()
        for f in sorted(src.iterdir()):
            os.link(f, into / f.name)
        victim = sorted(into.iterdir())[0]
        victim.unlink()
        victim.write_bytes(os.urandom((src / victim.name).stat().st_size))
        return into

    first = upload(1, src)
    HASHES.clear()
    cold = upload(2, changed("second"))
    warm = upload(3, changed("third"))
    shutil.rmtree(tmp / "second")
    shutil.rmtree(tmp / "third")
    clients.clear(sweep)
    return {"first_s": round(first[0], 2), "one_file_changed_s": round(cold[0], 2),
            "one_file_changed_cpu_s": round(cold[1], 2), "hashes_known_s": round(warm[0], 2),
            "hashes_known_cpu_s": round(warm[1], 2)}


PREEMPT_SCRIPT = """
import os, signal, sys, time
from spotsweep import trial

def save(step, src):  # the trial's checkpoint folder becomes the files of src (hard links: no time to write them)
    for name in os.listdir(trial.checkpoint_dir):
        os.unlink(trial.checkpoint_dir / name)
    for name in sorted(os.listdir(src)):
        os.link(os.path.join(src, name), trial.checkpoint_dir / name)
    trial.checkpoint_saved(step)

save(60, os.environ["FIRST"])
while not os.path.exists(os.environ["GO"]):  # until the agent committed it: "a minute earlier"
    time.sleep(0.05)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
save(120, os.environ["SECOND"])  # every file new: a full fine-tune's checkpoint, nothing to copy in the store
open(os.environ["ANNOUNCED"], "w").close()
time.sleep(600)
"""


def preemption(env: dict[str, str], endpoint: str, first: Path, second: Path, tmp: Path, grace: float) -> dict[str, Any]:
    """Issue 23's case through the agent's runner: a trial committed a checkpoint at step 60 (``first``), then
    announces one at step 120 (``second``, every file new) and the preemption notice comes at once. Either the
    upload finishes within ``grace`` (nothing lost) or it is abandoned and the trial resumes at 60 (the steps
    since the committed checkpoint are lost, never more, and never as a failure)."""
    clients = Clients(endpoint, env)
    announced, go = tmp / f"announced-{uuid.uuid4().hex[:6]}", tmp / f"go-{uuid.uuid4().hex[:6]}"
    msg = TrialMessage(sweep_id=f"p{uuid.uuid4().hex[:6]}", trial_id="t", attempt=1, trial_name="t", index=0, params={},
                       argv=["python", "-c", PREEMPT_SCRIPT], metric="loss",
                       env={"FIRST": str(first), "SECOND": str(second), "GO": str(go), "ANNOUNCED": str(announced)})
    control = RunControls(grace=grace)
    saved: dict[int, float] = {}

    def publish(event: Any) -> None:
        if isinstance(event, CheckpointSaved):
            saved[event.step] = time.monotonic()
            go.touch()

    result: list[Any] = []
    began_all = time.monotonic()
    runner = threading.Thread(target=lambda: result.append(run_trial(msg, clients.store, publish,
                                                                     RunnerConfig("bench", tmp / "agent"), control)))
    runner.start()
    while not announced.exists():
        time.sleep(0.01)
    began = time.monotonic()
    control.preempt.set()
    runner.join()
    ended = time.monotonic()
    resume = latest_checkpoint(clients.store, msg.sweep_id, msg.trial_id)
    clients.clear(msg.sweep_id)
    return {"outcome": result[0].outcome, "first_commit_s": round(saved[60] - began_all, 2) if 60 in saved else None,
            "committed_in_grace": 120 in saved, "resumes_at": resume,
            "steps_lost": None if resume is None else 120 - resume, "steps_since_committed": 60,
            "commit_after_notice_s": round(saved[120] - began, 2) if 120 in saved else None,
            "run_over_after_notice_s": round(ended - began, 2), "grace_s": grace}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke size: 16 MiB and 200 tiny files, one round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--files", type=int, default=4, help="files per large checkpoint")
    ap.add_argument("--tiny", type=int, default=5000, help="one-byte files of the small-files checkpoint")
    ap.add_argument("--delay-ms", type=float, default=10.0, help="added each way by the proxy")
    ap.add_argument("--notice", type=float, default=25.0, help="seconds of preemption notice (grace: 5 s less)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 2048], help="large checkpoints, MiB")
    ap.add_argument("--slow-mb-s", type=float, default=None,
                    help="the throttled link's MB/s for the preemption that cannot finish (default: the largest "
                         "checkpoint over 1.5 graces; 0: skip it)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    sizes = {"16 MiB": 16 * MiB} if args.quick else {
        (f"{m // 1024} GiB" if m % 1024 == 0 else f"{m} MiB"): m * MiB for m in args.sizes}
    tiny, rounds = (200, 1) if args.quick else (args.tiny, args.rounds)
    with harness.moto_s3() as env, tempfile.TemporaryDirectory(prefix="bench-ckpt-") as t:
        tmp = Path(t)
        sets = {name: (make_checkpoint(tmp / name.replace(" ", ""), size, args.files), size) for name, size in sizes.items()}
        sets[f"{tiny} x 1 B"] = (make_checkpoint(tmp / "tiny", tiny, tiny), tiny)
        largest, (src, big) = list(sets.items())[len(sizes) - 1]
        second = make_checkpoint(tmp / "second-checkpoint", big, args.files)
        Clients(env["SPOTSWEEP_S3_ENDPOINT"], env)  # creates the bucket
        port = int(env["SPOTSWEEP_S3_ENDPOINT"].rsplit(":", 1)[1])
        with DelayProxy(port, args.delay_ms / 1000) as proxy:
            links = {"loopback": env["SPOTSWEEP_S3_ENDPOINT"], f"+{2 * args.delay_ms:g} ms": proxy.endpoint}
            rows = throughput(env, links, sets, rounds, tmp)
            cost = hash_cost(next(src.iterdir()))
            dedupe = unchanged(env, proxy.endpoint, src, tmp)
            grace = max(1.0, args.notice - 5)
            preempt = {links_name: preemption(env, endpoint, src, second, tmp, grace)
                       for links_name, endpoint in list(links.items())[1:]}
        slow_mb_s = big / (1.5 * grace) / 1e6 if args.slow_mb_s is None else args.slow_mb_s
        if slow_mb_s > 0:
            with DelayProxy(port, args.delay_ms / 1000, rate=slow_mb_s * 1e6) as slow:
                preempt[f"+{2 * args.delay_ms:g} ms, {slow_mb_s:.3g} MB/s"] = preemption(
                    env, slow.endpoint, src, second, tmp, grace)
    print(harness.table(f"Checkpoint transfer, mean of {rounds} round(s) (vs boto3 = boto3's time / this client's)",
                        ["link", "checkpoint", "op", "client", "s", "MB/s", "vs boto3", "per round"],
                        [[r["link"], r["checkpoint"], r["op"], r["client"], r["seconds"], r["MB_s"], r["vs_boto3"],
                          " ".join(f"{v:g}" for v in r["vs_boto3_rounds"])] for r in rows]))
    print(f"hash (sha256 of 8 MiB chunks): {cost:.2f} s of one core per GiB")
    print(f"{largest}, one of {args.files} files changed since the last commit: {dedupe}")
    for link, p in preempt.items():
        print(f"preemption, {args.notice:g} s notice, {largest} at step 120 uploading, {largest} committed at 60 "
              f"({link}): {p}")
    out = harness.write_json("checkpoint", {"args": vars(args), "rows": rows, "hash_s_per_gib": round(cost, 3),
                                            "unchanged": dedupe, "preemption": preempt}, args.json)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
