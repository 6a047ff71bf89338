"""Kubernetes quantities: ``memory: 32Gi`` and ``cpus: 500m`` in a spec or an agent flag.

Pure parsing and formatting, shared by the spec (``resources``), the agent's
``--cpus``/``--memory`` and the messages between them (bytes and cores).
Written here rather than imported: the one maintained parser
(``kubernetes.utils.parse_quantity``) comes with the whole Kubernetes client,
which the control plane and the agents otherwise never need.
"""

from __future__ import annotations

import re

_MEMORY = re.compile(r"(\d+(?:\.\d+)?|\.\d+)([KMGTPE]i?|k|m)?")
_FACTORS = {None: 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
            "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_CPUS = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(m?)")
# The least a container runtime takes: docker and podman refuse ``--cpus`` under 0.01 and ``--memory`` under
# 6 MiB, so a spec asking for less is refused when validated, not by the runtime on some node (issue 39).
MIN_CPUS = 0.01
MIN_MEMORY = 6 * 2**20


def memory_bytes(value: object) -> int | None:
    """Bytes of a memory quantity: ``32Gi``, ``256Mi``, ``1G``, or a whole number of bytes; None stays None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"must be a memory quantity such as 256Mi, 32Gi or 1G (got {value!r})")
    text = str(value).strip()
    match = _MEMORY.fullmatch(text)
    if match is None or match.group(2) == "m":
        raise ValueError(f"must be a memory quantity such as 256Mi, 32Gi or 1G (got {value!r})")
    size = int(float(match.group(1)) * _FACTORS[match.group(2)])
    if size <= 0:
        raise ValueError(f"must be more than 0 bytes (got {value!r})")
    return size


def cpu_cores(value: object) -> float | None:
    """Cores of a CPU quantity: ``8``, ``0.5`` or ``500m``; None stays None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"must be a number of cores such as 8, 0.5 or 500m (got {value!r})")
    match = _CPUS.fullmatch(str(value).strip())
    if match is None:
        raise ValueError(f"must be a number of cores such as 8, 0.5 or 500m (got {value!r})")
    cores = float(match.group(1)) / (1000 if match.group(2) else 1)
    if cores <= 0:
        raise ValueError(f"must be more than 0 cores (got {value!r})")
    return cores


def at_least(value: float, least: float, least_text: str, shown: object) -> float:
    """``value`` when it is at least ``least``; else a ValueError naming both (``shown``: what the spec wrote)."""
    if value < least:
        raise ValueError(f"must be at least {least_text}, the least docker and podman run with (got {shown!r})")
    return value


def human_bytes(size: int) -> str:
    """``268435456`` -> ``256 MiB``: how errors name a memory request."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= factor:
            return f"{size / factor:.4g} {unit}"
    return f"{size} B"
