"""The deterministic-failure rule compares errors with run-specific paths and ids blanked
(services/planner/same_error.py): real texts of two attempts, each from a run folder of its own."""

from __future__ import annotations

import pytest

from spotsweep.services.planner.decide import SweepState, TrialView, decide
from spotsweep.services.planner.same_error import normalised, same_error
from spotsweep.shared.messages import TrialFinished
from spotsweep.shared.states import TrialState

# `spotsweep train tinylm` resuming a checkpoint under other settings (attempt 2, then 3, each in
# its own run folder under the agent's --workdir, as services/agent/workspace.py names them).
REFUSAL = ("error: refusing to resume /var/lib/spotsweep/work/runs/p{pid}-ft_0003_a{n}-{k}/checkpoint/step-000000010.pt: "
           "it was written with other training settings (lr_horizon: 10 in the checkpoint, 300 now, warmup: 1 in the "
           "checkpoint, 30 now). Only --steps, evaluation/checkpoint/log cadence, early stopping, device and speed "
           "settings may change on resume; the lr horizon defaults to --steps; pass --lr-horizon explicitly to extend a "
           "run with more --steps")
TRACEBACK = ('Traceback (most recent call last):\n  File "{tmp}/run/train.py", line 12, in <module>\n'
             "    import flash_attn\nModuleNotFoundError: No module named 'flash_attn' (worker pid {pid}, attempt {n})")
PY_OBJECT = "TypeError: cannot pickle '_thread.lock' object <Lock at 0x{addr}> in run {run} of trial t-{trial}"


@pytest.mark.parametrize("a, b", [
    (REFUSAL.format(pid=4121, n=2, k=7), REFUSAL.format(pid=4121, n=3, k=8)),
    (REFUSAL.format(pid=4121, n=2, k=7), REFUSAL.format(pid=977, n=3, k=1)),  # another agent, on another node
    (TRACEBACK.format(tmp="/tmp/tmpk2j4_8xz", pid=311, n=1), TRACEBACK.format(tmp="/tmp/tmpq_vbnmwe", pid=4012, n=2)),
    (PY_OBJECT.format(addr="7f3a2c1d9e40", run="3f2b9c1e-8a4d-4c2e-9b1a-0d5e6f7a8b9c", trial="00a1b2c3d4e5"),
     PY_OBJECT.format(addr="7f11aa03bb10", run="9d0e1f2a-3b4c-4d5e-8f6a-7b8c9d0e1f2a", trial="00a1b2c3d4e5")),
])
def test_two_attempts_of_one_deterministic_failure_read_the_same(a: str, b: str) -> None:
    assert a != b and same_error(a, b), (normalised(a), normalised(b))


@pytest.mark.parametrize("a, b", [
    # another setting's value, another missing module, another line: another error
    (REFUSAL.format(pid=1, n=2, k=7), REFUSAL.format(pid=1, n=3, k=8).replace("300 now", "600 now")),
    (TRACEBACK.format(tmp="/tmp/tmpk2j4_8xz", pid=3, n=1),
     TRACEBACK.format(tmp="/tmp/tmpk2j4_8xz", pid=3, n=1).replace("flash_attn", "apex")),
    ("CUDA error: an illegal memory access was encountered", "NCCL error: unhandled system error"),
    ("loss is NaN at step 120", "loss is NaN at step 480"),
])
def test_errors_that_differ_outside_run_details_stay_different(a: str, b: str) -> None:
    assert not same_error(a, b), normalised(a)


def test_the_rule_fires_for_a_trainer_refusal_that_names_its_own_run_folder() -> None:
    """Before the fix the raw texts were compared: the run folder in the refusal differed, and the trial
    was retried until max_failures, failing the same way each time."""
    first, second = REFUSAL.format(pid=4121, n=2, k=7), REFUSAL.format(pid=4121, n=3, k=8)
    state = SweepState(max_concurrent=1, total_trials=1, next_index=1, in_flight=1, max_failures=3)
    trial = TrialView(TrialState.RUNNING, 3, failures=1, error=first, last_step=10)
    event = TrialFinished(sweep_id="s", trial_id="s.0", attempt=3, outcome="failed", failure="exit", error=second)
    d = decide(state, trial, event)
    assert d.update is not None and (d.update.state, d.update.failures) == (TrialState.FAILED, 2)
