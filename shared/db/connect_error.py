"""A failed connect to PostgreSQL, as the taxonomy's error with no piece of the password in it.

libpq's own message may quote what it parsed out of the URL: a password
holding an unencoded ``@`` or ``/`` is split into a host and a port, so a
wrong one prints ``failed to resolve host 'pw'``; and psycopg's URL parser,
for a URL it cannot read at all (``[::1`` without its ``]``), raises a
``ProgrammingError`` that quotes the whole URL. Both go through
:func:`~spotsweep.shared.redact.scrub` (the URL form and every piece of the
raw password), and the original exception is not chained (``from None``),
so no traceback or log line can print it either.
"""

from __future__ import annotations

import psycopg

from spotsweep.shared.errors import PermanentError, RetryableError
from spotsweep.shared.redact import redact, scrub


def connect_error(url: str, error: psycopg.Error) -> PermanentError | RetryableError:
    """What to raise (``from None``) when ``psycopg.connect(url)`` raised ``error``.

    A URL libpq cannot parse (anything but an ``OperationalError`` at connect)
    is permanent: it will not parse next time either. Everything else at
    connect (refused, timed out, a wrong password, a host that does not
    resolve) may pass with time, so it is retryable, as before.
    """
    text = scrub(str(error), url)
    if isinstance(error, psycopg.OperationalError):
        return RetryableError(f"cannot connect to PostgreSQL at {redact(url)}: {text}")
    return PermanentError(f"SPOTSWEEP_DATABASE_URL {scrub(url, url)} is not a PostgreSQL URL or conninfo libpq can "
                          f"read (percent-encode '@', ':', '/' in a password): {text}")
