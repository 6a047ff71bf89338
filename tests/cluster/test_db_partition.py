"""A PostgreSQL connection across a silently cut link fails in seconds, then reconnects.

Without TCP keepalives and a user timeout (shared/db/liveness.py) a query
on a connection whose network vanished waits for the kernel to give up
retransmitting, about 15 minutes: the collector's flusher sat in one while
it was partitioned and could not reconnect after the link came back
(tests/cluster/test_netns.py). Here a client host holds two connections to
the servers' PostgreSQL, one waiting for a long query's answer and one about
to send; the host is cut (packets dropped, no reset) and both must fail with
a retryable error well before the query would have ended, and work again
once the link is back.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from netsite import Site

from spotsweep.shared.db import Database
from spotsweep.shared.errors import RetryableError

pytestmark = [pytest.mark.integration, pytest.mark.needs_rabbit, pytest.mark.needs_pg, pytest.mark.needs_s3]

QUERY_S = 120  # the waiting query's length: failing at all before it ends shows the link's loss was noticed
BOUND_S = 60  # keepalives after 15 s of silence, the 30 s user timeout: ~30-45 s, with room for a busy machine


@pytest.mark.timeout(240)
def test_a_query_across_a_cut_link_fails_in_seconds_and_reconnects(site: Site) -> None:
    client = site.host("client")
    connected = threading.Barrier(3)
    cut = threading.Event()
    back = threading.Event()
    ended: dict[str, float] = {}

    def session(name: str, sql: str, before_cut: bool) -> tuple[str, int]:
        """Connect on the client host; run ``sql`` just before (waiting) or after (sending) the
        cut: how it ended (its time in ``ended``); then one query once the link is back."""
        with site.net.inside(client):  # the thread's sockets, and its reconnection, live there
            db = Database(site.pg.net_url)
            with db.transaction() as conn:
                conn.execute("SELECT 1")
            connected.wait()
            if not before_cut:
                cut.wait()
            try:
                with db.transaction() as conn:
                    conn.execute(sql)
                outcome = "answered"
            except RetryableError as e:
                outcome = f"retryable: {e}"
            ended[name] = time.monotonic()
            back.wait()
            with db.transaction() as conn:
                after = conn.execute("SELECT 41 + 1 AS n").fetchone()
            db.close()
        return outcome, after["n"] if after else 0

    with ThreadPoolExecutor(2) as pool:
        futures = {"waiting": pool.submit(session, "waiting", f"SELECT pg_sleep({QUERY_S})", True),
                   "sending": pool.submit(session, "sending", "SELECT 1", False)}
        connected.wait(timeout=30)
        time.sleep(1.0)  # the waiting query is on the server
        site.net.cut(client)
        cut_at = time.monotonic()
        cut.set()
        try:
            while len(ended) < 2 and time.monotonic() - cut_at < BOUND_S + 5:
                time.sleep(0.5)
        finally:
            site.net.restore(client)
            back.set()
        results = {name: f.result(timeout=QUERY_S) for name, f in futures.items()}

    for name, (outcome, after) in results.items():
        assert outcome.startswith("retryable"), f"{name}: {outcome}"
        took = ended[name] - cut_at
        assert took < BOUND_S, f"{name}: failed {took:.1f} s after the cut (bound {BOUND_S} s)"
        assert after == 42, f"{name}: no answer after the link came back"
    print(", ".join(f"{n} failed {ended[n] - cut_at:.1f} s after the cut" for n in results))
