"""One ``send()`` per I/O loop turn instead of one per AMQP frame.

pika buffers every frame it writes (a publish is three: method, header, body;
an ack one) and, once the socket is writable, sends the buffer one frame per
``send()`` call. Each call is a syscall and, on loopback or a fast network,
a TCP segment of its own that wakes RabbitMQ to read it: a service that
publishes and acks at hundreds of trials a second spent more time in those
calls than in any of its own code (py-spy, ``bench/dispatch.py --profile``).

:func:`install` joins what is buffered into one chunk before pika sends it;
pika's own loop then sends that chunk (and keeps what a partial send leaves).
The bytes on the wire are the same, in the same order. pika offers no hook
for this, so it wraps a private method; :func:`install` checks that the
method is there and leaves pika alone otherwise (tests/shared/broker check
it against the installed pika).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from pika.adapters.utils import io_services_utils

_MARK = "_spotsweep_joined"


def _joining(produce: Any) -> Any:
    def _produce(self: Any) -> None:
        buffers: deque[bytes] = self._tx_buffers
        if len(buffers) > 1:
            joined = b"".join(buffers)
            buffers.clear()
            buffers.append(joined)
        produce(self)

    setattr(_produce, _MARK, True)
    return _produce


def install() -> bool:
    """Make pika send its buffered frames with one call; True if it is in place."""
    base = getattr(io_services_utils, "_AsyncTransportBase", None)
    produce = getattr(base, "_produce", None)
    if base is None or produce is None:
        return False  # another pika: leave it as it is
    if not getattr(produce, _MARK, False):
        base._produce = _joining(produce)
    return True
