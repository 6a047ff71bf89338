"""The ``hostile`` fixture: the services running beside a clean bystander sweep
(see tests/support/hostile.py, which test modules import as ``hostile``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import Cluster
from hostile import Hostile


@pytest.fixture()
def hostile(cluster: Cluster, database_url: str, rabbit_url: str, tmp_path: Path) -> Iterator[Hostile]:
    h = Hostile(cluster, database_url, rabbit_url, tmp_path)
    h.start()
    yield h
