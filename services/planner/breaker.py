"""Is this sweep broken? Its own circuit breaker: a pure decision (docs/faults.md, "a sweep that fails everywhere").

A sweep whose code fails everywhere would otherwise run every trial, each
``retries.max_failures`` + 1 times, on every agent: its fault, paid by the
fleet, and something any submitter can do on purpose. The agents' node
breaker does not count such failures (:mod:`spotsweep.services.agent.health`).

Once ``retries.max_failed_trials`` regular trials failed for good and none ran
to its end, :func:`.service.on_events` stops the sweep as a failed smoke stage
does. One trial that ran keeps it going: its failures are then its
configurations', not its code's. The reason keeps one line of the last error,
so that every trial it cancels shows it whole.
"""

from __future__ import annotations

from collections.abc import Mapping

from spotsweep.shared.limits import cap_text

DEFAULT_MAX_FAILED_TRIALS = 10  # the spec's retries.max_failed_trials (shared/spec_models.py)
RAN = ("completed", "pruned", "paused")  # a paused trial waits at a rung: it ran and was judged
_ERROR_CHARS = 500


def _count(counts: Mapping[str, object], state: str) -> int:
    value = counts.get(state, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def broken(counts: Mapping[str, object], last_error: object, limit: object) -> str | None:
    """Why the sweep must stop (the reason recorded as its error), or None to let it go on.

    ``counts``: the sweep's regular trials by state (as the database has them,
    this batch's decisions included); ``last_error``: the error of the trial
    that failed last; ``limit``: the spec's ``retries.max_failed_trials``.
    Bad values (a negative count, a non-number, no error) mean "nothing
    known": they never raise."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        return None
    failed = _count(counts, "failed")
    if failed < limit or any(_count(counts, state) for state in RAN):
        return None
    lines = last_error.strip().splitlines() if isinstance(last_error, str) else []
    error = lines[-1].strip() if lines else ""  # one line: a cancelled trial's error ends with the whole reason
    return (f"stopped by its breaker: {failed} trials failed (each after its retries) and none ran to its end "
            f"(retries.max_failed_trials={limit}); the last error: {cap_text(error, _ERROR_CHARS) or 'none recorded'}")
