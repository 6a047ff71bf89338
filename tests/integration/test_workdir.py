"""``workdir:`` on a real cluster: planner, collector and agent as separate processes over
RabbitMQ, PostgreSQL and moto's S3. ``spotsweep submit`` packs and uploads the code once,
the agent unpacks it once and runs every trial in a fresh copy, ``extend`` keeps the
sweep's code version, and a hostile archive in the store is refused by the agent."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from spotsweep.shared.artifacts import S3ArtifactStore
from spotsweep.shared.codepack import code_key
from spotsweep.shared.settings import Settings
from tests.support.cluster import Cluster, wait_for
from waiting import wait_until  # tests/support

pytestmark = pytest.mark.integration

TRAIN = """
import pathlib
from spotsweep import trial
fresh = not pathlib.Path("scratch.txt").exists()  # what an earlier trial wrote must not be here
pathlib.Path("scratch.txt").write_text("written by a trial")
marker = pathlib.Path("marker.txt").read_text().strip()  # only in the workdir
print("marker", marker, flush=True)
trial.report(1, loss=float(trial.params["k"]), version=float(marker), fresh=float(fresh),
             big_absent=float(not pathlib.Path("big.bin").exists()), runs_absent=float(not pathlib.Path("runs").exists()))
"""


def workdir(root: Path) -> Path:
    (root / "runs").mkdir(parents=True)
    (root / "train.py").write_text(TRAIN)
    (root / "marker.txt").write_text("1\n")
    (root / ".gitignore").write_text("*.bin\n")
    (root / "big.bin").write_bytes(b"\0" * (3 * 1024 * 1024))  # gitignored
    (root / ".spotsweepignore").write_text("runs/\n")
    (root / "runs" / "old.txt").write_text("an earlier run's output")  # spotsweepignored
    return root


def write_spec(path: Path, **fields: Any) -> Path:
    body = {"name": path.stem, "command": ["python", "train.py"], "metric": {"name": "loss"},
            "resources": {"gpus": 0, "class": "cpu"}, "trial_name": path.stem + "_{index}", **fields}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(body))
    return path


def submitted(cluster: Cluster, spec: Path) -> tuple[str, str]:
    proc = cluster.cli("submit", str(spec))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1], proc.stderr


def ended(db: str, sweep_id: str, count: int) -> list[dict[str, Any]]:
    sql = ("SELECT count(*) FILTER (WHERE state IN ('completed', 'failed')) FROM trial_results WHERE sweep_id = %s")
    assert wait_for(db, sql, (sweep_id,), lambda n: n >= count) == count
    with psycopg.connect(db) as conn:
        rows = conn.execute("SELECT trial_name, state, metrics, error FROM trial_results WHERE sweep_id = %s "
                            "ORDER BY trial_name", (sweep_id,)).fetchall()
    return [dict(zip(("name", "state", "metrics", "error"), r)) for r in rows]


def hostile_archive(store: S3ArtifactStore) -> str:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, kind, link in (("train.py", tarfile.REGTYPE, ""), ("../evil", tarfile.REGTYPE, ""),
                                 ("passwd", tarfile.SYMTYPE, "/etc/passwd")):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, link
            tar.addfile(info, io.BytesIO(b"") if kind == tarfile.REGTYPE else None)
    sha = hashlib.sha256(out.getvalue()).hexdigest()
    store.put_bytes(code_key(sha), out.getvalue())
    return sha


def _consumers(url: str, queue: str) -> int:
    import pika
    import pika.exceptions

    try:
        with pika.BlockingConnection(pika.URLParameters(url)) as conn:
            return int(conn.channel().queue_declare(queue, passive=True).method.consumer_count)
    except pika.exceptions.ChannelClosedByBroker:
        return 0  # not declared yet


def test_code_is_packed_once_unpacked_once_and_every_trial_runs_in_its_own_copy(cluster: Cluster, tmp_path: Path) -> None:
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    cluster.start("agent", "agent", "--slots", "2", "--class", "cpu", "--workdir", str(tmp_path / "work"))
    db = cluster.env["SPOTSWEEP_DATABASE_URL"]
    store = S3ArtifactStore.from_settings(Settings(**{k.removeprefix("SPOTSWEEP_").lower(): v
                                                      for k, v in cluster.env.items() if k.startswith("SPOTSWEEP_S3_")}))
    code = workdir(tmp_path / "code")
    spec = write_spec(tmp_path / "specs" / "wd.yaml", workdir="../code", space={"k": {"type": "uniform", "low": 0, "high": 2}},
                      strategy={"type": "random", "trials": 3, "seed": 0})

    assert wait_until(lambda: _consumers(cluster.env["SPOTSWEEP_AMQP_URL"], "spotsweep.trials.cpu") >= 1, 60), \
        cluster.logs()  # else submit rightly warns that no agent serves the class yet
    sweep_id, said = submitted(cluster, spec)
    keys = store.list("code/")
    assert len(keys) == 1 and keys[0] in said and said.rstrip().endswith(": uploaded"), said
    sha = keys[0].removeprefix("code/").removesuffix(".tar.gz")
    with tarfile.open(fileobj=io.BytesIO(store.get_bytes(keys[0])), mode="r:gz") as tar:
        assert sorted(tar.getnames()) == [".gitignore", ".spotsweepignore", "marker.txt", "train.py"]

    rows = ended(db, sweep_id, 3)
    assert [r["state"] for r in rows] == ["completed"] * 3, rows
    for r in rows:
        assert {k: r["metrics"][k] for k in ("version", "fresh", "big_absent", "runs_absent")} == {
            "version": 1.0, "fresh": 1.0, "big_absent": 1.0, "runs_absent": 1.0}, r
    with psycopg.connect(db) as conn:
        stored = conn.execute("SELECT spec FROM sweeps WHERE sweep_id = %s", (sweep_id,)).fetchone()[0]
    assert stored["workdir_sha256"] == sha

    # The code changes on this machine; an extension still runs the sweep's own version.
    (code / "marker.txt").write_text("2\n")
    assert wait_for(db, "SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,), lambda s: s == "completed") == "completed"
    extend = cluster.cli("extend", sweep_id, "--trials", "1")
    assert extend.returncode == 0, extend.stderr
    rows = ended(db, sweep_id, 4)
    assert [r["metrics"]["version"] for r in rows] == [1.0] * 4, rows

    # The same tree again: the same key, not uploaded again.
    (code / "marker.txt").write_text("1\n")
    before = store.list_info("code/")
    again, said = submitted(cluster, spec)
    assert said.rstrip().endswith(f"{keys[0]} ({before[0].size / 1024:.1f} KiB): already in the store"), said
    assert store.list_info("code/") == before
    assert [r["state"] for r in ended(db, again, 3)] == ["completed"] * 3

    # One download for seven trials of two sweeps on this agent.
    assert (tmp_path / "agent.log").read_text().count("code archive fetched") == 1, cluster.logs()

    # A hand-made archive with '../evil' and an absolute link, named by its true hash in a spec
    # another client posted: the agent refuses it and the trial fails with the reason.
    evil = hostile_archive(store)
    hostile = write_spec(tmp_path / "specs" / "evil.yaml", workdir_sha256=evil, retries={"max_failures": 0})
    evil_id, said = submitted(cluster, hostile)
    assert "workdir:" not in said  # given a hash, submit packs nothing
    (row,) = ended(db, evil_id, 1)
    assert row["state"] == "failed" and f"code archive code/{evil}.tar.gz is refused: '../evil'" in row["error"], row
    assert not list(tmp_path.rglob("evil")) and not list((tmp_path / "work").rglob("passwd"))


def test_a_workdir_over_the_limit_is_refused_naming_its_size_the_limit_and_the_biggest_files(
        cluster: Cluster, tmp_path: Path) -> None:
    code = workdir(tmp_path / "code")
    (code / ".gitignore").unlink()  # big.bin is packed now
    spec = write_spec(tmp_path / "specs" / "big.yaml", workdir="../code")
    cluster.env["SPOTSWEEP_WORKDIR_LIMIT_MIB"] = "1"
    proc = cluster.cli("submit", str(spec))
    assert proc.returncode == 2, proc.stderr
    assert "its files come to 3.0 MiB, over the limit of 1.0 MiB (SPOTSWEEP_WORKDIR_LIMIT_MIB)" in proc.stderr
    assert "the biggest: big.bin (3.0 MiB)" in proc.stderr and "Traceback" not in proc.stderr
    assert "uploaded" not in proc.stderr
