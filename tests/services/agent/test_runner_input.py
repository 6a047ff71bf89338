"""A trial that abuses its files or its limits: the run ends, its good points get
through, what was skipped is in the final event. Real child processes."""

from __future__ import annotations

import json
import math
import resource
from typing import Any

from spotsweep.shared.artifacts.checkpoints import log_key, upload_checkpoint
from spotsweep.shared.limits import Limits
from spotsweep.shared.messages import TrialMessage, TrialMetrics

WRITE = """
import json, os
path = os.environ["SPOTSWEEP_METRICS"]
def raw(text):
    with open(path, "ab") as f:
        f.write(text if isinstance(text, bytes) else text.encode())
"""


def points(events: list[Any]) -> dict[tuple[int, str], float]:
    """The trial's own points (not the agent's sys/ samples)."""
    return {(p.step, p.name): p.value for e in events if isinstance(e, TrialMetrics) for p in e.points
            if not p.name.startswith("sys/")}


def test_lines_over_the_limits_are_skipped_and_counted(kit: Any) -> None:
    script = WRITE + r"""
raw('{"step": 1, "loss": 1.0}\n')
raw('{"step": 2, "%s": 1}\n' % ("n" * 10_000))
raw('{"step": 3, "a\\u0000b": 1}\n')
raw('{"step": 4, "m1": 1, "m2": 2}\n')   # the second and third distinct names (limit 3)
raw('{"step": 5, "m3": 3}\n')            # a fourth: skipped
raw('{"step": 6, "loss": 0.5}\n')
"""
    final, events = kit.run(kit.message(script, limits=Limits(metric_names=3)))
    assert final.outcome == "completed"
    assert points(events) == {(1, "loss"): 1.0, (4, "m1"): 1.0, (4, "m2"): 2.0, (6, "loss"): 0.5}
    assert final.metrics == {"loss": 0.5, "m1": 1.0, "m2": 2.0}
    assert final.flags == ["skipped_lines"]
    assert final.warnings[0].startswith("skipped 1 line: metric name is 10000 characters long (limit 200)")
    assert "(first at line 2)" in final.warnings[0]
    assert "control character" in final.warnings[1] and "(first at line 3)" in final.warnings[1]
    assert "would make 4 distinct names" in final.warnings[2] and "(first at line 5)" in final.warnings[2]


def test_a_flood_of_lines_is_rate_limited_not_fatal(kit: Any) -> None:
    script = WRITE + r"""
raw("".join('{"step": %d, "loss": 1}\n' % i for i in range(2000)))
"""
    final, events = kit.run(kit.message(script, limits=Limits(lines_per_second=10.0, line_burst=100)))
    assert final.outcome == "completed" and "rate_limited" in final.flags
    assert 100 <= len(points(events)) < 200
    assert final.warnings[0].startswith("skipped ")


def test_a_trial_that_swaps_its_metrics_file_for_a_fifo_ends_on_time(kit: Any) -> None:
    script = WRITE + r"""
import time
raw('{"step": 1, "loss": 1.0}\n')
time.sleep(0.3)
os.unlink(path)
os.mkfifo(path)
time.sleep(1)
"""
    # Completed, not cut off by its 30 s timeout: reading the FIFO never blocked the runner.
    final, events = kit.run(kit.message(script, total_timeout=30.0))
    assert final.outcome == "completed" and points(events) == {(1, "loss"): 1.0}
    assert final.flags == ["metrics_refused"] and "FIFO" in final.warnings[0]


def test_a_1_gib_sparse_metrics_file_costs_the_agent_no_memory(kit: Any) -> None:
    script = WRITE + r"""
raw('{"step": 1, "loss": 1.0}\n')
with open(path, "ab") as f:
    f.truncate(1 << 30)
"""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    final, events = kit.run(kit.message(script))
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 32 * 1024, grown_kib  # the old reader took the whole gibibyte
    assert final.outcome == "completed" and points(events) == {(1, "loss"): 1.0}
    assert final.flags == ["skipped_lines"] and "limits.line_bytes" in final.warnings[0]


def test_an_empty_command_fails_clearly(kit: Any) -> None:
    msg = kit.message("").model_copy(update={"argv": []})
    final, _ = kit.run(msg)
    assert final.outcome == "failed" and "command is empty" in final.error
    final, _ = kit.run(kit.message("").model_copy(update={"argv": [""]}))
    assert final.outcome == "failed" and "command is empty" in final.error and final.failure == "refused"


def test_a_command_that_is_not_there_is_a_refusal_not_the_nodes_fault(kit: Any) -> None:
    final, _ = kit.run(kit.message("").model_copy(update={"argv": ["/no/such/program", "--lr", "1"]}))
    assert final.outcome == "failed" and final.failure == "refused"
    assert "cannot start '/no/such/program'" in final.error


def test_a_checkpoint_that_cannot_be_restored_fails_the_attempt_clearly(kit: Any, tmp_path: Any) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "a").write_text("x")
    uri = upload_checkpoint(kit.store, "sw", "sw.0", 5, ckpt)
    folder = uri.rstrip("/").rsplit("/", 1)[1]
    kit.store.put_bytes(f"sweeps/sw/trials/sw.0/checkpoints/{folder}/MANIFEST",
                        json.dumps({"step": 5, "files": {"a": 1, "a/b": 1}}).encode())
    final, events = kit.run(kit.message("print('ran')", attempt=2))
    assert final.outcome == "failed" and final.failure == "refused"
    assert "cannot be restored" in final.error and "names both 'a' and 'a/b'" in final.error
    assert final.started is None  # nothing ran


def test_logs_are_cut_to_their_last_log_bytes(kit: Any) -> None:
    script = "import sys\nsys.stdout.write('o' * 3_000_000 + 'END-OUT')\nsys.stderr.write('e' * 100 + 'END-ERR')"
    final, _ = kit.run(kit.message(script, limits=Limits(log_bytes=1 << 20)))
    assert final.outcome == "completed" and final.flags == ["log_truncated"]
    assert "dropped the first" in final.warnings[0] and "stdout" in final.warnings[0]
    out = kit.store.get_bytes(log_key("sw", "sw.0", 1, "stdout"))
    err = kit.store.get_bytes(log_key("sw", "sw.0", 1, "stderr"))
    assert out.startswith(b"[spotsweep: the first ") and out.endswith(b"END-OUT")
    assert len(out) + len(err) < (1 << 20) + 200 and err.endswith(b"END-ERR") and len(err) == 107


def test_a_stderr_swapped_for_a_fifo_does_not_hang_the_failure_report(kit: Any) -> None:
    script = ("import os, sys\nsys.stderr.write('boom\\n'); sys.stderr.flush()\n"
              "p = os.path.join(os.path.dirname(os.environ['SPOTSWEEP_METRICS']), 'stderr.log')\n"
              "os.unlink(p); os.mkfifo(p); sys.exit(3)")
    final, _ = kit.run(kit.message(script))  # a hang would end in the test's timeout
    assert final.outcome == "failed" and "boom" in final.error


def test_a_non_finite_final_metric_is_flagged(kit: Any) -> None:
    script = WRITE + r"""
raw('{"step": 1, "loss": NaN, "acc": "Infinity"}\n')
"""
    final, events = kit.run(kit.message(script))
    assert final.outcome == "completed" and final.flags == ["nan"]
    assert math.isnan(final.metrics["loss"]) and final.metrics["acc"] == math.inf
    assert math.isnan(points(events)[(1, "loss")])
    again = TrialMessage.model_validate_json(kit.message("").model_dump_json())  # the wire keeps limits
    assert again.limits == Limits()

