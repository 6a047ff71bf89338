"""Fresh RabbitMQ vhosts for tests, made and removed in batches.

A vhost per test keeps tests apart (queues start empty, nothing leaks), but
each ``rabbitmqctl`` call boots an Erlang VM (about 0.35 s here), and a vhost
took three of them: about a second per test, a minute and a half of the
suite. Here one ``import_definitions`` makes a batch of vhosts with the guest
user's permissions, and one ``eval`` deletes a batch of used ones.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid

BATCH = 24  # vhosts made at once (2-3 s); used ones are deleted 8 at a time, so dead letters do not pile up
DELETE_EVERY = 8


def rabbitmqctl(*args: str, stdin: str | None = None) -> str:
    return subprocess.run(["rabbitmqctl", "-q", *args], input=stdin, check=True, capture_output=True, text=True,
                          timeout=120).stdout


class VhostPool:
    """Hands out fresh vhosts named ``<prefix>-<n>``; :meth:`release` deletes them, in batches."""

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = prefix or f"spotsweep-test-{uuid.uuid4().hex[:8]}"
        self._free: list[str] = []
        self._used: list[str] = []
        self._made = 0

    def take(self) -> str:
        if not self._free:
            self._make(BATCH)
        return self._free.pop()

    def release(self, vhost: str) -> None:
        self._used.append(vhost)
        if len(self._used) >= DELETE_EVERY:
            self.flush()

    def flush(self) -> None:
        """Delete the used vhosts now (their queues, messages and any connection still open)."""
        used, self._used = self._used, []
        _delete(used)

    def close(self) -> None:
        self.flush()
        free, self._free = self._free, []
        _delete(free)

    def _make(self, n: int) -> None:
        names = [f"{self.prefix}-{self._made + i}" for i in range(n)]
        self._made += n
        defs = {"vhosts": [{"name": v} for v in names],
                "permissions": [{"user": "guest", "vhost": v, "configure": ".*", "write": ".*", "read": ".*"}
                                for v in names]}
        rabbitmqctl("import_definitions", stdin=json.dumps(defs))  # a file would be read by the node's own user
        for _ in range(300):  # the import may finish applying after the command returns: wait for guest's grants
            granted = rabbitmqctl("list_user_permissions", "guest")
            if all(f"\n{v}\t" in "\n" + granted for v in names):
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"RabbitMQ did not grant guest the test vhosts {names[0]}..{names[-1]} within 30 s")
        self._free.extend(reversed(names))


def _delete(vhosts: list[str]) -> None:
    if not vhosts:
        return
    names = ", ".join(f'<<"{v}">>' for v in vhosts)  # our own names: [a-z0-9-] only
    rabbitmqctl("eval", f"[rabbit_vhost:delete(V, <<\"spotsweep-tests\">>) || V <- [{names}]], ok.")
