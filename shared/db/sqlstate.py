"""Database errors classified by what they are (their SQLSTATE), not by psycopg's class.

psycopg files a too-long index row (``ProgramLimitExceeded``, class 54) under
``OperationalError``, beside a dropped connection. Retrying the first is
useless and, in a batch consumer, blocks every other sweep behind it for
ever; retrying the second is right. So the decision reads the five-character
SQLSTATE (PostgreSQL's Appendix A), whose first two characters are its class:

* retryable: the server or the connection is away or busy, or the
  transaction lost a race: ``08`` connection exception, ``40`` transaction
  rollback (serialization failure 40001, deadlock 40P01), ``53`` insufficient
  resources (too many connections 53300, disk full, out of memory), ``57``
  operator intervention (admin shutdown 57P01, crash shutdown, cannot connect
  now, a cancelled statement), ``58`` system error (I/O), and the two lock
  waits ``55P03`` (lock not available) and ``55006`` (object in use);
* permanent: everything else, among them ``22`` data exception (a NUL or an
  untranslatable character, a number out of range), ``23`` integrity
  violation, ``42`` syntax error or access rule, ``54`` program limit
  exceeded (an index row too large), ``XX`` internal error.

An error without a SQLSTATE came from the client side: a lost connection
(``OperationalError``) is retryable, anything else (a misuse) permanent.
"""

from __future__ import annotations

import psycopg

from spotsweep.shared.errors import PermanentError, RetryableError, SpotsweepError
from spotsweep.shared.limits import cap_text

RETRYABLE_CLASSES = frozenset({"08", "40", "53", "57", "58"})
RETRYABLE_STATES = frozenset({"55P03", "55006"})


def is_retryable(sqlstate: str | None, connection_error: bool = False) -> bool:
    """Whether an error with this SQLSTATE may succeed if the same work is tried again.

    ``connection_error``: for an error without a SQLSTATE, whether it is a
    connection problem (psycopg's ``OperationalError`` raised by the client).
    """
    if not sqlstate:
        return connection_error
    return sqlstate[:2] in RETRYABLE_CLASSES or sqlstate in RETRYABLE_STATES


def translated(error: psycopg.Error) -> SpotsweepError:
    """The taxonomy's error for a psycopg error (raise it ``from`` the original)."""
    state = error.sqlstate
    # Bounded: the message may quote the offending value (a 10 MB metric name).
    text = cap_text(f"database ({state}): {error}" if state else f"database: {error}")
    if is_retryable(state, isinstance(error, psycopg.OperationalError)):
        return RetryableError(text)
    return PermanentError(text)
