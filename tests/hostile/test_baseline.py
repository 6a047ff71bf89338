"""The hostile suite's own checks: they pass on clean data and catch what they are for."""

from __future__ import annotations

from pathlib import Path

import pytest
from hostile import Hostile, check_csv


@pytest.mark.integration
def test_a_clean_sweep_passes_every_check(hostile: Hostile) -> None:
    hostile.assert_bystander_complete()
    hostile.assert_outputs_clean()
    assert hostile.dead_letters() == []


@pytest.mark.parametrize("cell", ["=HYPERLINK(\"http://x\",\"y\")", "+1+2", "-2+3", "@SUM(A1)", "\tx", "a\x1b[2J"])
def test_csv_check_catches_formulas_and_escapes(tmp_path: Path, cell: str) -> None:
    path = tmp_path / "x.csv"
    path.write_text(f"name,value\r\n\"{cell}\",1\r\n")
    with pytest.raises(AssertionError):
        check_csv(path)


@pytest.mark.parametrize("cell", ["-1.5", "1e-3", "'=HYPERLINK(x)", "plain"])
def test_csv_check_accepts_numbers_and_neutralised_cells(tmp_path: Path, cell: str) -> None:
    path = tmp_path / "x.csv"
    path.write_text(f"name,value\r\n\"{cell}\",1\r\n")
    check_csv(path)
