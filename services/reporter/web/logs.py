"""An attempt's whole log in the browser, a page at a time (the trial page's
"full log" link; the endpoints: docs/dashboard.md). A request reads at most
:data:`PAGE` bytes (one ranged GET), never the log (a log may be 64 MiB: the
dashboard's memory per request stays bounded, tests/hostile/test_dashboard_limits.py);
a page showing a running attempt asks again from ``next`` as the agent uploads
more. ``log.txt`` streams the whole log :data:`CHUNK` bytes at a time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from spotsweep.services.reporter.web import queries
from spotsweep.services.reporter.web.api import Api, _int, json_response
from spotsweep.shared.artifacts.browse import STREAMS, log_attempts
from spotsweep.shared.artifacts.checkpoint_layout import log_key
from spotsweep.shared.artifacts.port import NotFound
from spotsweep.shared.errors import SpotsweepError

PAGE = 512 * 1024  # bytes of a log one request reads
CHUNK = 1024 * 1024  # bytes log.txt holds at once
ATTEMPT_LIMIT = 1_000_000


def page_end(data: bytes, more: bool) -> int:
    """How much of ``data`` (a page read from a log) to hand out: all of the log's
    end; otherwise up to the page's last newline, or (a line longer than the
    page) up to the last whole UTF-8 character, so no page ends inside one."""
    if not more:
        return len(data)
    cut = data.rfind(b"\n") + 1
    if cut:
        return cut
    for back in range(1, min(4, len(data)) + 1):  # a UTF-8 lead byte is 0xxxxxxx or 11xxxxxx
        byte = data[-back]
        if byte < 0x80:
            return len(data)
        if byte >= 0xC0:
            whole = back >= (2 if byte < 0xE0 else 3 if byte < 0xF0 else 4)
            return len(data) if whole else len(data) - back
    return len(data)


class TrialLogs:
    """Handlers over ``api``'s database and artifact store (see the module's docstring)."""

    def __init__(self, api: Api) -> None:
        self.api = api

    def _trial(self, sweep_id: str, trial_id: str) -> dict[str, Any]:
        self.api._sweep(sweep_id)
        with self.api.db.transaction() as conn:
            row = queries.trial(conn, sweep_id, trial_id)
        if row is None:
            raise HTTPException(404, f"no trial {trial_id!r} in sweep {sweep_id!r}")
        return row

    def page_body(self, sweep_id: str, trial_id: str, attempt: int, stream: str, offset: int) -> dict[str, Any]:
        """One page of a stream: ``text``, ``offset``, ``next``, ``size`` and ``running``
        (the trial runs this attempt: more may come); ``store_error`` when the store cannot be read."""
        row = self._trial(sweep_id, trial_id)
        body: dict[str, Any] = {"attempt": attempt, "stream": stream, "offset": offset, "next": offset, "size": 0,
                                "text": "", "running": row["state"] == "running" and row["attempts"] == attempt,
                                "store_error": None}
        try:
            data, size = self.api.artifacts.store().get_range(log_key(sweep_id, trial_id, attempt, stream), offset, PAGE)
        except NotFound:
            return body  # nothing uploaded (yet)
        except (SpotsweepError, OSError) as e:
            return {**body, "store_error": f"the artifact store cannot be read: {e}"}
        cut = page_end(data, offset + len(data) < size)
        return {**body, "text": data[:cut].decode("utf-8", "replace"), "next": offset + cut, "size": size}

    def attempts(self, sweep_id: str, trial_id: str) -> tuple[dict[str, Any], list[int], str | None]:
        """The trial, the attempts that uploaded a log, and why the store could not be read (or None)."""
        row = self._trial(sweep_id, trial_id)
        try:
            return row, log_attempts(self.api.artifacts.store(), sweep_id, trial_id), None
        except (SpotsweepError, OSError) as e:
            return row, [], f"the artifact store cannot be read: {e}"

    # -- ASGI endpoints ------------------------------------------------------------

    @staticmethod
    def _stream(request: Request) -> str:
        stream = request.query_params.get("stream", "stdout")
        if stream not in STREAMS:
            raise HTTPException(400, f"stream must be one of {', '.join(STREAMS)} (got {stream!r})")
        return stream

    async def page(self, request: Request) -> Response:
        p = request.path_params
        attempt = _int(request, "attempt", 1, 1, ATTEMPT_LIMIT)
        offset = _int(request, "offset", 0, 0, 1 << 62)
        return json_response(await run_in_threadpool(self.page_body, p["sweep_id"], p["trial_id"], attempt,
                                                     self._stream(request), offset))

    async def text(self, request: Request) -> Response:
        p = request.path_params
        attempt, stream = _int(request, "attempt", 1, 1, ATTEMPT_LIMIT), self._stream(request)
        await run_in_threadpool(self._trial, p["sweep_id"], p["trial_id"])
        key, store = log_key(p["sweep_id"], p["trial_id"], attempt, stream), self.api.artifacts.store()
        try:
            first, size = await run_in_threadpool(store.get_range, key, 0, CHUNK)
        except NotFound:
            raise HTTPException(404, f"attempt {attempt} of trial {p['trial_id']!r} uploaded no {stream} log") from None
        except (SpotsweepError, OSError) as e:
            raise HTTPException(503, f"the artifact store cannot be read: {e}") from e

        async def chunks() -> AsyncIterator[bytes]:
            data, offset = first, 0
            while data:
                yield data
                offset += len(data)
                if offset >= size:
                    return
                data, _ = await run_in_threadpool(store.get_range, key, offset, min(CHUNK, size - offset))

        name = f"{p['trial_id']}-attempt-{attempt}-{stream}.log".replace('"', "")
        return StreamingResponse(chunks(), media_type="text/plain; charset=utf-8",
                                 headers={"content-disposition": f'inline; filename="{name}"'})
