"""``--exit-when-idle SECONDS``: an agent with nothing to do exits 0, so scale-to-zero never kills a busy one.

A cluster that scales agents on queue depth (KEDA's RabbitMQ scaler, a
ScaledJob) must not remove an agent while it runs a trial. With this mode
the agent removes itself instead: after SECONDS with no trial handler
running and no trial received, it stops the way a drain does, minus the
preemption (its trials consumer is cancelled first, so nothing new arrives;
the connection closes; exit 0). A trial that was delivered in the moment
before the cancel runs to its end first: an idle exit never stops a trial.

:class:`Idle` is the clock, fed at the trials consumer's edge
(:meth:`Idle.track` wraps the handler); :func:`watcher` is ``serve``'s
``watch`` hook that starts the exit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from spotsweep.shared import log
from spotsweep.shared.broker.port import Delivery, Handler

_log = log.get("spotsweep.agent")


class Idle:
    """How long no trial handler has run (0 while one runs)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._running = 0
        self._since = clock()
        self._lock = threading.Lock()

    def track(self, handler: Handler) -> Handler:
        """``handler``, counted: a delivery received and being handled is activity."""

        def tracked(delivery: Delivery) -> None:
            with self._lock:
                self._running += 1
            try:
                handler(delivery)
            finally:
                with self._lock:
                    self._running -= 1
                    self._since = self._clock()

        return tracked

    def idle_for(self) -> float:
        with self._lock:
            return 0.0 if self._running else self._clock() - self._since


def watcher(idle: Idle, seconds: float | None, quiet: threading.Event,
            every: float = 1.0) -> Callable[[Callable[[], None]], None] | None:
    """``serve``'s ``watch`` hook for ``--exit-when-idle`` (None when unset): once ``idle`` has been
    idle ``seconds``, set ``quiet`` (the agent's drain then skips the preemption) and drain."""
    if seconds is None:
        return None

    def begin(drain: Callable[[], None]) -> None:
        def loop() -> None:
            while (left := seconds - idle.idle_for()) > 0:
                time.sleep(min(every, left))
            _log.info(f"no trial for {seconds:g} s (--exit-when-idle): stopping, exit 0")
            quiet.set()
            drain()

        threading.Thread(target=loop, name="exit-when-idle", daemon=True).start()

    return begin


def both(*hooks: Callable[[Callable[[], None]], None] | None) -> Callable[[Callable[[], None]], None] | None:
    """One ``watch`` hook calling each of ``hooks`` that is set (None when none is)."""
    chosen = [h for h in hooks if h is not None]
    if not chosen:
        return None

    def begin(drain: Callable[[], None]) -> None:
        for hook in chosen:
            hook(drain)

    return begin
