"""A failed connect to PostgreSQL names where it tried: only the password is masked (issue 31)."""

from __future__ import annotations

import pytest

from spotsweep.shared.db import Database
from spotsweep.shared.errors import RetryableError
from servers import free_port


def _refused(url: str) -> str:
    with pytest.raises(RetryableError) as caught:
        with Database(url, connect_timeout=5).transaction():
            pass
    return str(caught.value)


def test_a_refused_connect_shows_the_host_port_and_database() -> None:
    port = free_port()  # nothing listens there
    for url in (f"postgresql://postgres@127.0.0.1:{port}/sweeps", f"host=127.0.0.1 port={port} dbname=sweeps"):
        text = _refused(url)
        assert "***" not in text, text
        assert '"127.0.0.1", port' in text and str(port) in text and "sweeps" in text, text


def test_a_refused_connect_masks_the_password_and_nothing_else() -> None:
    port = free_port()
    text = _refused(f"postgresql://postgres:hunter2@127.0.0.1:{port}/sweeps")
    assert "hunter2" not in text
    assert f"postgresql://postgres:***@127.0.0.1:{port}/sweeps" in text and f'"127.0.0.1", port {port}' in text, text
