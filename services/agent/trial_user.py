"""``spotsweep agent --trial-user USER``: trials run as an unprivileged user, not as the agent.

An agent holds the cluster's credentials; a trial is someone else's code.
Run as the same user, a trial could read the agent's ``/proc/<pid>/environ``
(unless the agent is non-dumpable: :func:`~.insecure.non_dumpable`), its credential files,
and every other trial's workspace. So an agent running as root starts each
trial as ``USER`` (``Popen(user=, group=, extra_groups=)``: no group of
root's, only the gates of its own input trees and setup.pip env, :mod:`.tree_gate`) in a workspace that user owns (0700), with ``HOME``, ``USER`` and
``LOGNAME`` its own.

Several users (``--trial-user a,b``) are a pool: each running trial takes a
free one, so trials running at once never share a uid and cannot read each
other's workspace or ``/proc`` entries; with fewer users than slots, trials
share them (a warning at start says so).
"""

from __future__ import annotations

import os
import pwd
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from spotsweep.services.agent.trial_env import names
from spotsweep.shared.errors import PermanentError


@dataclass(frozen=True)
class TrialUser:
    name: str
    uid: int
    gid: int
    home: str
    groups: tuple[int, ...] = ()  # the gates of the trial's own input trees and env (tree_gate.py), set per run

    def popen(self) -> dict[str, Any]:
        """``Popen``'s arguments that start the trial as this user, with none of the agent's groups: its only
        supplementary groups are the gates of its own input trees and setup.pip env."""
        return {"user": self.uid, "group": self.gid, "extra_groups": list(self.groups)}

    def environment(self) -> dict[str, str]:
        """The variables that name the user, as a login would set them."""
        return {"HOME": self.home, "USER": self.name, "LOGNAME": self.name}


def resolve(name: str) -> TrialUser:
    """The user ``name``; a clear error when it does not exist, is root, or the agent cannot switch to it."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise PermanentError(f"--trial-user={name!r}: no such user on this node (create it: useradd --system "
                             f"--no-create-home {name})") from None
    if entry.pw_uid == 0:
        raise PermanentError(f"--trial-user={name!r}: is root; give an unprivileged user")
    if os.geteuid() != 0:
        raise PermanentError(f"--trial-user={name!r}: the agent must run as root to start trials as another user "
                             "(without root, leave --trial-user unset: docs/security.md)")
    return TrialUser(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir or "/")


class UserPool:
    """The trial users; each running trial takes the least busy (a free one first)."""

    def __init__(self, users: list[TrialUser]) -> None:
        self.users = users
        self._busy = {u.name: 0 for u in users}
        self._lock = threading.Lock()

    @classmethod
    def from_setting(cls, setting: str | None) -> UserPool | None:
        wanted = names(setting)
        return cls([resolve(n) for n in dict.fromkeys(wanted)]) if wanted else None

    @contextmanager
    def take(self) -> Iterator[TrialUser]:
        with self._lock:
            user = min(self.users, key=lambda u: self._busy[u.name])
            self._busy[user.name] += 1
        try:
            yield user
        finally:
            with self._lock:
                self._busy[user.name] -= 1


def chown_tree(path: str | os.PathLike[str], user: TrialUser) -> None:
    """Give ``path`` and everything under it to ``user``, never following a link (a restored checkpoint)."""
    os.chown(path, user.uid, user.gid, follow_symlinks=False)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(root, name), user.uid, user.gid, follow_symlinks=False)
