"""The insecure setups an agent can start in, decided once at start: refused, or said out loud.

*Trials as root.* An agent running as root without ``--trial-user`` starts
every trial as root, and a trial as root reads every process's
``/proc/<pid>/environ`` (the broker, database and S3 secrets of whatever runs
on the node), every file, and links any of them into its checkpoint: what
:mod:`.harden` and :mod:`.trial_env` keep from a trial, root reads anyway.
So it refuses to start (exit 78, one line naming both flags) unless
``--allow-root-trials`` says the node runs only its owner's code, and then
warns at every start. A non-root agent, or one with ``--trial-user``, is
not this setup.

*A shared broker user.* An agent runs the trials and control messages that
its planner's broker user sent (``SPOTSWEEP_PLANNER_USER``; unset, its own).
When that user is the agent's own, as with one user for every service, the
credentials every agent node holds are enough to make every such agent run
any command. The agent sees only its own URL and the user it trusts, so the
rule is exactly that: it warns once when the two are the same. It cannot
tell whether the planner's user is also given to people or to other
services (docs/security.md, "Insecure setups").

Local mode (``spotsweep run``) is not an agent in this sense: it runs its
user's own sweep in that user's process, over an in-process broker nobody
else can reach, and is not checked.
"""

from __future__ import annotations

from collections.abc import Collection
from enum import Enum

from spotsweep.services.agent.trial_env import names


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
