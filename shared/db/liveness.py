"""TCP liveness for PostgreSQL connections: a dead network fails a query in seconds, not minutes.

libpq leaves TCP keepalives at the kernel's defaults (the first probe after
two hours) and sets no user timeout, so a query on a connection whose
network silently vanished (a partition, a switch or route failure: packets
dropped, no reset) waits for the kernel to give up retransmitting, about 15
minutes. A service thread stuck there holds everything behind it: the
collector's flusher could not hand its batch back, so the collector could
not reconnect after a partition until long after the link had returned
(tests/cluster/test_netns.py caught it).

These libpq parameters bound that: keepalive probes after 15 s of silence
(3, 5 s apart) end a connection waiting for an answer, and
``tcp_user_timeout`` ends one whose sent data has gone unacknowledged for
30 s. Neither touches a healthy but slow query: the server's kernel answers
probes and acknowledges data while the query runs. The query then fails
with a connection error, a :class:`~spotsweep.shared.errors.RetryableError`,
and the next transaction connects afresh. A parameter the user's URL sets
wins (``?keepalives_idle=60``); Unix sockets ignore them all.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

LIVENESS: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 15,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,  # milliseconds
}


def with_liveness(url: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` plus each :data:`LIVENESS` parameter that neither ``options`` nor ``url`` sets."""
    try:
        given = conninfo_to_dict(url)
    except psycopg.Error:
        return options  # a URL libpq cannot parse: connecting says so (connect_error), nothing to add
    return {**{k: v for k, v in LIVENESS.items() if k not in given}, **options}
