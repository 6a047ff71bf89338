"""What the planner takes from a message on ``spotsweep.sweeps``: untrusted until checked.

Any AMQP client may post to the sweeps queue, so the body (JSON nested at most
:data:`~spotsweep.shared.limits.JSON_DEPTH` deep), the ``sweep_id`` header and
the AMQP ``message_id`` are checked before anything is built from them (trial
ids, S3 prefixes, rows every ``status`` prints); docs/architecture.md tells
the rules and both wire forms. :func:`sweep_command` reads a message, typed
or of an older client, into one of ``shared/messages.py``'s commands; every
refusal is a :class:`DecodeError`, dead-lettered with its reason.
:func:`submission`, :func:`cancellation` and :func:`extension` make the typed
messages the CLI (and local mode) post. Pure functions; no I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import ValidationError

from spotsweep.shared import topology
from spotsweep.shared.broker.port import Outgoing
from spotsweep.shared.errors import DecodeError
from spotsweep.shared.limits import JSON_DEPTH, cap_text, is_sweep_id
from spotsweep.shared.messages import COMMAND_KINDS, CancelSweep, ExtendSweep, SubmitSweep, decode_command, encode
from spotsweep.shared.spec import SweepSpec

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


@dataclass(frozen=True)
class Submission:
    """A sweep to start: its id and its spec as JSON, not checked yet (a bad one is recorded as rejected)."""

    sweep_id: str
    spec: Any
    name: object  # the spec's ``name`` as given, for a rejection's row
    kind: ClassVar[str] = "sweep.submit"  # as the typed message's, for the planner's table of handlers


class UndecodableSubmission(DecodeError):
    """A submission that cannot be read. ``sweep_id``: the id it named, when it
    named one, under which it is recorded as rejected (someone may wait on it)."""

    def __init__(self, message: str, sweep_id: str | None) -> None:
        super().__init__(message)
        self.sweep_id = sweep_id


def sweep_command(headers: dict[str, Any], message_id: str | None, body: bytes) -> Submission | CancelSweep | ExtendSweep:
    """The command a message on ``spotsweep.sweeps`` stands for, typed or untyped (see the module docstring).

    A typed body wins; the header ``kind`` (which the CLI still sets on a
    cancel and an extend, so that an older planner reads them too) must then
    agree with it."""
    kind = headers.get("kind")
    if kind not in (None, "cancel", "extend"):
        raise DecodeError(f"unknown command kind {cap_text(repr(kind), 80)} (cancel, extend, or none for a spec)")
    if kind is not None:
        sweep_id = _command_id(headers, kind)
        try:
            data = decoded_body(body, f"{kind} command for {sweep_id}")
        except DecodeError:
            if kind == "extend":
                raise
            data = None  # an untyped cancel's body was never read
        if _is_typed(data):
            command = _typed(data, None)
            if data["kind"] != f"sweep.{kind}" or command.sweep_id != sweep_id:
                raise DecodeError(f"{kind} command for {sweep_id}: its body is a {data['kind']} of {command.sweep_id}")
            assert not isinstance(command, Submission)  # its kind is sweep.cancel or sweep.extend
            return command
        return CancelSweep(sweep_id=sweep_id) if kind == "cancel" else _untyped_extend(sweep_id, data)
    named = submission_id(headers, message_id, None) if headers.get("sweep_id") or message_id else None
    try:
        data = decoded_body(body, "sweep submission")
        if _is_typed(data):
            return _typed(data, named)
    except UndecodableSubmission:
        raise
    except DecodeError as e:
        raise UndecodableSubmission(str(e), named) from e
    name = data.get("name") if isinstance(data, dict) else None
    return Submission(submission_id(headers, message_id, name), data, name)


def _is_typed(data: Any) -> bool:
    return isinstance(data, dict) and data.get("kind") in COMMAND_KINDS


def _typed(data: dict[str, Any], named: str | None) -> Submission | CancelSweep | ExtendSweep:
    """A typed command; its envelope's ``sweep_id`` must be a sweep id."""
    try:
        command = decode_command(data)
    except DecodeError as e:
        raise (UndecodableSubmission(str(e), named) if data.get("kind") == "sweep.submit" else e) from e
    if not is_sweep_id(command.sweep_id):
        raise DecodeError(f"{command.kind}: sweep_id {cap_text(repr(command.sweep_id), 120)} is not a sweep id "
                          "(name-<8 hex digits>, as submit makes)")
    if isinstance(command, SubmitSweep):
        return Submission(command.sweep_id, command.spec, command.spec.get("name"))
    return command


def _command_id(headers: dict[str, Any], kind: str) -> str:
    sweep_id = header_sweep_id(headers, f"{kind} command")
    if sweep_id is None:
        raise DecodeError(f"{kind} command without a sweep_id header")
    return sweep_id


def _untyped_extend(sweep_id: str, data: Any) -> ExtendSweep:
    try:
        return ExtendSweep(sweep_id=sweep_id, version=data["version"], trials=data.get("trials") or 0,
                           budget=data.get("budget") or {})
    except (KeyError, TypeError, AttributeError, ValidationError) as e:
        raise DecodeError(f"extend command for {sweep_id!r}: body must be {{trials, budget, version}}: "
                          f"{cap_text(str(e), 300)}") from e


def submission(spec: SweepSpec, sweep_id: str) -> Outgoing:
    """Submit a sweep: a typed :class:`SubmitSweep`, at the sweep's priority."""
    body = encode(SubmitSweep(message_id=sweep_id, sweep_id=sweep_id, spec=spec.to_json_dict()))
    return Outgoing("", topology.SWEEPS_QUEUE, body, headers={"sweep_id": sweep_id}, message_id=sweep_id,
                    priority=spec.priority)


def cancellation(sweep_id: str) -> Outgoing:
    """Cancel a sweep; top priority, so it overtakes queued submissions."""
    # The header ``kind`` too: a planner from before the typed commands still reads it.
    return Outgoing("", topology.SWEEPS_QUEUE, encode(CancelSweep(sweep_id=sweep_id)),
                    headers={"kind": "cancel", "sweep_id": sweep_id}, priority=topology.MAX_PRIORITY)


def extension(sweep_id: str, version: int, trials: int = 0, budget: dict[str, Any] | None = None) -> Outgoing:
    """Extend spec version ``version`` of a sweep by ``trials`` and/or new ``budget`` caps."""
    message_id = f"{sweep_id}+v{version}"
    body = encode(ExtendSweep(message_id=message_id, sweep_id=sweep_id, version=version, trials=trials,
                              budget=budget or {}))
    # The header ``kind`` too: a planner from before the typed commands reads the same body keys.
    return Outgoing("", topology.SWEEPS_QUEUE, body, headers={"kind": "extend", "sweep_id": sweep_id},
                    message_id=message_id, priority=topology.MAX_PRIORITY)
