"""``spotsweep.results()``: the Python API over a real PostgreSQL (rows written
as the planner and collector write them) and over a real local sweep."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "services" / "reporter" / "web"))
from dashseed import HOSTILE, SPEC, add_points, add_sweep, add_trial, small_sweep  # noqa: E402

import spotsweep  # noqa: E402
from spotsweep.analysis import UnknownSweep  # noqa: E402
from spotsweep.services.reporter.web.api import Api  # noqa: E402
from spotsweep.shared.db import Database  # noqa: E402

pytestmark = pytest.mark.integration
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture()
def seeded(database_url: str) -> tuple[str, dict[str, str]]:
    db = Database(database_url)
    db.migrate()
    ids = small_sweep(db)
    db.close()
    return database_url, ids


def test_sweeps_one_row_each_with_counts_and_best(seeded: tuple[str, dict[str, str]]) -> None:
    url, _ = seeded
    with spotsweep.results(url) as r:
        frame = r.sweeps()
        losses = r.sweep("web-test-1").trials()["metrics.val_loss"]
    assert list(frame["sweep_id"]) == ["web-test-1"]
    row = frame.iloc[0]
    assert (row["name"], row["state"], row["metric"], row["mode"]) == ("web-test", "running", "val_loss", "min")
    assert (row["completed"], row["failed"], row["running"], row["trials"]) == (9, 1, 1, 11)
    assert row["best"] == losses[losses.apply(math.isfinite)].min() < 2.0


def test_a_sweep_by_id_or_by_its_newest_name_and_a_clear_error_otherwise(seeded: tuple[str, dict[str, str]]) -> None:
    url, _ = seeded
    db = Database(url)
    add_sweep(db, "web-test-2")  # same name, created at the same time: the larger id is the newer
    with db.transaction() as conn:
        conn.execute("UPDATE sweeps SET created_at = created_at + interval '1 hour' WHERE sweep_id = 'web-test-2'")
    db.close()
    with spotsweep.results(url) as r:
        assert r.sweep("web-test-1").sweep_id == "web-test-1"
        assert r.sweep("web-test").sweep_id == "web-test-2"
        with pytest.raises(UnknownSweep, match="no sweep has the id or name 'nope'"):
            r.sweep("nope")
        with pytest.raises(LookupError):
            r.sweep("nope")


def test_trials_are_ranked_with_params_and_metrics_columns_and_nan_as_float(seeded: tuple[str, dict[str, str]]) -> None:
    url, ids = seeded
    with spotsweep.results(url) as r:
        frame = r.sweep("web-test-1").trials()
    assert list(frame.columns[:6]) == ["trial_id", "trial_name", "state", "attempts", "preemptions", "flags"]
    assert [c for c in frame.columns if c.startswith("params.")] == ["params.lr", "params.opt", "params.layers"]
    assert [c for c in frame.columns if c.startswith("metrics.")] == ["metrics.train_loss", "metrics.val_loss"]
    assert sorted(frame["trial_id"]) == sorted(ids.values())
    completed = frame[frame["state"] == "completed"]
    finite = completed["metrics.val_loss"].iloc[:-1]
    assert list(finite) == sorted(finite)  # best first
    nan = frame.set_index("trial_name").loc["exp_nan"]
    assert math.isnan(nan["metrics.val_loss"]) and nan["metrics.train_loss"] == math.inf
    assert completed.iloc[-1]["trial_name"] == "exp_nan"  # NaN ranks after every finite value
    assert list(frame["state"].iloc[-2:]) == ["running", "failed"]
    assert HOSTILE in set(frame["trial_name"])  # names are data, as written
    resumed = frame.set_index("trial_name").loc["exp_005"]
    assert (resumed["attempts"], resumed["preemptions"]) == (2, 1)
    assert isinstance(frame.iloc[0]["flags"], list)


def test_best_is_the_top_finite_trial_never_a_nan_one(seeded: tuple[str, dict[str, str]]) -> None:
    url, _ = seeded
    with spotsweep.results(url) as r:
        sw = r.sweep("web-test-1")
        best, frame = sw.best(), sw.trials()
    finite = frame[frame["metrics.val_loss"].apply(math.isfinite)]
    assert best["metrics.val_loss"] == finite["metrics.val_loss"].min()
    assert best["trial_name"] != "exp_nan"


def test_best_of_a_sweep_without_completed_trials_says_so(database_url: str) -> None:
    db = Database(database_url)
    db.migrate()
    add_sweep(db, "empty-1")
    add_trial(db, "empty-1", 0, "only", {"lr": 0.01, "opt": "adam", "layers": 2}, state="running")
    db.close()
    with spotsweep.results(database_url) as r, pytest.raises(LookupError, match="no completed trial"):
        r.sweep("empty-1").best()


def test_points_are_long_with_attempts_and_merge_like_the_view_example(seeded: tuple[str, dict[str, str]]) -> None:
    url, ids = seeded
    with spotsweep.results(url) as r:
        sw = r.sweep("web-test-1")
        everything, loss, merged = sw.points(), sw.points("val_loss"), sw.points("val_loss", merged=True)
    assert list(loss.columns) == ["trial_id", "trial_name", "attempt", "step", "name", "value"]
    assert set(everything["name"]) == {"val_loss", "train_loss"} and set(loss["name"]) == {"val_loss"}
    resumed = loss[loss["trial_id"] == ids["exp_005"]]
    assert list(resumed["step"]) == list(range(200)) and set(resumed["attempt"]) == {1, 2}
    assert (resumed["trial_name"] == "exp_005").all()
    nan = loss[loss["trial_id"] == ids["exp_nan"]]
    assert nan["value"].iloc[60] != nan["value"].iloc[60]  # NaN, as a float
    assert len(merged) == len(loss)  # no step was reported twice here
    assert loss["value"].dtype == float


def test_importance_is_the_dashboards_most_important_first(seeded: tuple[str, dict[str, str]]) -> None:
    url, _ = seeded
    db = Database(url)
    dashboard = Api(db).importance_body("web-test-1", "val_loss", "fanova")
    db.close()
    with spotsweep.results(url) as r:
        sw = r.sweep("web-test-1")
        frame = sw.importance("val_loss")
        pairs = sw.interactions()
        with pytest.raises(ValueError, match="method"):
            sw.importance(method="shap")
    assert list(frame.columns) == ["param", "importance"]
    assert [(p["name"], p["importance"]) for p in dashboard["params"]] == list(zip(frame["param"], frame["importance"]))
    assert set(frame["param"]) == {"lr", "opt", "layers"}
    assert list(frame["importance"]) == sorted(frame["importance"], reverse=True)
    assert frame.attrs["trials"] == 8 and frame.attrs["reason"] is None
    assert list(pairs.columns) == ["param_a", "param_b", "importance"]
    assert [[a, b] for a, b in zip(pairs["param_a"], pairs["param_b"])] == [i["params"] for i in dashboard["interactions"]]


def test_importance_with_too_few_trials_is_empty_with_the_reason(database_url: str) -> None:
    db = Database(database_url)
    db.migrate()
    add_sweep(db, "few-1", SPEC)
    add_trial(db, "few-1", 0, "a", {"lr": 0.01, "opt": "adam", "layers": 2}, metrics={"val_loss": 1.0})
    db.close()
    with spotsweep.results(database_url) as r:
        frame = r.sweep("few-1").importance()
    assert frame.empty and "at least 4" in frame.attrs["reason"]


_READ_BACK = """
import json, spotsweep
r = spotsweep.results()
sw = r.sweep("noop")
t = sw.trials()
print(json.dumps({"sweeps": len(r.sweeps()), "id": sw.sweep_id, "names": list(t["trial_name"]),
                  "states": sorted(set(t["state"])), "best": sw.best()["trial_name"],
                  "x": list(t.columns), "points": len(sw.points("score")),
                  "importance": list(sw.importance()["param"])}))
"""


def test_a_real_local_sweep_reads_back_through_the_python_api(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSWEEP_")}
    env["SPOTSWEEP_HOME"] = str(tmp_path / "home")
    run = subprocess.run([sys.executable, "-m", "spotsweep", "run", str(EXAMPLES / "noop.yaml"), "--workers", "3"],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    read = subprocess.run([sys.executable, "-c", _READ_BACK], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert read.returncode == 0, read.stderr[-3000:]
    got = json.loads(read.stdout.strip().splitlines()[-1])
    assert got["sweeps"] == 1 and got["id"].startswith("noop-")
    assert len(got["names"]) == 9 and got["states"] == ["completed"]
    assert got["names"][0] == got["best"] == "noop_03_x0_y-1"
    assert "params.x" in got["x"] and "metrics.score" in got["x"]
    assert got["points"] == 9
    assert set(got["importance"]) == {"x", "y"}


def test_points_keep_odd_names_as_text_and_an_empty_sweep_has_the_columns(database_url: str) -> None:
    db = Database(database_url)
    db.migrate()
    add_sweep(db, "odd-1")
    trial = add_trial(db, "odd-1", 0, 'a "quoted", name\nwith a line', {"lr": 0.01, "opt": "adam", "layers": 2},
                      metrics={"NA": 1.0})
    add_sweep(db, "bare-1")
    add_points(db, "odd-1", [(trial, 1, 0, "NA", float("inf")), (trial, 1, 1, "NA", float("-inf")),
                             (trial, 1, 0, 'x,"y"', 2.0), (trial, 1, 0, "null", float("nan"))])
    db.close()
    with spotsweep.results(database_url) as r:
        frame = r.sweep("odd-1").points()
        empty = r.sweep("bare-1").points()
    assert list(frame["name"]) == ["NA", "NA", "null", 'x,"y"']
    assert list(frame["value"][:2]) == [math.inf, -math.inf] and math.isnan(frame["value"][2])
    assert set(frame["trial_name"]) == {'a "quoted", name\nwith a line'}
    assert empty.empty and list(empty.columns) == ["trial_id", "trial_name", "attempt", "step", "name", "value"]
