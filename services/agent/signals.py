"""Signalling a trial's process group: the one place the agent calls ``killpg``.

Every trial starts in a session of its own, so its pid is its process
group's id and one signal reaches the script and everything it started
(data-loader workers, torchrun ranks). A group that is already gone, or
that is not ours to signal, is not an error: the trial is over either way.
"""

from __future__ import annotations

import os
import signal


def killpg(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to process group ``pgid``; a group gone or not ours is ignored."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
