"""Signalling a trial's process group: the one place the agent calls ``killpg``.

Every trial starts in a session of its own, so its pid is its process
group's id and one signal reaches the script and everything it started
(data-loader workers, torchrun ranks). A group that is already gone, or
that is not ours to signal, is not an error: the trial is over either way.

A trial in a container (:mod:`.container`) is a group holding the runtime's
client, which forwards every signal but SIGKILL to the container: its
group registers a hook (:func:`on_kill`) that kills the container itself.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from contextlib import suppress

_ON_KILL: dict[int, Callable[[], None]] = {}


def on_kill(pgid: int, hook: Callable[[], None] | None) -> None:
    """Call ``hook`` before each SIGKILL of group ``pgid`` (None: no longer)."""
    if hook is None:
        _ON_KILL.pop(pgid, None)
    else:
        _ON_KILL[pgid] = hook


def killpg(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to process group ``pgid``; a group gone or not ours is ignored."""
    hook = _ON_KILL.get(pgid) if sig == signal.SIGKILL else None
    if hook is not None:
        hook()
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
