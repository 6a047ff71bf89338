"""Which lines of a trial's metrics file get through: the spec's ``limits``.

One trial must not be able to hurt the others sharing the collector, the
database and everyone's ``ls``, so every line passes a screen before it is
forwarded. A line that breaks a rule is skipped and counted, never fatal to
the trial and never forwarded:

* not a valid line of the contract (not JSON, a bad step, a value that is not
  a number), or longer than ``line_bytes`` (found by :mod:`.tail`);
* a metric name that is empty, longer than ``metric_name_chars`` or holds a
  control character;
* a new metric name past ``metric_names`` distinct names in this trial;
* over the rate: metric and heartbeat lines spend a token of a bucket that
  holds ``line_burst`` and refills at ``lines_per_second`` (checkpoint lines
  are never rate-limited: skipping one would lose a checkpoint).

What was skipped ends up in the attempt's final event: short ``flags``
(``skipped_lines``, ``rate_limited``, ...) and at most
:data:`~spotsweep.shared.limits.ERROR_PROBLEMS` human ``warnings`` such as
"skipped 3 lines: metric name holds a control character: 'a\\x00b' (first at
line 7)". Pure: the clock is passed in, there is no I/O.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from spotsweep.services.agent.lines import BadLine, Checkpoint, Heartbeat, Parsed, Points, parse_line
from spotsweep.shared import log
from spotsweep.shared.limits import ERROR_PROBLEMS, Limits, cap_text, metric_name_problem

_log = log.get("spotsweep.agent")
WARNING_CHARS = 300  # one warning line
_CHECKPOINT_KEY = '"checkpoint"'
_SPECIFIC = re.compile(r"'[^']*'|\d+")  # names and numbers in a reason

# Why a line was skipped -> the flag it raises.
_FLAG = {"invalid": "skipped_lines", "too_long": "skipped_lines", "name": "skipped_lines", "names": "skipped_lines",
         "rate": "rate_limited"}


@dataclass
class _Skips:
    why: str  # the rule, a key of _FLAG
    count: int
    first_line: int
    reason: str


class Screen:
    """The limits of one attempt over the lines of its metrics file, with the count of what was skipped."""

    def __init__(self, limits: Limits, known: Iterable[str] = (), clock: Callable[[], float] = time.monotonic,
                 trial_id: str | None = None) -> None:
        self.limits = limits
        self._names: set[str] = set(known)  # names a restored checkpoint already reported count as seen
        self._clock = clock
        self._tokens = float(limits.line_burst)
        self._refilled = clock()
        self._skips: dict[str, _Skips] = {}
        self._notes: dict[str, str] = {}  # flag -> warning, for what the screen did not see itself
        self._trial_id = trial_id

    def admit(self, number: int, item: str | BadLine) -> Parsed | None:
        """The parsed line ``number`` if it gets through, else None (and it is counted)."""
        if isinstance(item, BadLine):
            self._skip("too_long", number, item.reason)
            return None
        checkpoint = _CHECKPOINT_KEY in item  # cheap, before parsing: over the rate a line costs no parse
        if not checkpoint and not self._take_token():
            self._skip("rate", number, self._over_rate())
            return None
        parsed = parse_line(item)
        if isinstance(parsed, BadLine):
            self._skip("invalid", number, parsed.reason)
            return None
        if isinstance(parsed, Checkpoint | Heartbeat):
            return parsed
        if checkpoint and not self._take_token():  # a metric named "checkpoint"'s line after all
            self._skip("rate", number, self._over_rate())
            return None
        return self._names_ok(number, parsed)

    def _names_ok(self, number: int, points: Points) -> Points | None:
        new = [name for name in points.values if name not in self._names]
        for name in new:
            problem = metric_name_problem(name, self.limits)
            if problem is not None:
                self._skip("name", number, problem)
                return None
        if len(self._names) + len(new) > self.limits.metric_names:
            more = f" and {len(new) - 1} more new names" if len(new) > 1 else ""
            self._skip("names", number, f"metric {new[0][:80]!r}{more} would make {len(self._names) + len(new)} "
                                        f"distinct names (limits.metric_names = {self.limits.metric_names})")
            return None
        self._names.update(new)
        return points

    def _over_rate(self) -> str:
        return (f"over {self.limits.lines_per_second:g} lines a second after a burst of {self.limits.line_burst} "
                "(limits.lines_per_second, limits.line_burst)")

    def _take_token(self) -> bool:
        now = self._clock()
        self._tokens = min(float(self.limits.line_burst),
                           self._tokens + (now - self._refilled) * self.limits.lines_per_second)
        self._refilled = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def _skip(self, why: str, number: int, reason: str) -> None:
        # One count per kind of problem ("metric name is N characters long"), whatever the name or number.
        key = f"{why}:{_SPECIFIC.sub('#', reason.split(':')[0])}"
        if key not in self._skips and len(self._skips) >= ERROR_PROBLEMS:
            key = why  # past that many kinds, one count per rule: the counts stay bounded
        seen = self._skips.get(key)
        if seen is None:
            self._skips[key] = _Skips(why, 1, number, cap_text(reason, 200))
            # One log line per kind of problem: a trial writing a million bad lines must not flood the agent's log.
            _log.warning("metrics line skipped", reason=cap_text(reason, 200), line=number, trial_id=self._trial_id)
        else:
            seen.count += 1

    def note(self, flag: str, warning: str) -> None:
        """Record something skipped or cut outside the lines (a refused file, a truncated log)."""
        if flag not in self._notes:
            self._notes[flag] = cap_text(warning, WARNING_CHARS)
            _log.warning(warning, trial_id=self._trial_id)

    @property
    def skipped(self) -> int:
        return sum(s.count for s in self._skips.values())

    def flags(self, final: dict[str, float] | None = None) -> list[str]:
        """Short tags of what happened, sorted; ``nan`` when a final metric is not finite."""
        tags = {_FLAG[s.why] for s in self._skips.values()} | set(self._notes)
        if final and any(not math.isfinite(v) for v in final.values()):
            tags.add("nan")
        return sorted(tags)

    def warnings(self) -> list[str]:
        """One line per kind of skipped line, then the notes; at most ERROR_PROBLEMS."""
        lines = []
        for s in sorted(self._skips.values(), key=lambda s: s.first_line):
            noun = "line" if s.count == 1 else "lines"
            lines.append(cap_text(f"skipped {s.count} {noun}: {s.reason} (first at line {s.first_line})", WARNING_CHARS))
        lines.extend(self._notes.values())
        return lines[:ERROR_PROBLEMS]
