"""pika sends what it has buffered with one call (shared/broker/pika_send.py).

Against the installed pika: if a new pika renames what the wrapper relies on,
these fail rather than the speed-up silently going away. The broker contract
suite runs every RabbitMQ test with it in place.
"""

from __future__ import annotations

import collections
from typing import Any

from pika.adapters.utils.io_services_utils import _AsyncPlaintextTransport, _AsyncTransportBase

from spotsweep.shared.broker import pika_send


class Socket:
    """Takes at most ``room`` bytes per send, as a full socket buffer does."""

    def __init__(self, room: int = 1 << 20) -> None:
        self.room = room
        self.sends: list[bytes] = []

    def send(self, data: Any) -> int:
        n = min(len(data), self.room)
        self.sends.append(bytes(data[:n]))
        return n


def transport(sock: Socket, *frames: bytes) -> Any:
    t: Any = object.__new__(_AsyncPlaintextTransport)
    t._sock = sock
    t._state = _AsyncTransportBase._STATE_ACTIVE
    t._tx_buffers = collections.deque(frames)
    t._tx_buffered_byte_count = sum(len(f) for f in frames)
    return t


def test_buffered_frames_go_out_in_one_send_in_order() -> None:
    assert pika_send.install() and pika_send.install()  # in place, and wrapped once however often installed
    sock = Socket()
    t = transport(sock, b"method", b"header", b"body", b"ack")
    t._produce()
    assert sock.sends == [b"methodheaderbodyack"]
    assert not t._tx_buffers and t._tx_buffered_byte_count == 0


def test_a_partial_send_keeps_the_rest_for_the_next_turn() -> None:
    pika_send.install()
    sock = Socket(room=5)
    t = transport(sock, b"abc", b"defgh", b"ij")
    t._produce()  # pika's loop sends until the buffer is empty: here, 5 bytes a call
    assert b"".join(sock.sends) == b"abcdefghij" and len(sock.sends) == 2
    assert not t._tx_buffers and t._tx_buffered_byte_count == 0
