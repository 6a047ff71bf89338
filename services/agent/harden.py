"""The agent's own process, made hard for a trial to read: non-dumpable, credentials out of its environment.

A trial running as the agent's user may read ``/proc/<agent>/environ`` and
``/proc/<agent>/mem`` or attach a debugger, unless the agent is
*non-dumpable* (``prctl(PR_SET_DUMPABLE, 0)``): the kernel then makes its
``/proc`` entries root's and refuses ``ptrace`` from other processes of the
same user. Trials are unaffected: ``execve`` makes every new program
dumpable again.

The credential variables are removed from ``os.environ`` once the settings
are read, so nothing the agent starts inherits them. That cannot erase them
from the environment block the kernel shows in ``/proc/<agent>/environ``
(the block the process started with): hence non-dumpable, and the ``*_FILE``
settings (``SPOTSWEEP_AMQP_URL_FILE``...), with which the secret is never in
any environment at all. docs/security.md says which to use when.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

PR_SET_DUMPABLE = 4
CREDENTIALS = ("SPOTSWEEP_AMQP_URL", "SPOTSWEEP_DATABASE_URL", "SPOTSWEEP_S3_ACCESS_KEY", "SPOTSWEEP_S3_SECRET_KEY")


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
