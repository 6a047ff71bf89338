"""The chaos run, short form, as a test: CI runs it on every change.

It is a subprocess so that its servers and services live and die apart from
the test process; it prints its tables of what it injected and found.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# Its own RabbitMQ node, PostgreSQL cluster and moto server: it needs all three installed.
pytestmark = [pytest.mark.integration, pytest.mark.needs_rabbit, pytest.mark.needs_pg, pytest.mark.needs_s3]


@pytest.mark.timeout(900)
def test_a_sweep_survives_preemptions_node_losses_and_restarts_exactly() -> None:
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("chaos.py"))], capture_output=True, text=True,
                          timeout=880)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-20000:]
    assert "kill-broker" in proc.stdout and "kill-agent" in proc.stdout and "preempt" in proc.stdout
