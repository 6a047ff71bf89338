"""Whether two attempts failed with the same error, run-specific details aside.

The deterministic-failure rule (:func:`.decide.repeated_failure`) compares an
attempt's error with the one before. Each run has its own folder, pid and
attempt number, and a trainer that refuses its checkpoint names the path
(``refusing to resume /var/lib/spotsweep/runs/p4121-t_3f9a_a2-7/checkpoint/...``),
so the raw texts never match. :func:`normalised` blanks what differs from run
to run and keeps the rest (the message, the settings and values it names).
"""

from __future__ import annotations

import re

_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)
_ADDRESS = re.compile(r"\b0x[0-9a-f]+\b", re.IGNORECASE)
_PATH = re.compile(r"[^\s'\"()\[\]<>,;=]*/[^\s'\"()\[\]<>,;=]*")  # a token with a slash: a path or a URI
_TMP = re.compile(r"^(tmp|pytest-|spotsweep-)[\w.-]*$")  # mkdtemp's random names, the agent's own folders
_HEX = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{6,}\b", re.IGNORECASE)  # ids, digests
_COUNTED = re.compile(r"\b(pid|process|attempt|run|trial|thread|worker|rank|port)([ =:#]*)\d+\b", re.IGNORECASE)
_DIGITS = re.compile(r"\d+")


def _path(match: re.Match[str]) -> str:
    """A path with its random folders blanked and the numbers inside it (pids, attempts, steps) made ``#``."""
    parts = match.group().split("/")
    return "/".join("tmp*" if _TMP.match(p) else _DIGITS.sub("#", p) for p in parts)


def normalised(error: str) -> str:
    """``error`` with run-specific paths and ids replaced by placeholders: uuids, hex ids and
    ``0x`` addresses, numbers inside paths and temporary folders, and the number after pid,
    attempt, run, trial and the like. Numbers elsewhere (a setting's values) are kept."""
    text = _UUID.sub("<uuid>", error)
    text = _ADDRESS.sub("0x#", text)
    text = _PATH.sub(_path, text)
    text = _HEX.sub("<id>", text)
    return _COUNTED.sub(lambda m: f"{m.group(1)}{m.group(2)}#", text)


def same_error(a: str, b: str) -> bool:
    """Whether errors ``a`` and ``b`` say the same once run-specific details are blanked."""
    return normalised(a) == normalised(b)
