"""Passwords out of text that is about to be logged or shown: one pattern set for
the log scrubber (shared/log.py) and for URLs in error messages (settings.redact_url),
and :func:`scrub` for a library's own message about a URL we gave it.

Why :func:`scrub` as well as :func:`redact`: a library that fails to parse a
URL quotes the *pieces* it parsed, not the URL. A password holding an
unencoded ``@``, ``:`` or ``/`` (``pw@Se:cR/et``) is split by libpq or pika
into a host and a port, and their messages quote them (``failed to resolve
host 'Se'``, ``Port could not be cast to integer value as 'cR'``), where no
URL pattern can see them. So the connect edge masks the password itself and
each piece of it a URL parser could cut out.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

# scheme://user:PASSWORD@host: the password runs to the last "@" of the word (a password may hold one).
_URL_PASSWORD = re.compile(r"(\w+://[^:/@\s]*:)\S+@")
# password=PASSWORD in a query string or a libpq conninfo ('quoted' or up to a space or "&").
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('[^']*'|[^\s&]+)", re.I)
# Where a URL parser cuts a password that holds them unencoded.
_CUTS = re.compile(r"[@:/?#\[\]&=\s']+")
# A libpq conninfo's first key (a bare secret never starts so).
_CONNINFO = re.compile(r"\s*(host|hostaddr|port|dbname|user|password|sslmode)\s*=", re.I)
MASK = "***"


def redact(text: str) -> str:
    """``text`` with every password in a URL or a ``password=`` pair masked as ``***``.

    ``amqp://u:pw@h/v`` -> ``amqp://u:***@h/v``; ``...?password=pw`` and
    ``host=h password=pw`` get ``password=***``.
    """
    if "@" not in text and "=" not in text:  # what either pattern needs: most log values skip both
        return text
    return _KV_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1***@", text))


def passwords(url: str) -> list[str]:
    """The password(s) ``url`` holds, as :func:`redact` sees them (up to the last
    ``@``; a ``password=`` value), raw and percent-decoded."""
    found: list[str] = []
    for m in re.finditer(r"\w+://[^:/@\s]*:(\S+)@", url):
        found.append(m.group(1))
    for m in _KV_PASSWORD.finditer(url):
        found.append(m.group(2).strip("'"))
    return [p for p in dict.fromkeys(found + [unquote(p) for p in found]) if p]


def pieces(secret: str, shortest: int = 2) -> list[str]:
    """``secret`` and every piece of it a URL parser could cut out at ``@ : / ? # [ ]``
    (and the runs between them), longest first; pieces shorter than ``shortest``
    are left out (masking every single letter would mask the whole message)."""
    parts = [p for p in _CUTS.split(secret) if p]
    runs = {secret}
    for i in range(len(parts)):
        for j in range(i + 1, len(parts) + 1):
            runs.add("".join(parts[i:j]))
    # The text between two cuts, cut marks included (a parser keeps some: "Wv7:Kx4").
    bounds = sorted({0, len(secret), *(i for m in _CUTS.finditer(secret) for i in m.span())})
    for i in bounds:
        for j in bounds:
            if j > i:
                runs.add(secret[i:j].strip("@:/?#[]&= '"))
    return sorted((r for r in runs if len(r) >= shortest), key=len, reverse=True)


def _locates(secret: str) -> bool:
    """Whether ``secret`` is a URL or a libpq conninfo (whose password is a part of it), not a bare secret."""
    return "://" in secret or bool(_CONNINFO.match(secret))


def scrub(text: str, *secrets: str | None) -> str:
    """``text`` (a library's error message) with URL passwords redacted and every
    password of ``secrets`` (URLs or bare secrets), and each piece of one, masked.

    A URL or conninfo without a password masks nothing: its host, port and
    database are what the reader needs to see (and the line before shows them).
    """
    text = redact(text)
    for secret in secrets:
        if not secret:
            continue
        for password in passwords(secret) if _locates(secret) else [secret]:
            for piece in pieces(password):
                text = text.replace(piece, MASK)
    return text
