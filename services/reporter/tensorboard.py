"""``spotsweep export tensorboard SWEEP DIR``: a sweep as TensorBoard runs, one per
trial (docs/results.md says what each holds). Every run holds the experiment
summary listing every param and final metric, as TensorBoard's HParams plugin
takes the first it finds: so its table compares all trials. The event files
are written by tensorboardX (no torch, no TensorFlow) and its hparams summary
API; nothing here encodes a record by hand. Reads the public views only.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psycopg.rows import tuple_row

from spotsweep.services.reporter.values import metric_float
from spotsweep.services.reporter.web import queries
from spotsweep.shared.db import Database
from spotsweep.shared.errors import PermanentError

FINAL = "final/"  # the tag prefix of final metrics, the HParams plugin's metrics
_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]+")
_NOT_TAG = re.compile(r"[^-/\w.]")  # what tensorboardX would replace in a tag (it logs each one)
_STATUS = {"completed": "STATUS_SUCCESS", "failed": "STATUS_FAILURE", "running": "STATUS_RUNNING"}


@dataclass(frozen=True)
class Exported:
    sweep_id: str
    runs: int
    scalars: int


def run_name(trial_id: str, trial_name: str) -> str:
    """A folder name for a trial's run: its name made safe for any file system, then its index (unique in the sweep)."""
    index = trial_id.rsplit(".", 1)[-1]
    slug = _UNSAFE.sub("_", trial_name).strip("._")[:100] or "trial"
    return f"{slug}-{index}"


def tag(metric: str) -> str:
    """A metric name as a TensorBoard tag, as tensorboardX would clean it (``val/loss`` stays, ``a b`` is ``a_b``)."""
    return _NOT_TAG.sub("_", metric).lstrip("/") or "_"


def hparam_values(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each trial's params as HParams values, by trial id: a param that is a number
    (not a bool) in every trial stays a number, all-bools stay bools, anything
    else (mixed kinds, lists) becomes text, so a column has one type."""
    names = sorted({k for r in rows for k in (r.get("params") or {})})
    kinds = {name: _kind([v for r in rows if (v := (r.get("params") or {}).get(name)) is not None]) for name in names}
    return {r["trial_id"]: {k: kinds[k](v) for k in names if (v := (r.get("params") or {}).get(k)) is not None}
            for r in rows}


def _kind(present: Sequence[Any]) -> type:
    """One param's HParams type from the values the trials gave it: bool when all are bools, float when all
    are numbers (not bools), else str."""
    if present and all(isinstance(v, bool) for v in present):
        return bool
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return float
    return str


def _session_end(state: str) -> Any:
    """The HParams session-end summary with the trial's status (tensorboardX's protos)."""
    from tensorboardX.proto import api_pb2, plugin_hparams_pb2 as hp, summary_pb2 as pb  # deferred: optional tensorboardX

    info = hp.SessionEndInfo(status=api_pb2.Status.Value(_STATUS.get(state, "STATUS_UNKNOWN")))
    content = hp.HParamsPluginData(session_end_info=info, version=0).SerializeToString()
    meta = pb.SummaryMetadata(plugin_data=pb.SummaryMetadata.PluginData(plugin_name="hparams", content=content))
    return pb.Summary(value=[pb.Summary.Value(tag="_hparams_/session_end_info", metadata=meta)])


def _points(db: Database, sweep_id: str) -> Iterator[tuple[str, Iterable[tuple[Any, ...]]]]:
    """Every point of the sweep, attempts merged, streamed by a server-side cursor, grouped by trial."""
    with db.transaction() as conn, conn.cursor(name="spotsweep_export", row_factory=tuple_row) as cur:
        cur.itersize = 10_000
        cur.execute("SELECT DISTINCT ON (trial_id, name, step) trial_id, name, step, value, recorded_at FROM metric_points"
                    " WHERE sweep_id = %s ORDER BY trial_id, name, step, attempt DESC", (sweep_id,))
        for trial_id, rows in itertools.groupby(cur, key=lambda r: r[0]):
            yield trial_id, rows


def export(db: Database, sweep: str, out: Path) -> Exported:
    """Write ``sweep`` (an id, or the newest sweep of that name) under ``out`` as TensorBoard runs."""
    try:
        from tensorboardX.summary import hparams  # deferred: tensorboardX is optional (the `results` extra)
    except ImportError as e:
        raise PermanentError("export tensorboard needs tensorboardX: pip install 'spotsweep[results]'") from e

    # tensorboardX warns once per NaN or infinite value; a diverged trial is data here, written as it is.
    logging.getLogger("tensorboardX.x2num").setLevel(logging.ERROR)
    with db.transaction() as conn:
        head = queries.find_sweep(conn, sweep)
        if head is None:
            raise PermanentError(f"no sweep has the id or name {sweep!r} (see `spotsweep status`)")
        rows = [r for r in queries.trials(conn, head["sweep_id"]) if not r.get("smoke")]
    if out.exists() and any(out.rglob("events.out.tfevents.*")):
        raise PermanentError(f"{out} already holds TensorBoard event files: export into an empty or new folder")
    out.mkdir(parents=True, exist_ok=True)
    values = hparam_values(rows)
    finals = sorted({k for r in rows for k in (r.get("metrics") or {})})
    example: dict[str, Any] = {}
    for v in values.values():
        example.update({k: x for k, x in v.items() if k not in example})
    experiment, _, _ = hparams(example, {tag(FINAL + m): 0.0 for m in finals})
    left = {r["trial_id"]: r for r in rows}
    scalars = 0
    for trial_id, points in _points(db, head["sweep_id"]):
        if (row := left.pop(trial_id, None)) is not None:
            scalars += _run(out, row, values[trial_id], points, hparams, experiment)
    for trial_id in sorted(left):  # trials that reported no point still have params and a state
        scalars += _run(out, left[trial_id], values[trial_id], [], hparams, experiment)
    return Exported(head["sweep_id"], len(rows), scalars)


def _run(out: Path, row: Mapping[str, Any], params: dict[str, Any], points: Iterable[tuple[Any, ...]], hparams: Any,
         experiment: Any) -> int:
    """One trial's run: the experiment, HParams session start, scalars by step, final metrics, session end."""
    from tensorboardX import SummaryWriter  # deferred, as in export

    _, start, _ = hparams(params, {})
    n, last_step = 0, 0
    with SummaryWriter(logdir=str(out / run_name(row["trial_id"], row["trial_name"])), flush_secs=30) as w:
        w.file_writer.add_summary(experiment)
        w.file_writer.add_summary(start)
        for _, name, step, value, recorded_at in points:
            w.add_scalar(tag(name), float(value), int(step), walltime=recorded_at.timestamp() if recorded_at else None)
            n, last_step = n + 1, max(last_step, int(step))
        for name, raw in sorted((row.get("metrics") or {}).items()):
            number = metric_float(raw)
            if number is not None:
                w.add_scalar(tag(FINAL + name), number, last_step)
                n += 1
        w.file_writer.add_summary(_session_end(row["state"]))
    return n
