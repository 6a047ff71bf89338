"""The Python API, ``spotsweep.results()``: a sweep's results as pandas DataFrames, for notebooks.

::

    import spotsweep
    r = spotsweep.results()            # SPOTSWEEP_DATABASE_URL, else local mode's database
    r.sweeps()                         # one row per sweep
    sw = r.sweep("deepseek-grid")      # by id, or the newest sweep with that name
    sw.trials()                        # one row per trial, best first: params.<name>, metrics.<name>
    sw.points("val_loss")              # long: trial_id, trial_name, attempt, step, name, value
    sw.importance("val_loss")          # param, importance: most important first
    sw.best()                          # the best trial's row
    sw.checkpoint(trial, "out/")       # the trial's (id or name) latest checkpoint, downloaded; its step

It reads only the public views ``trial_results`` and ``metric_points`` (and
the ``sweeps`` table for a sweep's name, state and spec, as the reporter
does), through the dashboard's queries, ranking and importance code, so a
notebook sees what ``spotsweep dashboard`` and ``spotsweep report`` show.
``sw.checkpoint(trial, "out/")`` downloads a trial's checkpoint from the
artifact store, sharing ``spotsweep checkpoint``'s code.

pandas comes with the ``results`` extra (``pip install 'spotsweep[results]'``).
The module is not named ``results``: importing a submodule of that name would
replace the function ``spotsweep.results`` with the module.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from spotsweep.services.reporter.values import metric_float
from spotsweep.services.reporter.web import importance as imp
from spotsweep.services.reporter.web import present, queries
from spotsweep.commands.trial_lookup import find_trial
from spotsweep.shared.db import Database
from spotsweep.shared.db.embedded import configured
from spotsweep.shared.errors import PermanentError, SpecError
from spotsweep.shared.settings import Settings
from spotsweep.shared.spec import parse_spec

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Results", "Sweep", "UnknownSweep", "results"]

TRIAL_COLUMNS = ["trial_id", "trial_name", "state", "attempts", "preemptions", "flags", "failures", "smoke", "agent",
                 "run_seconds", "started_at", "finished_at"]
POINT_COLUMNS = ["trial_id", "trial_name", "attempt", "step", "name", "value"]
STATES = ("pending", "queued", "running", "completed", "pruned", "failed", "cancelled")


class UnknownSweep(PermanentError, LookupError):
    """No sweep has that id or name."""


def _pandas() -> Any:
    try:
        import pandas  # deferred: the optional `results` extra
    except ImportError as e:  # pragma: no cover - the dev extra installs it
        raise ImportError("spotsweep.results() answers pandas DataFrames: pip install 'spotsweep[results]'") from e
    return pandas


def results(database_url: str | None = None) -> Results:
    """The results database: ``database_url``, else ``SPOTSWEEP_DATABASE_URL``,
    else local mode's embedded database under ``SPOTSWEEP_HOME``."""
    settings = Settings()
    db = configured(settings, database_url)
    if database_url is None and settings.database_url is None:
        db.migrate()  # local mode's own database: before the first run, no sweeps rather than an error
    else:
        db.check()  # a reader never migrates a shared database; SchemaNotReady says what to do
    return Results(db)


class Results:
    """Every sweep of one results database. Close it (or use ``with``) to
    release the connection."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def __enter__(self) -> Results:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    def sweeps(self) -> pd.DataFrame:
        """One row per sweep, newest first: id, name, state, objective and
        mode, the best final objective so far, trials per state, times."""
        with self.db.transaction() as conn:
            return sweeps_frame(queries.sweeps(conn))

    def sweep(self, id_or_name: str) -> Sweep:
        """A sweep by its id, or the newest sweep with that name."""
        with self.db.transaction() as conn:
            row = queries.find_sweep(conn, id_or_name)
        if row is None:
            raise UnknownSweep(f"no sweep has the id or name {id_or_name!r} (see spotsweep.results().sweeps())")
        return Sweep(self, row)


class Sweep:
    """One sweep's trials, points and importance."""

    def __init__(self, results: Results, row: Mapping[str, Any]) -> None:
        self._results = results
        self.sweep_id: str = row["sweep_id"]
        self.name: str = row["name"]
        self.state: str = row["state"]
        self.metric: str = row["metric"]  # the objective (the first of several)
        self.mode: str = row["mode"]
        self.spec: dict[str, Any] = row.get("spec") or {}

    def __repr__(self) -> str:
        return f"Sweep({self.sweep_id!r}, name={self.name!r}, state={self.state!r}, metric={self.metric!r})"

    def trials(self) -> pd.DataFrame:
        """One row per trial, best first (NaN and infinite objectives after every
        finite one, then running, queued, pruned, failed, cancelled trials)."""
        with self._results.db.transaction() as conn:
            rows = queries.trials(conn, self.sweep_id)
        return trials_frame(present.ranked(rows, self.metric, self.mode), list(self.spec.get("space") or {}))

    def best(self) -> pd.Series:
        """The best completed trial's row (smoke trials aside); a NaN or infinite
        objective ranks last. Raises :class:`LookupError` when none completed."""
        frame = self.trials()
        done = frame[(frame["state"] == "completed") & ~frame["smoke"].astype(bool)]
        if done.empty:
            raise LookupError(f"sweep {self.sweep_id!r} has no completed trial yet")
        return done.iloc[0]

    def points(self, metric: str | None = None, merged: bool = False) -> pd.DataFrame:
        """Every reported point (of ``metric``, or of all metrics), by trial,
        name, step and attempt. ``merged``: one value per step, the latest
        attempt's, as ``metric_points``' documented example merges a resume."""
        where = " AND p.name = %s" if metric is not None else ""
        args: tuple[Any, ...] = (self.sweep_id, metric) if metric is not None else (self.sweep_id,)
        distinct = "DISTINCT ON (p.trial_id, p.name, p.step) " if merged else ""
        order = "p.trial_id, p.name, p.step, p.attempt DESC" if merged else "p.trial_id, p.name, p.step, p.attempt"
        buffer = io.BytesIO()
        with self._results.db.transaction() as conn, conn.cursor() as cur:
            names = {r["trial_id"]: r["trial_name"] for r in conn.execute(
                "SELECT trial_id, trial_name FROM trial_results WHERE sweep_id = %s", (self.sweep_id,))}
            # COPY as CSV and pandas' parser: ~10x faster than a row at a time for millions of points
            with cur.copy(f"COPY (SELECT {distinct}p.trial_id, p.attempt, p.step, p.name, p.value FROM metric_points p"
                          f" WHERE p.sweep_id = %s{where} ORDER BY {order}) TO STDOUT WITH (FORMAT csv, HEADER)", args) as copy:
                for chunk in copy:
                    buffer.write(chunk)
        buffer.seek(0)
        return points_frame(buffer, names)

    def importance(self, metric: str | None = None, method: str = "fanova") -> pd.DataFrame:
        """``param``, ``importance``: most important first, as the dashboard
        computes it (fANOVA on a random forest, or ``method="ped-anova"``).
        Empty, with ``.attrs["reason"]``, when it cannot be told (under 4
        completed trials, nothing varies); ``.attrs["caution"]`` says when too
        few trials make it rough. ``.attrs["interactions"]`` holds the
        strongest pairs; :meth:`interactions` as a DataFrame."""
        result = self._importance(metric, method)
        frame = _pandas().DataFrame(result.params, columns=["param", "importance"])
        frame.attrs.update({"metric": result.metric, "method": result.method, "trials": result.trials,
                            "reason": result.reason, "caution": result.caution, "interactions": [(*p, v) for p, v in result.interactions]})
        return frame

    def interactions(self, metric: str | None = None) -> pd.DataFrame:
        """``param_a``, ``param_b``, ``importance``: the strongest pairwise interactions first (fANOVA)."""
        result = self._importance(metric, "fanova")
        return _pandas().DataFrame([(a, b, v) for (a, b), v in result.interactions],
                                   columns=["param_a", "param_b", "importance"])

    def checkpoint(self, trial: str, out: str | Path, step: int | None = None) -> int:
        """Download trial ``trial``'s (an id or a name in this sweep) latest
        complete checkpoint, or the one of ``step``, into the folder ``out``
        from the artifact store (``SPOTSWEEP_S3_*``, else local mode's); its
        step. As ``spotsweep checkpoint`` does: a step that is not there raises
        :class:`~spotsweep.shared.artifacts.browse.NoCheckpoint` listing those there are."""
        # Deferred, only a checkpoint needs them: the artifact store's S3 client (minio, 0.5 s to import).
        from spotsweep.shared.artifacts import open_store
        from spotsweep.shared.artifacts.browse import download_checkpoint  # the store's: see above

        with self._results.db.transaction() as conn:
            row = find_trial(conn, trial, self.sweep_id)
        return download_checkpoint(open_store(Settings()), self.sweep_id, row["trial_id"], Path(out), step)

    def _importance(self, metric: str | None, method: str) -> imp.Importance:
        if method not in imp.METHODS:
            raise ValueError(f"method must be one of {', '.join(imp.METHODS)} (got {method!r})")
        metric = metric or self.metric
        mode = self.mode if metric == self.metric else "min"
        try:
            space = parse_spec(self.spec).space
        except (SpecError, TypeError) as e:
            return imp.Importance(metric, method=method, reason=f"the sweep's stored spec cannot be read: {e}")
        with self._results.db.transaction() as conn:
            rows = conn.execute("SELECT trial_id, state, params, metrics, smoke FROM trial_results"
                                " WHERE sweep_id = %s AND state = 'completed'", (self.sweep_id,)).fetchall()
        return imp.importance(space, rows, metric, mode, method)


def _number(value: Any) -> Any:
    """A stored metric as a float (``"NaN"`` -> nan, ``"Infinity"`` -> inf); what is no number stays as it is."""
    number = metric_float(value)
    return value if number is None else number


def sweeps_frame(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """``queries.sweeps`` rows as a DataFrame: a column per trial state (0 when none)."""
    out = []
    for r in rows:
        counts = r.get("counts") or {}
        out.append({"sweep_id": r["sweep_id"], "name": r["name"], "state": r["state"], "metric": r["metric"],
                    "mode": r["mode"], "best": math.nan if r.get("best") is None else r["best"],
                    "trials": sum(counts.values()), **{s: counts.get(s, 0) for s in STATES},
                    "created_at": r["created_at"], "finished_at": r["finished_at"], "error": r.get("error"),
                    "note": r.get("note")})
    cols = ["sweep_id", "name", "state", "metric", "mode", "best", "trials", *STATES, "created_at", "finished_at",
            "error", "note"]
    return _pandas().DataFrame(out, columns=cols)


def trials_frame(rows: Sequence[Mapping[str, Any]], space_order: Sequence[str] = ()) -> pd.DataFrame:
    """Trial rows (in the order given) as a DataFrame: the trial's columns, then
    ``params.<name>`` (the spec's order, then others by name), then
    ``metrics.<name>`` (by name; non-finite values as float nan/inf)."""
    seen_params = {k for r in rows for k in (r.get("params") or {})}
    params = [k for k in space_order if k in seen_params] + sorted(seen_params - set(space_order))
    metrics = sorted({k for r in rows for k in (r.get("metrics") or {})})
    out = []
    for r in rows:
        row: dict[str, Any] = {c: r.get(c) for c in TRIAL_COLUMNS}
        row["flags"] = list(r.get("flags") or [])
        row["smoke"] = bool(r.get("smoke"))
        p, m = r.get("params") or {}, r.get("metrics") or {}
        row.update({f"params.{k}": p.get(k) for k in params})
        row.update({f"metrics.{k}": _number(m[k]) if k in m else math.nan for k in metrics})
        out.append(row)
    columns = [*TRIAL_COLUMNS, *(f"params.{k}" for k in params), *(f"metrics.{k}" for k in metrics)]
    return _pandas().DataFrame(out, columns=columns)


def points_frame(csv: IO[bytes], names: Mapping[str, str]) -> pd.DataFrame:
    """PostgreSQL's CSV of (trial_id, attempt, step, name, value) as the long
    DataFrame, with each trial's name. Text stays text (a metric named ``NA``
    is no missing value); ``NaN`` and ``Infinity`` become floats."""
    pd = _pandas()
    frame = pd.read_csv(csv, dtype={"trial_id": str, "attempt": "int64", "step": "int64", "name": str, "value": float},
                        keep_default_na=False, na_values={"value": ["NaN"]})
    frame.insert(1, "trial_name", frame["trial_id"].map(names))
    return frame[POINT_COLUMNS]
