"""Trial events as the planner may store them: what the database cannot take is dropped, with a reason.

The events queue takes any AMQP client's bytes, and one value the database
refuses (a NUL in a metric name fails the jsonb write) would dead-letter a
trial's end and keep it ``running`` for ever, holding its ``max_concurrent``
slot. So before deciding, every lifecycle event is cleaned: metrics that
break the spec's ``limits`` are dropped and named in the trial's
``warnings``; free text loses its NULs and is capped; ``flags`` and
``warnings`` are bounded (docs/architecture.md). :func:`bare` is the last
resort when the database still refuses an end: the end without its final
values. Pure functions of the event; no I/O.
"""

from __future__ import annotations

from typing import Any, TypeVar

from spotsweep.shared.limits import ERROR_CHARS, Limits, cap_text, metric_name_problem
from spotsweep.shared.messages import Envelope, TrialFinished, TrialLost, TrialProgress, TrialStarted

FLAGS = 32  # tags kept per trial
FLAG_CHARS = 64
WARNINGS = 20  # warnings kept per trial
WARNING_CHARS = 1000
ID_CHARS = 200  # an agent's name, a run id
DROPPED_NAMED = 5  # dropped metrics named one by one in a warning, then a count
_TEXT = {"error": ERROR_CHARS, "reason": ERROR_CHARS, "agent": ID_CHARS, "run_id": ID_CHARS}

E = TypeVar("E", bound=Envelope)


def pg_text(text: str, limit: int = ERROR_CHARS) -> str:
    """``text`` as a PostgreSQL text value can hold it: no NUL, at most ``limit`` characters (and a note)."""
    return cap_text(text.replace("\x00", "\ufffd"), limit)


def cleaned(event: E, limits: Limits) -> E:
    """``event`` with what the database cannot take dropped or cut (the same object when nothing is)."""
    if not isinstance(event, (TrialStarted, TrialFinished, TrialLost, TrialProgress)):
        return event
    update: dict[str, Any] = {}
    for name, limit in _TEXT.items():
        value = getattr(event, name, None)
        if isinstance(value, str) and (len(value) > limit or "\x00" in value):
            update[name] = pg_text(value, limit)
    if isinstance(event, TrialFinished):
        update.update(_finished(event, limits))
    return event.model_copy(update=update) if update else event  # type: ignore[return-value]


def _finished(event: TrialFinished, limits: Limits) -> dict[str, Any]:
    update: dict[str, Any] = {}
    metrics, dropped = kept_metrics(event.metrics, limits)
    warnings = list(event.warnings)
    if dropped:
        update["metrics"] = metrics
        warnings.append(dropped_warning(dropped))
    flags = list(event.flags) + (["metrics_dropped"] if dropped else [])
    if dropped or _unbounded(flags, FLAGS, FLAG_CHARS):
        update["flags"] = _bounded(flags, FLAGS, FLAG_CHARS)
    if dropped or _unbounded(warnings, WARNINGS, WARNING_CHARS):
        update["warnings"] = _bounded(warnings, WARNINGS, WARNING_CHARS)
    return update


def kept_metrics(metrics: dict[str, float], limits: Limits) -> tuple[dict[str, float], list[str]]:
    """The metrics a trial may store, and why each other one was dropped."""
    kept: dict[str, float] = {}
    dropped: list[str] = []
    for name, value in metrics.items():
        problem = metric_name_problem(name, limits)
        if problem is None and len(kept) >= limits.metric_names:
            problem = f"more than {limits.metric_names} metric names: {name[:40]!r}"
        if problem is None:
            kept[name] = value
        else:
            dropped.append(problem)
    return kept, dropped


def dropped_warning(problems: list[str]) -> str:
    shown = "; ".join(problems[:DROPPED_NAMED])
    more = f"; and {len(problems) - DROPPED_NAMED} more" if len(problems) > DROPPED_NAMED else ""
    return f"{len(problems)} final metric(s) dropped: {shown}{more}"


def bare(event: E, reason: str) -> E:
    """A trial's end without its final values, flags and warnings (the database
    refused them): recorded so the trial ends, with ``reason`` as its warning.
    Other events are returned as they are."""
    if not isinstance(event, TrialFinished):
        return event
    warning = pg_text(f"final values dropped, the database refused them: {reason}", WARNING_CHARS)
    return event.model_copy(update={  # type: ignore[return-value]
        "metrics": {}, "flags": ["values_dropped"], "warnings": [warning],
        "error": None if event.error is None else pg_text(event.error),
    })


def _unbounded(items: list[str], most: int, chars: int) -> bool:
    return len(items) > most or any(len(i) > chars or "\x00" in i for i in items)


def _bounded(items: list[str], most: int, chars: int) -> list[str]:
    out: list[str] = []
    for item in items:
        text = pg_text(item, chars)
        if text not in out:
            out.append(text)
        if len(out) == most:
            break
    return out
