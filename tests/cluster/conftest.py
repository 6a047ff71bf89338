"""The ``site`` fixture: hosts in network namespaces with private servers (netsite.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # netsite, for this folder's tests
from netns import NetnsUnavailable  # noqa: E402
from netsite import Site, open_site  # noqa: E402


@pytest.fixture()
def site(tmp_path: Path) -> Iterator[Site]:
    """A site of hosts on a private network; skipped, saying why, where namespaces cannot be made."""
    try:
        with open_site(tmp_path) as s:
            yield s
    except NetnsUnavailable as e:
        pytest.skip(f"multi-host test skipped: {e}")
