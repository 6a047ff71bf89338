"""The dashboard: a web service over the results views (``spotsweep dashboard``).

``make_app(db)`` is the ASGI app (tests serve it with uvicorn);
``serve(settings, host, port)`` is what the CLI runs.

Both load on first use (PEP 562): ``spotsweep report`` and ``logs`` import this
package's queries, and should not pay for the web framework and the importance
model (0.3 s) at every call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spotsweep.services.reporter.web.app import make_app
    from spotsweep.services.reporter.web.main import serve

__all__ = ["make_app", "serve"]


def __getattr__(name: str) -> Any:
    if name == "make_app":
        from spotsweep.services.reporter.web.app import make_app  # deferred: starlette and the importance model

        return make_app
    if name == "serve":
        from spotsweep.services.reporter.web.main import serve  # deferred: uvicorn, and the app

        return serve
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
