"""Bounds on what one trial or one message may put into a shared deployment.

A sweep system is shared: many users' trials report into one collector, one
planner and one results database, and everyone reads the same ``ls``. So
every value that comes from a trial or a message body is bounded at the edge
(the agent, the planner's decoder) before it can stall ingestion, leave a
trial running forever, or flood every user's terminal. The numbers live
here, in one place; a spec may tighten or widen the per-trial ones with
``limits:`` (within the hard caps below, which protect the database).

Pure: constants, a model and small text helpers; no I/O.
"""

from __future__ import annotations

import re

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

# PostgreSQL's btree index rows hold at most ~2,700 bytes; a metric name is a
# key column of ``points``. 500 characters of 4-byte UTF-8 stays under it.
HARD_METRIC_NAME_CHARS = 500
TRIAL_NAME_CHARS = 200  # a rendered trial name (it travels in argv and the environment)
MAX_TOTAL_TRIALS = 2**53  # sweeps.total_trials is a bigint; every count stays exact in a double too
ERROR_CHARS = 4000  # a stored error text (a sweep's rejection, a trial's failure)
ERROR_PROBLEMS = 20  # problems listed in a stored error before "and N more problems"
JSON_DEPTH = 64  # nesting of a message body; deeper is refused before it is parsed

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SWEEP_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}-[0-9a-f]{8}")


class Limits(BaseModel):
    """Per-trial limits the agent enforces on the trial's files (spec ``limits:``).

    A line that breaks one is skipped and counted (the trial's ``warnings``),
    never fatal to the trial and never forwarded; so is a checkpoint with
    more than ``checkpoint_files`` files (not uploaded).
    """

    # strict as the spec is (no "3" -> 3); extra fields refused in a spec, where a typo must not pass
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    metric_name_chars: int = Field(default=200, ge=1, le=HARD_METRIC_NAME_CHARS)
    metric_names: int = Field(default=1000, ge=1, le=100_000)  # distinct metric names per trial
    line_bytes: int = Field(default=1 << 20, ge=1024, le=64 << 20)  # one metrics line
    # Metric lines per second, as a token bucket: a burst of ``line_burst``
    # lines is always accepted (a fast loop that logs every step for a while),
    # then ``lines_per_second`` on average.
    lines_per_second: float = Field(default=5000.0, gt=0, allow_inf_nan=False)
    line_burst: int = Field(default=100_000, ge=1)
    log_bytes: int = Field(default=64 << 20, ge=1024)  # stdout plus stderr kept and uploaded per run
    # Files in one checkpoint: each is a request to the store, and the agent's uploads hold the trial's slot.
    # A checkpoint over it is not uploaded (the trial's warnings say so); pack many small files into one.
    checkpoint_files: int = Field(default=10_000, ge=1, le=1_000_000)
    # Processes and threads the trial's container may hold at once (``--pids-limit``); None: the agent's
    # --pids-limit, which is also the most a spec may ask (a fork bomb stops there, not at the node's limit).
    pids: int | None = Field(default=None, ge=16, le=4_194_304)

    @model_serializer(mode="wrap")
    def _without_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """No ``pids`` key when not given: limits without it dump as before the field existed."""
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if v is not None or k != "pids"}


def has_control(text: str) -> bool:
    """Whether ``text`` holds a C0/C1 control character (NUL, ESC, CR, ...)."""
    return _CONTROL.search(text) is not None


def metric_name_problem(name: str, limits: Limits) -> str | None:
    """Why ``name`` cannot be a metric name, or None."""
    if not name:
        return "metric name is empty"
    if len(name) > limits.metric_name_chars:
        return f"metric name is {len(name)} characters long (limit {limits.metric_name_chars}): {name[:40]!r}..."
    if has_control(name):
        return f"metric name holds a control character: {name[:80]!r}"
    return None


def is_sweep_id(value: str) -> bool:
    """Whether ``value`` has the shape of the ids ``submit`` makes: ``name-<hex8>``."""
    return _SWEEP_ID.fullmatch(value) is not None


def cap_text(text: str, limit: int = ERROR_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"


def cap_problems(problems: list[str], most: int = ERROR_PROBLEMS, limit: int = ERROR_CHARS) -> str:
    """Problems joined with "; ", the first ``most`` of them, then "and N more problems"."""
    shown = "; ".join(problems[:most])
    if len(problems) > most:
        shown += f"; and {len(problems) - most} more problems"
    return cap_text(shown, limit)
