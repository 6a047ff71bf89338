"""How a sweep ends once nothing is left to launch or run: a pure decision.

A sweep whose every trial failed did not complete: it ends ``failed`` with
its first trial's error (errors differ in paths and ids, so "the most
common one" would rarely group), so ``submit --wait`` exits non-zero,
``status`` says why, and a typo in the command is not reported as a result.
One completed (or pruned: it ran and was judged) trial is enough for
``completed``; the failed ones show in the counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Outcomes:
    """A sweep's regular trials by state, and the error of its first failed trial (by index)."""

    counts: dict[str, int] = field(default_factory=dict)
    first_error: str | None = None


def sweep_end(outcomes: Outcomes) -> tuple[str, str | None]:
    """(state, error) for a sweep that has nothing left to do."""
    failed = outcomes.counts.get("failed", 0)
    ran = outcomes.counts.get("completed", 0) + outcomes.counts.get("pruned", 0)
    if failed == 0 or ran > 0:
        return "completed", None
    return "failed", f"every trial failed ({failed}); the first one: {outcomes.first_error or 'no error recorded'}"
