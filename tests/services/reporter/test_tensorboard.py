"""``spotsweep export tensorboard``: event files written by tensorboardX from a
real PostgreSQL, read back with TensorBoard's own reader (EventAccumulator)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "web"))
from dashseed import HOSTILE, add_points, add_trial, small_sweep  # noqa: E402

from spotsweep.cli import main  # noqa: E402
from spotsweep.services.reporter import tensorboard as tb  # noqa: E402
from spotsweep.shared.db import Database  # noqa: E402

pytestmark = pytest.mark.integration
accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator",
                                  reason="pip install tensorboard (the dev extra)")
plugin_data = pytest.importorskip("tensorboard.plugins.hparams.plugin_data_pb2")


def _read(run: Path) -> accumulator.EventAccumulator:
    ea = accumulator.EventAccumulator(str(run), size_guidance={accumulator.SCALARS: 0})
    ea.Reload()
    return ea


def _hparams(ea: accumulator.EventAccumulator) -> dict[str, plugin_data.HParamsPluginData]:
    return {k: plugin_data.HParamsPluginData.FromString(v) for k, v in ea.PluginTagToContent("hparams").items()}


@pytest.fixture()
def exported(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, str]]:
    db = Database(database_url)
    db.migrate()
    ids = small_sweep(db)
    # a resume that re-reported steps 150..199: the second attempt's values win there
    over = add_trial(db, "web-test-1", 12, "exp_overlap", {"lr": 0.004, "opt": "adam", "layers": 5},
                     metrics={"val_loss": 0.9}, attempt=2, preemptions=1)
    add_points(db, "web-test-1", [(over, 1, s, "val_loss", 10.0 + s) for s in range(200)]
               + [(over, 2, s, "val_loss", 1.0 / (1 + s)) for s in range(150, 260)])
    ids["exp_overlap"] = over
    db.close()
    monkeypatch.setenv("SPOTSWEEP_DATABASE_URL", database_url)
    out = tmp_path / "tb"
    assert main(["export", "tensorboard", "web-test", str(out)]) == 0  # by name: the newest sweep called so
    return out, ids


def test_one_run_per_trial_with_scalars_by_step_and_attempts_merged(exported: tuple[Path, dict[str, str]]) -> None:
    out, ids = exported
    runs = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert len(runs) == len(ids)
    assert runs == sorted(tb.run_name(i, name) for name, i in ids.items())
    assert tb.run_name(ids[HOSTILE], HOSTILE) == "script_alert_1_script-3"  # a safe folder name

    over = _read(out / tb.run_name(ids["exp_overlap"], "exp_overlap"))
    loss = {e.step: e.value for e in over.Scalars("val_loss")}
    assert sorted(loss) == list(range(260))  # one value per step
    assert loss[100] == 110.0 and loss[150] == pytest.approx(1 / 151) and loss[259] == pytest.approx(1 / 260)
    assert [e.value for e in over.Scalars("final/val_loss")] == [pytest.approx(0.9)]

    nan = _read(out / tb.run_name(ids["exp_nan"], "exp_nan"))
    values = {e.step: e.value for e in nan.Scalars("val_loss")}
    assert values[10] == 3.0 and math.isnan(values[60])
    assert math.isinf(nan.Scalars("final/train_loss")[0].value)

    running = _read(out / tb.run_name(ids["exp_running"], "exp_running"))
    assert len(running.Scalars("val_loss")) == 50


def test_params_and_final_metrics_reach_the_hparams_plugin(exported: tuple[Path, dict[str, str]]) -> None:
    out, ids = exported
    assert not list(out.glob("events.out.tfevents.*"))  # no event file in DIR itself: TensorBoard shows no "." run
    experiment = _hparams(_read(out / tb.run_name(ids["exp_000"], "exp_000")))["_hparams_/experiment"].experiment
    assert sorted(h.name for h in experiment.hparam_infos) == ["layers", "lr", "opt"]
    assert sorted(m.name.tag for m in experiment.metric_infos) == ["final/train_loss", "final/val_loss"]

    run = _hparams(_read(out / tb.run_name(ids["exp_002"], "exp_002")))
    start = run["_hparams_/session_start_info"].session_start_info
    assert start.hparams["lr"].number_value == pytest.approx(1e-3)
    assert start.hparams["opt"].string_value == "sgd" and start.hparams["layers"].number_value == 4
    assert run["_hparams_/session_end_info"].session_end_info.status == 1  # STATUS_SUCCESS

    failed = _hparams(_read(out / tb.run_name(ids["exp_failed"], "exp_failed")))
    assert failed["_hparams_/session_end_info"].session_end_info.status == 2  # STATUS_FAILURE


def test_a_folder_with_event_files_or_an_unknown_sweep_is_refused(exported: tuple[Path, dict[str, str]],
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = exported
    assert main(["export", "tensorboard", "web-test-1", str(out)]) == 2
    assert "already holds TensorBoard event files" in capsys.readouterr().err
    assert main(["export", "tensorboard", "nope", str(out.parent / "other")]) == 2
    assert "no sweep has the id or name 'nope'" in capsys.readouterr().err


def test_hparam_values_keep_one_type_per_column() -> None:
    rows = [{"trial_id": "s.0", "params": {"a": 1, "b": True, "c": "x", "d": [1, 2]}},
            {"trial_id": "s.1", "params": {"a": 2.5, "b": False, "c": 3}}]
    assert tb.hparam_values(rows) == {"s.0": {"a": 1.0, "b": True, "c": "x", "d": "[1, 2]"},
                                      "s.1": {"a": 2.5, "b": False, "c": "3"}}
    assert tb.tag("val loss") == "val_loss" and tb.tag("/a/b") == "a/b" and tb.tag("</script>") == "_/script_"


def test_without_tensorboardx_export_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from spotsweep.shared.errors import PermanentError

    monkeypatch.setitem(sys.modules, "tensorboardX.summary", None)  # an import of it raises ImportError
    with pytest.raises(PermanentError, match=r"pip install 'spotsweep\[results\]'"):
        tb.export(None, "any", tmp_path)  # type: ignore[arg-type]  # never reaches the database
