"""An agent without root (no ``--trial-user``) keeps its secrets from its trials (issue 19 section 1).

The agent runs as an unprivileged user, and so do its trials: the same user.
Its broker URL (a RabbitMQ user of its own, ``agent_amqp`` in conftest.py)
and its S3 secret key come from ``SPOTSWEEP_AMQP_URL_FILE`` and
``SPOTSWEEP_S3_SECRET_KEY_FILE``. A trial (a shell script) then tries the
agent's ``/proc/<pid>/environ`` and is refused, because the agent made
itself non-dumpable (its ``/proc`` entries are root's); the trial's
environment holds neither secret; and the agent's environment, read by the
test as root, holds neither either: given through ``*_FILE``, a secret is in
no environment at all. What this mode does not do (a trial of the agent's
user may read the secret files themselves) is docs/security.md's "Which to use".

The test machine runs as root (as CI does): the agent is started as the
unprivileged user ``spotsweep-agent-nr``, created with ``useradd`` for the
test and removed after it. Where the venv's interpreter lies under a folder
that user may not enter (``/root``), the agent runs the system's Python of the
same version with the venv's packages (a ``sitecustomize`` on
``PYTHONPATH``); where neither works the test is skipped, saying why. Without
root the agent simply runs as the test's own user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cluster import Cluster, wait_for

pytestmark = [pytest.mark.timeout(240)]

USER = "spotsweep-agent-nr"
PROBE = r"""
echo "== env"; env
echo "== agent"
id -un
if cat "/proc/$AGENT_PID/environ" >/dev/null 2>&1; then echo "AGENT-ENVIRON-READABLE"; else echo "AGENT-ENVIRON-REFUSED"; fi
printf '{"step": 1, "score": 1}\n' >> "$SPOTSWEEP_METRICS"
"""


@pytest.fixture()
def agent_user() -> Iterator[pwd.struct_passwd]:
    """The unprivileged user the agent runs as: made for the test (and removed) when running as root."""
    if os.geteuid() != 0:
        yield pwd.getpwuid(os.geteuid())
        return
    made = subprocess.run(["id", USER], capture_output=True).returncode != 0
    if made:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
    try:
        yield pwd.getpwnam(USER)
    finally:
        if made:
            subprocess.run(["userdel", USER], capture_output=True)


@pytest.fixture()
def home(agent_user: pwd.struct_passwd) -> Iterator[Path]:
    """A folder of the agent's user (its workdir, home and secret files), where it can reach it."""
    path = Path(tempfile.mkdtemp(prefix="spotsweep-nonroot-", dir="/tmp"))
    os.chown(path, agent_user.pw_uid, agent_user.pw_gid)
    path.chmod(0o700)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _interpreter(user: pwd.struct_passwd, home: Path) -> tuple[list[str], dict[str, str]]:
    """How ``user`` runs spotsweep: this interpreter, else the system's Python of this version
    with the venv's packages; skips when neither imports spotsweep as that user."""
    site_packages = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_relative_to(sys.prefix))
    custom = home / "python"
    custom.mkdir()
    (custom / "sitecustomize.py").write_text(
        "import site, sys\n"
        "sys.path[:] = [p for p in sys.path if not p.endswith('dist-packages')]  # the venv's packages, not Debian's\n"
        f"site.addsitedir({site_packages!r})\n")
    os.chown(custom, user.pw_uid, user.pw_gid)
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    for python, env in ((sys.executable, {}), (system, {"PYTHONPATH": str(custom)})):
        try:
            probe = subprocess.run([python, "-c", "import spotsweep.services.agent.main"], env={**os.environ, **env},
                                   capture_output=True, cwd=home, **_as(user))
        except OSError:  # the interpreter itself is out of the user's reach
            continue
        if probe.returncode == 0:
            return [python], env
    pytest.skip(f"neither {sys.executable} nor {system} can import spotsweep as user {user.pw_name}")


def _as(user: pwd.struct_passwd) -> dict[str, Any]:
    """Popen's arguments that start a process as ``user`` (none when we are that user already)."""
    if os.geteuid() != 0:
        return {}
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def _secret_file(path: Path, value: str, user: pwd.struct_passwd) -> Path:
    path.write_text(value + "\n")
    os.chown(path, user.pw_uid, user.pw_gid)  # the agent reads it: its user's own, 0600
    path.chmod(0o600)
    return path


def test_a_trial_of_a_non_root_agent_cannot_read_the_agents_environment(
        cluster: Cluster, agent_amqp: tuple[str, str], agent_user: pwd.struct_passwd, home: Path) -> None:
    amqp_url, amqp_password = agent_amqp
    s3_secret = f"s3-{uuid.uuid4().hex}"
    python, python_env = _interpreter(agent_user, home)
    agent_env = {
        **cluster.env, **python_env,
        "SPOTSWEEP_AMQP_URL": "", "SPOTSWEEP_S3_SECRET_KEY": "",  # empty counts as unset: the files are the only source
        "SPOTSWEEP_AMQP_URL_FILE": str(_secret_file(home / "amqp-url", amqp_url, agent_user)),
        "SPOTSWEEP_S3_SECRET_KEY_FILE": str(_secret_file(home / "s3-secret", s3_secret, agent_user)),
        "SPOTSWEEP_DATABASE_URL": "",  # agents have no database
        "SPOTSWEEP_PLANNER_USER": "guest",  # the planner's broker user; the agent has its own
        "SPOTSWEEP_WORKDIR": str(home / "work"), "SPOTSWEEP_HOME": str(home / "spotsweep"), "HOME": str(home),
        "USER": agent_user.pw_name, "LOGNAME": agent_user.pw_name,
    }
    cluster.start("planner", "planner")
    cluster.start("collector", "collector")
    log = (cluster.tmp / "agent.log").open("ab")
    agent = subprocess.Popen([*python, "-m", "spotsweep", "agent", "--class", "cpu"], env=agent_env, cwd=home,
                             stdout=log, stderr=log, start_new_session=True, **_as(agent_user))
    log.close()  # the agent holds it
    cluster.procs["agent"] = agent
    try:
        _check(cluster, agent, agent_user, amqp_password, s3_secret)
    finally:
        cluster.kill9("agent")  # before the user goes (userdel refuses a user with processes)


def _check(cluster: Cluster, agent: subprocess.Popen[bytes], agent_user: pwd.struct_passwd, amqp_password: str,
           s3_secret: str) -> None:
    sweep = cluster.submit({
        "name": "nonroot", "command": ["/bin/sh", "-c", PROBE.replace("{", "{{").replace("}", "}}")],
        "metric": {"name": "score", "mode": "min"}, "space": {"x": [1]},
        "resources": {"gpus": 0, "class": "cpu"}, "env": {"AGENT_PID": str(agent.pid)},
    })
    database = cluster.env["SPOTSWEEP_DATABASE_URL"]
    done = wait_for(database, "SELECT count(*) FROM trials WHERE sweep_id = %s AND state = 'completed'", (sweep,),
                    until=lambda n: n == 1, timeout=120)
    assert done == 1, cluster.logs()

    proc_environ = Path(f"/proc/{agent.pid}/environ")
    if os.geteuid() == 0:
        # The agent's environment as the kernel shows it to root: the *_FILE names, never the secrets.
        environ = proc_environ.read_bytes().decode(errors="replace")
        assert "SPOTSWEEP_AMQP_URL_FILE=" in environ
        assert amqp_password not in environ and s3_secret not in environ
        assert proc_environ.stat().st_uid == 0  # non-dumpable: its /proc entries are root's
    else:
        with pytest.raises(PermissionError):  # non-dumpable: not even its own user reads them
            proc_environ.read_bytes()

    with psycopg.connect(database) as conn:
        trial_id = conn.execute("SELECT trial_id FROM trials WHERE sweep_id = %s", (sweep,)).fetchone()[0]
    out = cluster.cli("logs", trial_id, "--sweep", sweep)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert agent_user.pw_name in lines, out.stdout  # the trial ran as the agent's own user...
    assert "AGENT-ENVIRON-REFUSED" in lines and "AGENT-ENVIRON-READABLE" not in lines, out.stdout  # ...and was refused
    assert amqp_password not in out.stdout and s3_secret not in out.stdout
    assert "SPOTSWEEP_AMQP_URL" not in out.stdout and "SPOTSWEEP_S3_SECRET" not in out.stdout
