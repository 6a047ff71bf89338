"""Which services a test needs, from the fixtures it uses: the ``needs_*`` markers.

``make unit`` deselects every test marked ``needs_pg``, ``needs_rabbit`` or
``needs_s3`` and so must pass with none of them reachable; tests/conftest.py
sets the markers at collection from what each test asks for, so a new test
that takes ``database_url`` is marked without anyone remembering to.
"""

from __future__ import annotations

from collections.abc import Iterable

# The fixtures that reach each service (directly or through a cluster of processes).
SERVICE_FIXTURES = {
    "needs_rabbit": frozenset({"rabbit_vhost", "rabbit_url", "cluster", "private_rabbit"}),
    "needs_pg": frozenset({"database_url", "cluster"}),
    "needs_s3": frozenset({"s3_endpoint", "s3_env", "cluster"}),
}
# Contract suites parametrize their backend and fetch its fixture at run time
# (request.getfixturevalue), out of pytest's sight: the parameter names it.
SERVICE_PARAMS = {"needs_rabbit": "rabbit", "needs_pg": "postgres", "needs_s3": "s3"}
SERVICE_MARKERS = frozenset(SERVICE_FIXTURES)


def service_markers(fixtures: Iterable[str], params: Iterable[object] = ()) -> list[str]:
    """The ``needs_*`` markers of a test using ``fixtures`` (the closure pytest
    computed) with parametrized backends ``params``; sorted."""
    used, chosen = set(fixtures), set(params)
    return sorted(marker for marker, names in SERVICE_FIXTURES.items() if used & names or SERVICE_PARAMS[marker] in chosen)
