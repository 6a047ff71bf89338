"""What the planner takes from a message on ``spotsweep.sweeps``: untrusted until checked.

Any AMQP client may post to the sweeps queue, so the body, the ``sweep_id``
header and the AMQP ``message_id`` are checked before anything is built from
them (trial ids, S3 prefixes, rows every ``status`` prints):

* the body must be JSON nested at most :data:`~spotsweep.shared.limits.JSON_DEPTH`
  deep (a 100,000-deep array is a decode error, not a crash);
* a ``sweep_id`` header must have the shape of the ids ``submit`` makes
  (``name-<hex8>``): another one is a decode error, dead-lettered with the
  reason and no row, since nobody can be waiting on an id ``submit`` could
  not have made;
* an AMQP ``message_id`` of another shape (client libraries set their own)
  names the sweep through a hash, ``<name>-<hex8>``: still one sweep per
  message, redelivered or not;
* a rejected spec's name is kept only when it is a valid name, else the id
  stands in for it.

Pure functions; no I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from typing import Any

from spotsweep.shared.errors import DecodeError
from spotsweep.shared.limits import JSON_DEPTH, cap_text, is_sweep_id

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")  # the spec's rule for ``name`` (shared/spec_models.py)
REJECTED = "rejected"  # the name of a sweep whose own name could not be shown


def new_sweep_id(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def safe_name(name: object) -> str | None:
    """``name`` when it is a valid sweep name, else None."""
    return name if isinstance(name, str) and _NAME.fullmatch(name) else None


def header_sweep_id(headers: dict[str, Any], what: str) -> str | None:
    """The ``sweep_id`` header, checked; None when there is none."""
    value = headers.get("sweep_id")
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not is_sweep_id(value):
        shown = cap_text(repr(value), 120)
        raise DecodeError(f"{what}: header sweep_id {shown} is not a sweep id (name-<8 hex digits>, as submit makes)")
    return value


def submission_id(headers: dict[str, Any], message_id: str | None, name: object) -> str:
    """The id a submission's sweep gets: its header, else its message id
    (hashed when not of the shape ``name-<hex8>``), else a new one."""
    given = header_sweep_id(headers, "sweep submission")
    if given is not None:
        return given
    base = safe_name(name) or REJECTED
    if message_id:
        if is_sweep_id(message_id):
            return message_id
        return f"{base}-{hashlib.sha256(message_id.encode(errors='replace')).hexdigest()[:8]}"
    return new_sweep_id(base)


def decoded_body(body: bytes, what: str) -> Any:
    """The body as JSON, or :class:`DecodeError` saying why not (never a RecursionError)."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError) as e:
        raise DecodeError(f"{what}: body is not JSON: {cap_text(str(e), 300)}") from e
    except RecursionError as e:
        raise DecodeError(f"{what}: body is nested deeper than {JSON_DEPTH} levels") from e
    if _deeper_than(data, JSON_DEPTH):
        raise DecodeError(f"{what}: body is nested deeper than {JSON_DEPTH} levels")
    return data


def _deeper_than(data: Any, limit: int) -> bool:
    """Whether ``data`` nests lists and objects more than ``limit`` deep (iterative: no recursion to exhaust)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False
