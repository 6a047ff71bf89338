"""Passwords out of text that is about to be logged or shown: one pattern set for
the log scrubber (shared/log.py) and for URLs in error messages (settings.redact_url)."""

from __future__ import annotations

import re

# scheme://user:PASSWORD@host: the password runs to the last "@" of the word (a password may hold one).
_URL_PASSWORD = re.compile(r"(\w+://[^:/@\s]*:)\S+@")
# password=PASSWORD in a query string or a libpq conninfo ('quoted' or up to a space or "&").
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('[^']*'|[^\s&]+)", re.I)


def redact(text: str) -> str:
    """``text`` with every password in a URL or a ``password=`` pair masked as ``***``.

    ``amqp://u:pw@h/v`` -> ``amqp://u:***@h/v``; ``...?password=pw`` and
    ``host=h password=pw`` get ``password=***``.
    """
    if "@" not in text and "=" not in text:  # what either pattern needs: most log values skip both
        return text
    return _KV_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1***@", text))
