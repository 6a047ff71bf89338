"""Text from trials and messages, made safe to show: a terminal or a spreadsheet
never runs what a trial name, a param, a metric name or an error holds:
control characters (ESC and the sequences it starts, OSC window titles, CR that
overwrites a line, NUL, the C1 controls) and the Unicode bidi overrides that
reorder what is shown appear as escapes (``\\x1b``, ``\\u202e``), a table cell
is never read as markup (``[link=...]``), and a CSV cell never starts a formula
(OWASP's CSV injection guidance). Pure functions; no I/O.
"""

from __future__ import annotations

import re

from rich.text import Text

from spotsweep.services.reporter.values import exact, fmt
from spotsweep.shared.limits import TRIAL_NAME_CHARS, cap_text

CELL_CHARS = TRIAL_NAME_CHARS  # a cell of a table: a trial name fits whole, a 10 MB param does not

# C0 controls, DEL, C1 controls; the bidi embeddings, overrides and isolates and the marks (ALM, LRM, RLM).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# What a spreadsheet reads as a number (a leading sign is then no formula); nan/inf as this reporter writes them.
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?|-?inf|nan")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str, newlines: bool = False) -> str:
    """``text`` with every control and bidi character shown as an escape.
    With ``newlines``, line breaks stay (a multi-line error printed as lines)."""
    return (_UNSAFE_BUT_NEWLINE if newlines else _UNSAFE).sub(_escape, text)


def shown(value: object, limit: int = CELL_CHARS) -> str:
    """Any value as one printable line of at most about ``limit`` characters:
    numbers as :func:`~values.fmt` writes them."""
    return printable(cap_text(fmt(value), limit))


def cell(value: object, style: str = "") -> Text:
    """A table cell: shown literally, never as markup, never highlighted."""
    return Text(shown(value), style=style)


def csv_cell(value: object) -> str:
    """A CSV cell that a spreadsheet shows as the text it is: one that would start a formula
    is prefixed with ``'``, unless the whole cell is a number."""
    text = exact(value)
    if text.startswith(_FORMULA_START) and not _NUMBER.fullmatch(text):
        text = "'" + text
    return printable(text)
