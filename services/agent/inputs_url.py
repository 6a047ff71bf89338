"""A URL input (``from: https://host/path/file.tar``): one file, named and checked before it enters the cache.

Its *version* (the cache key, :func:`version_of`) is the spec's ``sha256``
when it gives one (the content itself, wherever it is served from), else the
URL with the server's ``ETag``, ``Last-Modified`` and ``Content-Length``: a
changed file is a new version. A server that sends neither ETag nor
Last-Modified cannot say whether the file changed, so such a URL needs
``sha256``. :func:`save` streams the body to ``<tree>/<file name>``, checks its
length against ``Content-Length`` and its digest against ``sha256``. With
``sha256`` a node that holds the file asks the server nothing; without it one
GET serves both: its headers name the version, and its body is read only
when the node does not hold that version yet (so a presigned URL signed for
GET only works too). Redirects are followed; proxies come from the usual
variables.
"""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import Message
from http.client import HTTPException, HTTPResponse
from pathlib import Path

from spotsweep.shared.errors import PermanentError, RetryableError
from spotsweep.shared.inputs import Input, url_file_name

TIMEOUT_S = 60.0  # to connect, and between two reads of the body
CHUNK = 1 << 20


def version_of(item: Input, headers: Message | None) -> str:
    """The version of ``item`` as served with ``headers`` (see the module's docstring; none needed with ``sha256``)."""
    name = url_file_name(item.source)
    key: list[str | None]
    if item.sha256 is not None:
        key = ["sha256", item.sha256, name]
    else:
        if headers is None:
            raise ValueError("a URL input without sha256 is versioned by the server's headers")
        etag, modified = headers.get("ETag"), headers.get("Last-Modified")
        if etag is None and modified is None:
            raise PermanentError(f"input {item.source}: the server sends neither ETag nor Last-Modified, so a changed "
                                 "file could not be told from the cached one; give the file's sha256 in the spec")
        key = [item.source, etag, modified, headers.get("Content-Length")]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:32]


@contextmanager
def opened(url: str) -> Iterator[HTTPResponse]:
    """The GET's response (headers read, body not), closed after the block. A 4xx is permanent
    (the URL is wrong, or not ours to read), anything else that fails is retried on the next delivery."""
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers={"Accept-Encoding": "identity"}),
                                          timeout=TIMEOUT_S)
    except urllib.error.HTTPError as e:
        error = PermanentError if 400 <= e.code < 500 and e.code not in (408, 429) else RetryableError
        raise error(f"input {url}: the server answered {e.code} {e.reason}") from e
    except (urllib.error.URLError, OSError) as e:
        raise RetryableError(f"input {url}: {getattr(e, 'reason', e)}") from e
    try:
        yield response
    finally:
        response.close()


def fetch(item: Input, tree: Path) -> None:
    """GET ``item`` into ``tree`` (:func:`save`)."""
    with opened(item.source) as response:
        save(item, response, tree)


def save(item: Input, response: HTTPResponse, tree: Path) -> None:
    """The body into ``tree/<file name>``, its length and digest checked."""
    path, digest, size = tree / url_file_name(item.source), hashlib.sha256(), 0
    try:
        with path.open("wb") as out:
            while chunk := response.read(CHUNK):
                out.write(chunk)
                digest.update(chunk)
                size += len(chunk)
    except (OSError, HTTPException) as e:  # a reset, a read timeout (a full disk is an OSError of the write: the agent's, retried too)
        raise RetryableError(f"input {item.source}: the download broke off after {size} bytes: {e}") from e
    expected = response.headers.get("Content-Length")
    if expected is not None and expected.isdigit() and int(expected) != size:
        raise RetryableError(f"input {item.source}: {size} bytes arrived of the {expected} the server announced")
    if item.sha256 is not None and digest.hexdigest() != item.sha256:
        raise PermanentError(f"input {item.source}: the file's sha256 is {digest.hexdigest()}, not the spec's "
                             f"{item.sha256}")
