"""The needs_* markers that let ``make unit`` run with no service reachable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from markers import service_markers

ROOT = Path(__file__).resolve().parents[1]


def test_each_service_fixture_marks_what_it_reaches() -> None:
    assert service_markers(["tmp_path", "database_url"]) == ["needs_pg"]
    assert service_markers(["rabbit_url"]) == ["needs_rabbit"]
    assert service_markers(["s3_env", "monkeypatch"]) == ["needs_s3"]
    assert service_markers(["cluster"]) == ["needs_pg", "needs_rabbit", "needs_s3"]
    assert service_markers(["tmp_path"]) == []


def test_a_contract_suites_backend_parameter_marks_it() -> None:
    assert service_markers(["connect"], ["rabbit"]) == ["needs_rabbit"]
    assert service_markers(["store"], ["s3"]) == ["needs_s3"]
    assert service_markers(["repos"], ["postgres"]) == ["needs_pg"]
    assert service_markers(["connect"], ["memory"]) == []


def test_collection_marks_a_database_test_and_leaves_a_pure_one_to_make_unit() -> None:
    """What `make unit` selects, as pytest collects it: no test of the collector's
    database path, every test of a pure module."""
    unit = "not needs_pg and not needs_rabbit and not needs_s3"
    out = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "-m", unit,
                          "tests/services/collector/test_collector.py", "tests/test_markers.py"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120).stdout
    assert "test_collector.py::" not in out
    assert "test_markers.py::test_each_service_fixture_marks_what_it_reaches" in out
