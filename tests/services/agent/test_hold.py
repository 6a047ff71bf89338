"""The agent's hold on its running attempts (services/agent/hold.py): the keeper's pure decision, a run's
view of a lapse it lived through, and the watchdog killing a trial whose lease ran out (issue 39, item 5)."""

from __future__ import annotations

import subprocess
import sys
import time

from waiting import alive, wait_until
from spotsweep.services.agent import hold
from spotsweep.services.agent.hold import Hold, HoldState, step
from spotsweep.services.agent.watchdog import Watchdog

LEASE, WINDOW = 2.0, 6.0


def test_a_broker_heard_within_the_window_renews() -> None:
    state, verdict = step(HoldState(), now=10.0, heard=5.0, lease=LEASE, window=WINDOW)
    assert verdict == "renew" and state.renewed == 10.0


def test_a_broker_unheard_too_long_does_not_renew_and_the_lease_then_lapses() -> None:
    state, verdict = step(HoldState(renewed=9.0), now=10.0, heard=3.0, lease=LEASE, window=WINDOW)
    assert verdict == "wait" and state.renewed == 9.0
    state, verdict = step(state, now=11.5, heard=3.0, lease=LEASE, window=WINDOW)
    assert verdict == "lapsed" and state.renewed is None and state.lapses == 1


def test_a_keeper_that_wakes_past_its_lease_sees_a_lapse_though_the_broker_was_just_heard() -> None:
    """A frozen agent (SIGSTOP): on waking its I/O thread may read the broker's bytes first; still a lapse."""
    state, verdict = step(HoldState(renewed=10.0), now=40.0, heard=39.9, lease=LEASE, window=WINDOW)
    assert verdict == "lapsed"
    # ... and only a broker heard after the lapse (the next connection) renews it again.
    assert step(state, now=40.1, heard=39.9, lease=LEASE, window=WINDOW)[1] == "wait"
    assert step(state, now=41.0, heard=40.5, lease=LEASE, window=WINDOW)[1] == "renew"


def test_no_lease_before_the_broker_is_heard() -> None:
    assert step(HoldState(), now=10.0, heard=None, lease=LEASE, window=WINDOW)[1] == "wait"


def test_an_unarmed_hold_always_holds() -> None:
    """Local mode and tests run no keeper: nothing changes for them."""
    h = Hold()
    assert h.held(h.mark())


def test_a_run_that_lived_through_a_lapse_is_not_held(monkeypatch) -> None:
    now = [100.0]
    monkeypatch.setattr(hold, "clock", lambda: now[0])
    h = Hold()
    assert h.look(0.0, LEASE, WINDOW) == "renew"
    mark = h.mark()
    now[0] += 1.0
    assert h.held(mark)
    now[0] += 30.0  # frozen: the keeper has not looked yet, the run asks first
    assert not h.held(mark)
    assert h.look(0.0, LEASE, WINDOW) == "lapsed"  # the keeper wakes
    assert not h.held(mark)
    now[0] += 1.0
    assert h.look(0.0, LEASE, WINDOW) == "renew"  # the next connection: a new run is held, the old one still not
    assert h.held(h.mark()) and not h.held(mark)


def test_the_watchdog_kills_a_trial_whose_lease_ran_out_and_spares_one_renewed() -> None:
    dog = Watchdog()
    trial = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        dog.add(trial.pid)
        renewed_until = time.monotonic() + 2.0
        while time.monotonic() < renewed_until:  # renewed every 0.1 s for 2 s: alive throughout
            dog.renew(0.5)
            time.sleep(0.1)
            assert trial.poll() is None
        assert wait_until(lambda: trial.poll() is not None, timeout=10), "the lease ran out and the trial lived"
        assert not alive(trial.pid)
    finally:
        trial.kill()
        trial.wait()
        dog.close()


def test_a_checkpoint_whose_run_lost_its_hold_mid_upload_is_not_committed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The frozen agent wakes with an upload in flight: its files may land, LATEST stays where the next run left it."""
    from spotsweep.services.agent import uploads
    from spotsweep.shared.artifacts.checkpoints import latest_checkpoint
    from spotsweep.shared.artifacts.local import LocalArtifactStore
    from spotsweep.shared.messages import TrialMessage

    store = LocalArtifactStore(tmp_path / "store")
    msg = TrialMessage(sweep_id="sw", trial_id="sw.0", attempt=1, trial_name="t0", index=0, params={},
                       argv=["true"], metric="loss")

    def staged(step: int):  # type: ignore[no-untyped-def]
        folder = tmp_path / f"stage-{step}"
        folder.mkdir()
        (folder / "state").write_text(str(step))
        return folder

    assert uploads.checkpoint(store, msg, 5, staged(5), cancel=lambda: False) is not None

    def lapsed_once_the_folder_is_complete() -> bool:  # held while the files go up, lapsed when LATEST would move
        return any((tmp_path / "store").rglob("000000000009-*/MANIFEST"))

    assert uploads.checkpoint(store, msg, 9, staged(9), cancel=lapsed_once_the_folder_is_complete) is None
    assert latest_checkpoint(store, "sw", "sw.0") == 5
