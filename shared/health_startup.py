"""A service's start: its dependencies answer within ``--startup-timeout``, or it exits 69 saying which.

A dependency that refuses us for good (a login refused, a vhost or database
that does not exist) is an error at once; one that does not answer (not
started yet in compose or Kubernetes, a wrong host) is retried until the
startup timeout. Either error is one line naming the setting to fix and its
URL, password redacted. Once started, losing a dependency is no reason to
exit: the services reconnect (:func:`spotsweep.shared.runtime.serve`) and
``/readyz`` says 503 until they are back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

import pika.exceptions as pe

from spotsweep.shared import log
from spotsweep.shared.broker import Broker, connect
from spotsweep.shared.broker.rabbit import broker_reason
from spotsweep.shared.errors import RetryableError
from spotsweep.shared.health import Check
from spotsweep.shared.redact import redact
from spotsweep.shared.settings import Settings
from spotsweep.shared.tls import amqp_tls

if TYPE_CHECKING:  # imported where used: an agent never loads psycopg
    from spotsweep.shared.db import Database

_log = log.get("spotsweep.startup")
T = TypeVar("T")
RETRY_PAUSE_S = 2.0
# What a server says when it will refuse us again however long we wait.
_PG_REFUSALS = ("password authentication failed", "does not exist", "no pg_hba.conf entry", "permission denied",
                "authentication failed")


class CurrentBroker:
    """The service's connection of the moment (``serve`` makes a new one after each loss), for :func:`broker_check`."""

    broker: Broker | None = None


def broker_check(current: CurrentBroker, queue: str) -> Check:
    """Ready while the current connection answers a passive declare of ``queue`` (the service's own)."""

    def check() -> None:
        broker = current.broker
        if broker is None:
            raise RetryableError("connecting to RabbitMQ")
        broker.consumers(queue)  # RetryableError once the connection is gone

    return check


def database_check(url: str, options: Mapping[str, str] | None = None, query: Callable[[Database], None] | None = None,
                   timeout: int = 5) -> Check:
    """Ready while a new connection to PostgreSQL answers (``query``, default ``SELECT 1``);
    a new one each time, so a connection stuck in a partition never hides the loss."""
    from spotsweep.shared.db import Database  # deferred: psycopg, which the agent (no database) never loads

    def check() -> None:
        db = Database(url, connect_timeout=timeout, options=options)
        try:
            if query is not None:
                query(db)
            else:
                with db.transaction() as conn:
                    conn.execute("SELECT 1")
        finally:
            db.close()

    return check


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def _until(deadline: float, attempt: Callable[[], T], refused_for_good: Callable[[RetryableError], str | None],
           setting: str, what: str, timeout: float) -> T:
    """``attempt`` until it succeeds, a refusal for good, or ``deadline``: then one-line :class:`RetryableError`."""
    while True:
        try:
            return attempt()
        except RetryableError as e:
            refusal = refused_for_good(e)
            if refusal is not None:
                raise RetryableError(f"{setting}: {what} {refusal}") from None
            left = deadline - time.monotonic()
            if left <= 0:
                raise RetryableError(f"{setting}: {what} did not answer within {timeout:g} s (--startup-timeout): "
                                     f"{_first_line(e)}") from None
            _log.warning(f"waiting for {what}", error=_first_line(e), left_s=round(left))
            time.sleep(min(RETRY_PAUSE_S, left))


def _broker_refusal(error: RetryableError) -> str | None:
    cause = error.__cause__
    if isinstance(cause, (pe.ProbableAuthenticationError, pe.AuthenticationError)):
        return "refused the login (wrong user or password)"
    if isinstance(cause, pe.ProbableAccessDeniedError):
        return f"refused access to the virtual host ({broker_reason(cause)}: it does not exist, or the user may not use it)"
    return None


def first_broker(settings: Settings, timeout: float) -> Broker:
    """The service's first connection to RabbitMQ (see the module's docstring)."""
    url = settings.amqp_url.get_secret_value()
    tls = amqp_tls(settings)
    # Unset, it is the default (a broker on this machine): say so, that is what to fix in a container.
    setting = "SPOTSWEEP_AMQP_URL" + ("" if "amqp_url" in settings.model_fields_set else " (not set: the default)")
    return _until(time.monotonic() + timeout,
                  lambda: connect(url, heartbeat=settings.heartbeat, tls=tls, connection_attempts=1),
                  _broker_refusal, setting, f"RabbitMQ at {redact(url)}", timeout)


def _database_refusal(error: RetryableError) -> str | None:
    text = str(error)
    if any(words in text for words in _PG_REFUSALS):
        return f"refused the connection: {_first_line(error).rsplit('failed: ', 1)[-1]}"
    return None


def wait_for_database(db: Database, timeout: float) -> None:
    """PostgreSQL answers ``db``'s connection (see the module's docstring)."""

    def ping() -> None:
        with db.transaction() as conn:
            conn.execute("SELECT 1")

    _until(time.monotonic() + timeout, ping, _database_refusal, "SPOTSWEEP_DATABASE_URL",
           f"PostgreSQL at {redact(db.url)}", timeout)


def reusing(first: Broker, factory: Callable[[], Broker]) -> Callable[[], Broker]:
    """``serve``'s ``connect_fn``: the connection made at start first, then new ones from ``factory``."""
    left = [first]

    def connect_fn() -> Broker:
        return left.pop() if left else factory()

    return connect_fn
