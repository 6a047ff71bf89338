"""The dashboard: a web service over the results views (``spotsweep dashboard``).

``make_app(db)`` is the ASGI app (tests serve it with uvicorn);
``serve(settings, host, port)`` is what the CLI runs.
"""

from __future__ import annotations

from spotsweep.services.reporter.web.app import make_app
from spotsweep.services.reporter.web.main import serve

__all__ = ["make_app", "serve"]
