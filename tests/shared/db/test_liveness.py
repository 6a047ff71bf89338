"""Every PostgreSQL connection gets TCP liveness settings unless the user set their own."""

from __future__ import annotations

from spotsweep.shared.db.liveness import LIVENESS, with_liveness


def test_keepalives_and_a_user_timeout_are_added_to_a_plain_url() -> None:
    assert with_liveness("postgresql://u@db/x", {}) == LIVENESS


def test_what_the_url_or_the_options_set_wins() -> None:
    got = with_liveness("postgresql://u@db/x?keepalives_idle=60", {"tcp_user_timeout": 0, "sslmode": "require"})
    assert "keepalives_idle" not in got  # libpq reads the URL's 60
    assert got["tcp_user_timeout"] == 0 and got["sslmode"] == "require" and got["keepalives_count"] == 3


def test_a_url_libpq_cannot_parse_is_left_to_connect_to_report() -> None:
    assert with_liveness("postgresql://u@db/x?nonsense_option=1", {"sslmode": "require"}) == {"sslmode": "require"}
