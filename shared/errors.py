"""The error taxonomy: retryable apart from permanent.

Adapters translate library exceptions into these at the edges
(``raise RetryableError(...) from e``) so that handlers and the retry
middleware decide on the class, never on a library's exception type.
"""

from __future__ import annotations


class SpotsweepError(Exception):
    """Base of every error spotsweep raises on purpose."""


class PermanentError(SpotsweepError):
    """Retrying will not help: bad input, a violated invariant."""


class Refused(PermanentError):
    """Input refused on purpose (a hostile code archive, a checkpoint over its limits):
    the input is bad, not the node that refused it, and every retry meets the same input."""


class RetryableError(SpotsweepError):
    """A dependency is down or busy; the same call may succeed later."""


class UnsafeSetup(PermanentError):
    """A setup that would hand someone more than they were given (trials as root): a service
    refuses to start in it (exit 78) until the flag the message names allows it."""


class SpecError(PermanentError):
    """A sweep spec is invalid. ``errors`` lists ``(field, message)`` pairs.

    The message is bounded (the first problems, then "and N more problems"):
    a spec with 200,000 unknown keys must not become a megabytes-long error
    that is stored and printed by every ``status``.
    """

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        from spotsweep.shared.limits import cap_problems  # limits imports pydantic only; kept out of this leaf's imports

        self.errors = errors
        super().__init__(cap_problems([f"{f}: {m}" if f else m for f, m in errors]))


class DecodeError(PermanentError):
    """A message body could not be decoded into one of the known schemas."""


class TransitionError(PermanentError):
    """A trial state transition that the state machine forbids."""
