"""Glob filters run in PostgreSQL and mean what they mean in a shell."""

from __future__ import annotations

import fnmatch

import psycopg
import pytest

from spotsweep.services.reporter.report import glob_to_similar

NAMES = ["deepseek_exp_001", "deepseek_exp_012", "deepseekXexp_1", "noop_03_x0_y-1", "a%b", "a_b", "run(1)", "x|y",
         "lr0.01", "lr0x01"]


@pytest.mark.parametrize("glob", ["deepseek_exp_*", "deepseek_exp_0?2", "noop_0[34]*", "*[!0-9]", "a%b", "a_b",
                                  "run(1)", "x|y", "lr0.01", "*"])
def test_glob_matches_like_fnmatch(database_url: str, glob: str) -> None:
    with psycopg.connect(database_url) as conn:
        got = {n for n in NAMES if conn.execute("SELECT %s SIMILAR TO %s", (n, glob_to_similar(glob))).fetchone()[0]}
    assert got == {n for n in NAMES if fnmatch.fnmatchcase(n, glob)}
