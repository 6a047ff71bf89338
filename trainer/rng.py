"""Every random number generator a run touches: seeded together, saved and restored together.

Python's ``random``, NumPy's global generator and torch's CPU and CUDA
generators. Data order does not depend on them (batches are a function of
(seed, step), see ``data.py``), but dropout and any user code do, so an exact
resume restores all four. States are stored as plain lists and tensors so a
checkpoint loads with ``torch.load(weights_only=True)``, which runs no pickled
code.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

MAX_SEED = 2**31 - 1


def seed_all(seed: int) -> None:
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be between 0 and {MAX_SEED} (got {seed})")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds every CUDA device too


def capture() -> dict[str, Any]:
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)  # type: ignore[misc]
    return {
        "python": [version, list(internal), gauss],
        "numpy": [kind, torch.from_numpy(np.asarray(keys, dtype=np.int64)), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def restore(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        # A checkpoint from a node with more GPUs restores the devices this one has.
        count = min(len(state["cuda"]), torch.cuda.device_count())
        torch.cuda.set_rng_state_all(state["cuda"][:count])
