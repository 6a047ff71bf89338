"""``spotsweep report SWEEP --html FILE``: the sweep page as one offline file.

The dashboard's sweep page rendered once with everything inlined: the scripts
and the stylesheet as text, and the JSON API's answers for the sweep (the
bodies :class:`~spotsweep.services.reporter.web.api.Api` serves) as one JSON
document in a ``<script type="application/json">`` tag, which ``common.js``
reads instead of the network, so it opens from ``file://``.

Escaping: the page is a Jinja2 template with autoescaping on; in the JSON,
``<``, ``>`` and ``&`` are written as ``\\u003c``, ``\\u003e``, ``\\u0026``
(the same string to JSON.parse), so no text a trial wrote, ``</script>``
included, can end the tag. The inlined assets are checked to hold no
``</script``, ``</style`` or ``<!--``.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.exceptions import HTTPException

from spotsweep import __version__
from spotsweep.services.reporter.web import present
from spotsweep.services.reporter.web.api import Api
from spotsweep.services.reporter.web.sweep_api import RESOURCE_TRIALS, SEED_CONFIGS, TIMELINE_RUNS, SweepPanels
from spotsweep.shared.db import Database
from spotsweep.shared.errors import PermanentError

PACKAGE = "spotsweep.services.reporter.web"
# What sweep.js asks for: the best CURVE_TRIALS trials' curves at CURVE_POINTS points each.
CURVE_POINTS, CURVE_TRIALS = 400, 60
CURVE_METRICS = 12  # curves of the objective and the first others by name; a report stays a few MB
_ENDS_TAG = re.compile(r"</script|</style|<!--", re.IGNORECASE)


def script_json(value: Any) -> Markup:
    """Strict JSON safe inside a ``<script>`` element: no ``<``, ``>`` or ``&`` outside escapes."""
    text = present.dumps(value).decode()
    return Markup(text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def _asset(name: str) -> Markup:
    text = resources.files(PACKAGE).joinpath("static", name).read_text(encoding="utf-8")
    if _ENDS_TAG.search(text):
        raise PermanentError(f"static/{name} holds a sequence that would end its inline tag; it cannot be inlined")
    return Markup(text)


def report_data(db: Database, sweep_id: str) -> dict[str, Any]:
    """The API's answers sweep.js draws, for one sweep: ``sweep``, ``trials``,
    ``best``, ``importance``, ``seeds``, ``timeline``, ``cost``, ``resources``
    and ``curves`` by metric name."""
    api = Api(db)
    try:
        sweep = api.sweep_body(sweep_id)
        trials = api.trials_body(sweep_id)
        best = api.best_body(sweep_id, None) if sweep["metric"] else {"metric": "", "mode": sweep["mode"], "points": []}
        importance = api.importance_body(sweep_id, None, "fanova")
        names = sorted(sweep["metrics"], key=lambda m: (m != sweep["metric"], m))[:CURVE_METRICS]
        curves = {m: api.curves_body(sweep_id, m, CURVE_POINTS, CURVE_TRIALS, [], sweep["tokens_metric"]) for m in names}
        panels = SweepPanels(api)
        extra = {"seeds": panels.seeds_body(sweep_id, None, SEED_CONFIGS, 300),
                 "timeline": panels.timeline_body(sweep_id, TIMELINE_RUNS), "cost": panels.cost_body(sweep_id),
                 "resources": panels.resources_body(sweep_id, [], RESOURCE_TRIALS, 300)}
    except HTTPException as e:  # an unknown id: the API's 404
        raise PermanentError(f"{e.detail} (see `spotsweep status`)") from e
    dropped = len(sweep["metrics"]) - len(names)
    sweep = {**sweep, "metrics": [m for m in sweep["metrics"] if m in curves]}  # the selector offers what is here
    return {"sweep": sweep, "trials": trials, "best": best, "importance": importance, "curves": curves,
            "dropped_metrics": dropped, **extra}


def render(db: Database, sweep_id: str, now: datetime | None = None) -> str:
    """The report of ``sweep_id`` as one HTML document."""
    data = report_data(db, sweep_id)
    env = Environment(loader=PackageLoader(PACKAGE, "templates"), autoescape=select_autoescape(default=True))
    assets = {"css": _asset("dashboard.css"), "echarts": _asset("echarts.min.js"), "common": _asset("common.js"),
              "panels": _asset("panels.js"), "curves": _asset("curves.js"), "sweep": _asset("sweep.js")}
    generated = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%d %H:%M UTC")
    return env.get_template("report.html").render(
        sweep=data["sweep"], assets=assets, data=script_json(data), generated=generated, version=__version__,
        curve_metrics=list(data["curves"]), dropped_metrics=data["dropped_metrics"])


def write(db: Database, sweep_id: str, path: Path) -> int:
    """Write the report to ``path``; returns its size in bytes."""
    text = render(db, sweep_id)
    path.write_text(text, encoding="utf-8")
    return len(text.encode())
