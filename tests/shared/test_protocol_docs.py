"""docs/architecture.md's protocol is the code's: every queue, exchange, binding and message kind it names exists
(shared/topology.py, shared/messages.py), and every message kind and binding the code has is documented."""

from __future__ import annotations

import importlib.util
import re
import typing
from pathlib import Path

from spotsweep.shared import messages, topology

DOC = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
NAMES = {v for k, v in vars(topology).items() if k.isupper() and isinstance(v, str)}
BINDINGS = set(topology.LIFECYCLE_BINDINGS) | set(topology.COLLECTOR_BINDINGS)


def kinds() -> set[str]:
    """Every message kind the code declares (the ``kind`` literal of each message model)."""
    found = set()
    for model in vars(messages).values():
        if isinstance(model, type) and issubclass(model, messages.Envelope) and "kind" in model.model_fields:
            found.update(typing.get_args(model.model_fields["kind"].annotation))
    return found


def quoted(pattern: str) -> set[str]:
    return {m for m in re.findall(r"`([^`\s]+)`", DOC) if re.fullmatch(pattern, m)}


def test_every_queue_and_exchange_the_doc_names_exists() -> None:
    named = {n for n in quoted(r"spotsweep\.[a-z.]+[a-z]")
             if not n.startswith("spotsweep.trials.") and importlib.util.find_spec(".".join(n.split(".")[:2])) is None}  # not a module
    assert named - NAMES == set()


def test_every_binding_the_doc_names_exists_and_every_binding_is_documented() -> None:
    assert quoted(r"[a-z]+\.[a-z]+\.#") == BINDINGS


def test_every_message_kind_the_doc_names_exists_and_every_kind_is_documented() -> None:
    documented = {k for k in quoted(r"(trial|sweep|agent)\.[a-z]+") if k not in NAMES}
    documented |= {b.removesuffix(".#") for b in quoted(r"[a-z]+\.[a-z]+\.#")}  # a kind routed by its binding
    documented |= set(re.findall(r"`kind: ([a-z]+\.[a-z.]+)`", DOC))
    assert documented - kinds() == set(), "the doc names message kinds the code does not have"
    assert kinds() - documented - {"trial"} == set(), "message kinds docs/architecture.md does not name"
