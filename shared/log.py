"""structlog set-up: JSON lines off a terminal, readable lines on one.

Sweep, trial and attempt ids are bound with :func:`bound` (contextvars), so
every line logged inside a handler carries them without the handler passing
them around. A processor scrubs anything that looks like a secret.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any, TextIO, cast

import structlog

from spotsweep.shared.redact import redact

_SECRET_KEYS = re.compile(r"(secret|password|token|access_key)", re.I)


def _scrub(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key, value in list(event.items()):
        if _SECRET_KEYS.search(key):
            event[key] = "***"
        elif isinstance(value, str):
            event[key] = redact(value)
    return event


class _CurrentStderr:
    """``sys.stderr`` as it is when a line is written, not when logging was
    configured: loggers are cached on first use, and a program that embeds
    the CLI (a notebook, a test's captured stream) may swap or close the
    stream it had then."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(level: str = "INFO", json: bool | None = None) -> None:
    """Configure structlog for a service process. ``json=None``: decide by TTY."""
    if json is None:
        json = not sys.stderr.isatty()
    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _scrub,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(cast(TextIO, _CurrentStderr())),  # it only writes and flushes
        # structlog's advice for speed: a module's logger is built once, not
        # at every call (configure runs once, before any service logs).
        cache_logger_on_first_use=True,
    )
    # pika logs every failed connection attempt with a traceback; the broker
    # adapter translates those failures into one clear error of ours instead.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger("pika").setLevel(logging.CRITICAL)


def get(name: str | None = None) -> Any:
    return structlog.get_logger(name)


@contextmanager
def bound(**ids: Any) -> Iterator[None]:
    """Bind ids (sweep_id, trial_id, attempt...) to every log line in the block."""
    clean = {k: v for k, v in ids.items() if v is not None}
    with structlog.contextvars.bound_contextvars(**clean):
        yield
