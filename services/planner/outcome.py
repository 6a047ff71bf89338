"""How a sweep ends once nothing is left to launch or run: a pure decision.

A sweep with no completed trial did not complete: it has no result. It ends
``failed`` with its first failed trial's error (errors differ in paths and
ids, so "the most common one" would rarely group), so ``submit --wait``
exits non-zero, ``status`` says why, and a typo in the command is not
reported as a result. That holds when some trials were pruned too: under
successive halving the trials that lost at a rung are pruned, and if every
promoted one then fails (a script that cannot resume with a larger budget),
nothing reached the top. One completed trial is enough for ``completed``;
the others show in the counts.
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
    counts = {state: n for state, n in outcomes.counts.items() if n}
    if counts.get("completed", 0) > 0 or not counts:
        return "completed", None
    first = outcomes.first_error or "no error recorded"
    if counts.get("failed") and not counts.get("pruned"):  # cancelled ones (a stop) aside
        return "failed", f"every trial failed ({counts['failed']}); the first one: {first}"
    ended = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    failure = f"; the first failure: {first}" if counts.get("failed") else ""
    return "failed", f"no trial completed ({ended}){failure}"
