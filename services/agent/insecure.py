"""The insecure setups an agent can start in, decided once at start: refused, or said out loud.

*Trials as root.* An agent running as root without ``--trial-user`` starts
every trial as root, and a trial as root reads every process's
``/proc/<pid>/environ`` (the broker, database and S3 secrets of whatever runs
on the node), every file, and links any of them into its checkpoint: what
:func:`non_dumpable` and :mod:`.trial_env` keep from a trial, root reads anyway.
So it refuses to start (exit 78, one line naming both flags) unless
``--allow-root-trials`` says the node runs only its owner's code, and then
warns at every start. A non-root agent, or one with ``--trial-user``, is
not this setup.

*A shared broker user.* An agent runs the trials and control messages that
its planner's broker user sent (``SPOTSWEEP_PLANNER_USER``; unset, its own).
When that user is the agent's own, the credentials every agent node holds
are enough to make every such agent run any command: it warns once. It sees
only its own URL and the user it trusts, so it cannot tell whether the
planner's user is also given to people or other services (docs/security.md).

*The agent's own process* is made hard for a trial to read: a trial running as the agent's user could read
``/proc/<agent>/environ`` and ``/proc/<agent>/mem`` or attach a debugger, unless the agent is non-dumpable
(the kernel then makes its ``/proc`` entries root's and refuses ``ptrace`` from the same user; ``execve``
makes every trial dumpable again). Credentials removed from ``os.environ`` still show in the block
``/proc/<agent>/environ`` holds: hence non-dumpable, and the ``*_FILE`` settings (docs/security.md).
The store checks refuse or warn about a store that would lose work (:func:`check_store_settings`).

Local mode (``spotsweep run``) is not an agent in this sense: it runs its
user's own sweep in that user's process, over an in-process broker nobody
else can reach, and is not checked.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Collection
from enum import Enum
from urllib.parse import unquote, urlsplit

from spotsweep.services.agent.trial_env import names
from spotsweep.shared import log
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.errors import PermanentError, RetryableError, SpotsweepError, UnsafeSetup
from spotsweep.shared.settings import AgentSettings

_log = log.get("spotsweep.agent")
PR_SET_DUMPABLE = 4
CREDENTIALS = ("SPOTSWEEP_AMQP_URL", "SPOTSWEEP_DATABASE_URL", "SPOTSWEEP_S3_ACCESS_KEY", "SPOTSWEEP_S3_SECRET_KEY")


class Verdict(Enum):
    OK = "ok"
    WARN = "warn"  # allowed by a flag: say so at every start
    REFUSE = "refuse"  # stop before connecting to anything (UnsafeSetup: exit 78)


ROOT_REFUSED = (
    "the agent runs as root and would run every trial as root, which can read every secret and file on this node: "
    "give --trial-user USER (SPOTSWEEP_TRIAL_USER) to run trials as an unprivileged user, or --allow-root-trials "
    "(SPOTSWEEP_ALLOW_ROOT_TRIALS=1) on a node that runs only your own code (docs/security.md)"
)
ROOT_ALLOWED = (
    "insecure setup: --allow-root-trials: this agent runs as root without --trial-user, so every trial runs as root "
    "and can read the broker, database and S3 secrets of every process on this node, and any file; give --trial-user "
    "USER instead (docs/security.md)"
)


def root_trials(euid: int, trial_user: str | None, allow: bool) -> Verdict:
    """Whether an agent of effective uid ``euid`` with ``--trial-user`` ``trial_user`` and
    ``--allow-root-trials`` ``allow`` would run trials as root, and what to do about it."""
    if euid != 0 or names(trial_user):
        return Verdict.OK
    return Verdict.WARN if allow else Verdict.REFUSE


def shares_planner_user(own_user: str, planner_users: Collection[str]) -> bool:
    """Whether the agent's own broker user is one whose trials and control messages it runs:
    then whoever holds the agent's credentials can make it run anything."""
    return own_user in planner_users


def shared_user_warning(own_user: str, planner_user_set: bool) -> str:
    """The loud line of :func:`shares_planner_user`, naming the user and why it is trusted."""
    why = "is set to it" if planner_user_set else "is unset, so the agent trusts its own user"
    return (f"insecure setup: this agent's broker user {own_user!r} is also the one whose trials and control messages "
            f"it runs (SPOTSWEEP_PLANNER_USER {why}): anyone with these credentials, which every agent node holds, can "
            "run any command on every agent that trusts them; give agents a broker user of their own and set "
            "SPOTSWEEP_PLANNER_USER to the planner's (deploy/rabbitmq/definitions.json, docs/security.md)")


def non_dumpable() -> bool:
    """Mark this process non-dumpable (Linux); False where that is not possible."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return int(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def forget_credentials(environ: dict[str, str] | None = None) -> list[str]:
    """Remove the credential variables (and their ``*_FILE`` names) from the
    environment, once the settings hold them; returns the names removed."""
    env = os.environ if environ is None else environ
    gone = [name for name in env if name in CREDENTIALS or name.removesuffix("_FILE") in CREDENTIALS]
    for name in gone:
        del env[name]
    return gone


def planner_users(settings: AgentSettings) -> frozenset[str]:
    """Whose trials and control messages this agent runs: ``SPOTSWEEP_PLANNER_USER``, else the
    agent's own broker user (the URL's; RabbitMQ's default ``guest`` when it names none), so that
    one user for everything keeps working and separate users refuse by default (docs/security.md)."""
    return frozenset({settings.planner_user or broker_user(settings)})


def broker_user(settings: AgentSettings) -> str:
    """The agent's own broker user: its URL's, RabbitMQ's default ``guest`` when it names none."""
    try:
        user = urlsplit(settings.amqp_url.get_secret_value()).username
    except ValueError:  # the connection refuses it too, with the redacted URL; never print it here
        raise PermanentError("SPOTSWEEP_AMQP_URL is not a URL") from None
    return unquote(user or "") or "guest"


def check_setup(settings: AgentSettings, euid: int) -> None:
    """Refuse to run trials as root unless ``--allow-root-trials`` (then warn), and say once
    when the agent trusts its own broker user: before anything is connected."""
    verdict = root_trials(euid, settings.trial_user, settings.allow_root_trials)
    if verdict is Verdict.REFUSE:
        raise UnsafeSetup(ROOT_REFUSED)
    if verdict is Verdict.WARN:
        _log.warning(ROOT_ALLOWED)
    own = broker_user(settings)
    if shares_planner_user(own, planner_users(settings)):
        _log.warning(shared_user_warning(own, bool(settings.planner_user)))


def check_writable(store: ArtifactStore, agent_id: str) -> None:
    """Write and delete a small object, so a bucket the agent may read but not write (whose checkpoints
    would all fail to upload) stops the agent at start: one line naming the settings, exit 69."""
    key = f"sweeps/_spotsweep-write-probe/{agent_id}"  # under sweeps/: the agents' key may write only there
    try:
        store.put_bytes(key, b"")
        store.delete(key)
    except SpotsweepError as e:
        raise RetryableError(f"SPOTSWEEP_S3_BUCKET/SPOTSWEEP_S3_ACCESS_KEY: the agent cannot write to its artifact "
                             f"store {store!r}: {str(e).strip().splitlines()[0] if str(e).strip() else e!r}") from None


def check_store_settings(settings: AgentSettings) -> None:
    """Without S3 an agent keeps checkpoints on its own disk, so a preempted trial cannot
    resume on another node: say so loudly, or refuse with ``--require-s3``."""
    if settings.s3_endpoint:
        return
    where = settings.home / "artifacts"
    if settings.require_s3:
        raise PermanentError(f"--require-s3: SPOTSWEEP_S3_ENDPOINT is not set (checkpoints would stay in {where} on "
                             "this node, and a preempted trial could not resume elsewhere)")
    _log.warning(f"SPOTSWEEP_S3_ENDPOINT is not set: checkpoints and logs stay in {where} on this node, so a trial "
                 "preempted here restarts from step 0 on any other node; set SPOTSWEEP_S3_* (and --require-s3 to refuse "
                 "to start without it)")
