"""A snooping trial finds no secret (issue 19 section 1), through the real services.

The agent holds secrets: its broker password (a RabbitMQ user of its own,
made for the test), its S3 secret key, a database URL with a password, a
``*_TOKEN`` variable, and (with ``--trial-user``) its broker URL and S3 key in
``SPOTSWEEP_AMQP_URL_FILE`` and ``SPOTSWEEP_S3_SECRET_KEY_FILE`` files only
root may read. The trial (a shell script: any program may be a trial) prints
its environment, every ``/proc/*/environ`` and ``cmdline`` it can read and the
agent's secret files, tries the agent's ``/proc/<pid>/environ`` and the other
running trial's workspace, and links the secret files and ``/etc/passwd`` into
its checkpoint directory. Its logs (read back from the bucket) hold no
secret, and the bucket holds no linked file. (``agent_amqp`` is in this
folder's conftest.py.)

Without ``--trial-user`` the trial runs as the agent's user: here that is
root, which may read every process's ``/proc`` entries, so that variant
checks the trial's own environment and the checkpoint only. The
``--trial-user`` variant needs root (CI runs as root) and creates its users
with ``useradd`` when missing; it is skipped, saying so, without root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import Cluster, wait_for

from spotsweep.shared.artifacts import open_store
from spotsweep.shared.settings import Settings

USERS = ("spotsweep-trial1", "spotsweep-trial2")

SNOOP = r"""
echo "== env"; env
echo "== proc"
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat "$f" 2>/dev/null | tr '\0' '\n'; done
cat /proc/$PPID/environ >/dev/null 2>&1 && echo "AGENT-ENVIRON-READABLE"
echo "== files"
for f in $SNOOP_FILES; do cat "$f" 2>/dev/null && echo "AGENT-FILE-READABLE $f"; done
ws=$(dirname "$SPOTSWEEP_CHECKPOINT_DIR"); parent=$(dirname "$ws")
for i in $(seq 1 300); do [ $(ls -d "$parent"/*/ | wc -l) -ge 2 ] && break; sleep 0.1; done
for other in "$parent"/*/; do
  [ "$other" = "$ws/" ] && continue
  ls "$other/run" >/dev/null 2>&1 && echo "SIBLING-READABLE run"
  cat "$other/metrics.jsonl" >/dev/null 2>&1 && echo "SIBLING-READABLE metrics"
  ls "$other/checkpoint" >/dev/null 2>&1 && echo "SIBLING-READABLE checkpoint"
done
echo weights > "$SPOTSWEEP_CHECKPOINT_DIR/model.pt"
ln -s /etc/passwd "$SPOTSWEEP_CHECKPOINT_DIR/passwd-link"
for f in $SNOOP_FILES; do ln -s "$f" "$SPOTSWEEP_CHECKPOINT_DIR/secret-link-$(basename "$f")"; done
printf '{"checkpoint": 1}\n' >> "$SPOTSWEEP_METRICS"
printf '{"step": 1, "score": 1}\n' >> "$SPOTSWEEP_METRICS"
"""


@pytest.fixture()
def workdir() -> Iterator[Path]:
    """The agent's workdir where any user can reach it (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="spotsweep-snoop-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _ensure_users() -> None:
    for user in USERS:
        if subprocess.run(["id", user], capture_output=True).returncode != 0:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user], check=True)


def _secret_file(cluster: Cluster, name: str, value: str) -> Path:
    path = cluster.tmp / name  # in root's 0700 tmp_path, and 0600 itself
    path.write_text(value + "\n")
    path.chmod(0o600)
    return path


def _run_snoop(cluster: Cluster, s3_env: dict[str, str], workdir: Path, amqp: tuple[str, str],
               trial_user: bool) -> tuple[str, list[str], str]:
    amqp_url, amqp_password = amqp
    markers = {k: f"{k.lower()}-{uuid.uuid4().hex}" for k in ("s3", "db", "token")}
    markers["amqp"] = amqp_password
    secret_files = [_secret_file(cluster, "s3-secret", markers["s3"]), _secret_file(cluster, "amqp-url", amqp_url)]
    agent_env = {"SPOTSWEEP_DATABASE_URL": f"postgresql://agent:{markers['db']}@127.0.0.1:5432/none",
                 "CANARY_API_TOKEN": markers["token"], "SPOTSWEEP_WORKDIR": str(workdir),
                 "SPOTSWEEP_PLANNER_USER": "guest"}  # the planner's broker user; the agent has its own
    args = ["agent", "--class", "cpu", "--slots", "2"]
    if trial_user:
        agent_env["SPOTSWEEP_S3_SECRET_KEY_FILE"] = str(secret_files[0])
        agent_env["SPOTSWEEP_S3_SECRET_KEY"] = ""  # empty counts as unset: the file is the agent's only source
        agent_env["SPOTSWEEP_AMQP_URL_FILE"] = str(secret_files[1])
        agent_env["SPOTSWEEP_AMQP_URL"] = ""
        args += ["--trial-user", ",".join(USERS)]
    else:
        agent_env["SPOTSWEEP_S3_SECRET_KEY"] = markers["s3"]
        agent_env["SPOTSWEEP_AMQP_URL"] = amqp_url
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    cluster.start("agent", *args, env=agent_env)
    sweep = cluster.submit({
        "name": "snoop", "command": ["/bin/sh", "-c", SNOOP.replace("{", "{{").replace("}", "}}")],
        "metric": {"name": "score", "mode": "min"}, "space": {"x": [1, 2]}, "max_concurrent": 2,
        "resources": {"gpus": 0, "class": "cpu"},
        "env": {"SNOOP_FILES": " ".join(str(f) for f in secret_files) if trial_user else ""},
    })
    done = wait_for(cluster.env["SPOTSWEEP_DATABASE_URL"], "SELECT count(*) FROM trials WHERE sweep_id = %s AND state = "
                    "'completed'", (sweep,), until=lambda n: n == 2, timeout=120)
    assert done == 2, cluster.logs()
    logs = ""
    with __import__("psycopg").connect(cluster.env["SPOTSWEEP_DATABASE_URL"]) as conn:
        trials = [r[0] for r in conn.execute("SELECT trial_id FROM trials WHERE sweep_id = %s", (sweep,))]
    for trial in trials:
        out = cluster.cli("logs", trial, "--sweep", sweep)
        assert out.returncode == 0, out.stderr
        logs += out.stdout
    settings = Settings(**{k[len("SPOTSWEEP_"):].lower(): v for k, v in s3_env.items()})
    keys = open_store(settings).list(f"sweeps/{sweep}/")
    return logs, keys, "\n".join(markers.values())


def _assert_clean(logs: str, keys: list[str], markers: str) -> None:
    assert "== env" in logs and "SPOTSWEEP_PARAMS" in logs, logs[-2000:]  # the trial did run and print
    for marker in markers.splitlines():
        assert marker not in logs, f"the trial found a secret: {marker}"
    checkpoint_files = [k for k in keys if "/checkpoints/" in k and "/files/" in k]
    assert any(k.endswith("/model.pt") for k in checkpoint_files), keys
    assert not any("link" in k for k in checkpoint_files), checkpoint_files


def test_a_trial_of_the_agents_own_user_gets_no_secret_in_its_environment(cluster: Cluster, s3_env: dict[str, str],
                                                                          workdir: Path, agent_amqp: tuple[str, str]) -> None:
    logs, keys, markers = _run_snoop(cluster, s3_env, workdir, agent_amqp, trial_user=False)
    env_part = "\n".join(part.split("== proc")[0] for part in logs.split("== env")[1:])
    for marker in markers.splitlines():
        assert marker not in env_part, f"the trial's environment holds a secret: {marker}"
    assert "SPOTSWEEP_AMQP_URL" not in env_part and "SPOTSWEEP_S3_" not in env_part and "CANARY_API_TOKEN" not in env_part
    checkpoint_files = [k for k in keys if "/checkpoints/" in k and "/files/" in k]
    assert any(k.endswith("/model.pt") for k in checkpoint_files) and not any("link" in k for k in checkpoint_files), keys


@pytest.mark.skipif(os.geteuid() != 0, reason="--trial-user needs the agent to run as root (CI runs as root)")
def test_a_trial_run_as_another_user_finds_no_secret_anywhere(cluster: Cluster, s3_env: dict[str, str],
                                                              workdir: Path, agent_amqp: tuple[str, str]) -> None:
    _ensure_users()
    logs, keys, markers = _run_snoop(cluster, s3_env, workdir, agent_amqp, trial_user=True)
    _assert_clean(logs, keys, markers)
    found = [line for line in logs.splitlines() if line.startswith(("AGENT-", "SIBLING-"))]  # not the script in cmdline
    assert found == [], found
    assert all(f"USER={u}" in logs for u in USERS), logs[-2000:]  # the two trials ran at once, one user each
