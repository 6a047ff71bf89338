"""Held-out objectives for the search benchmark: learning curves as plain functions of (config, step).

Standard library only: the Ray Tune peer imports this module in its own
virtualenv (bench/search_ray.py), where spotsweep is not installed, so every
method sees exactly the same numbers. Neither objective was used while
tuning spotsweep's search code (that was the curve model and the power law
in bench/search.py).

- ``saturating``: every config its own exponential curve ``a + b·exp(-t/tau)``,
  with ``a``, ``b`` and ``tau`` drawn per (config, seed) and ``tau`` up to 30
  steps: slow starters with low floors make early rankings misleading, and
  the params carry no information (a model-based sampler cannot help).
- ``surface``: a structured surface, as in LCBench-style surrogates: the
  final loss is a bowl over log-lr, batch, depth and weight decay (the best
  lr grows with the batch), deeper nets learn more slowly towards a lower
  floor (so curves cross), a per-(config, seed) offset moves the optimum,
  and the largest lr with the smallest batch and no weight decay diverges
  after a few steps.

- ``hartmann3``: a continuous one (``x0..x2`` in [0, 1], budgets 3/9/27):
  the Hartmann 3 function with the first ``alpha`` lowered by ``0.1·(1 - z)``
  at fidelity ``z = t / 27`` (Kandasamy et al.'s multi-fidelity form) plus a
  bias ``0.5·(1 - z)²·(1 + sin 7·x0)`` that makes low budgets mislead;
  ``HARTMANN3_MIN`` is its optimum at ``z = 1``.

Observed values add Gaussian noise (sd ``NOISE``), fixed per (objective,
seed, config, step): the same trial step reads the same value in every
method and process.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from typing import Any

NOISE = 0.02
MIN_T, MAX_T, ETA = 3, 27, 3  # budgets 3/9/27: the rungs
GRID81: dict[str, list[Any]] = {
    "lr": [1e-3, 3e-3, 1e-2],
    "batch": [32, 128, 512],
    "depth": [2, 6, 12],
    "wd": [0.0, 1e-4, 1e-2],
}  # 81 configs; the full grid costs 81 * 27 = 2,187 steps


def key(config: dict[str, Any]) -> str:
    """A config's canonical name (the grid's key order)."""
    return ",".join(f"{k}={config[k]!r}" for k in GRID81)


def saturating(config: dict[str, Any], t: int, seed: int) -> float:
    rng = random.Random(f"sat:{seed}:{key(config)}")
    a, b, tau = rng.uniform(0.5, 1.5), rng.uniform(0.5, 2.5), math.exp(rng.uniform(0.0, math.log(30.0)))
    return a + b * math.exp(-t / tau)


def surface(config: dict[str, Any], t: int, seed: int) -> float:
    u_lr = math.log10(config["lr"]) + 2.5  # -0.5 .. 0.5
    u_b = math.log2(config["batch"] / 128) / 2  # -1 .. 1
    u_d = (config["depth"] - 6) / 6  # -0.67 .. 1
    floor = 0.3 + 0.8 * (u_lr - 0.25 * u_b - 0.1) ** 2 + 0.15 * (u_d - 0.3) ** 2
    floor += {0.0: 0.04 * config["depth"] / 12, 1e-4: 0.0, 1e-2: 0.03 + 0.04 * (u_lr + 0.5)}[config["wd"]]
    floor += random.Random(f"surf:{seed}:{key(config)}").uniform(0.0, 0.06)
    rate = 0.12 * (1 + 2 * (u_lr + 0.5)) / (1 + 0.6 * (u_d + 0.67))
    if config["lr"] >= 1e-2 and config["batch"] == 32 and config["wd"] == 0.0 and t > 5:
        return 3.0  # diverged
    return floor + (2.5 - floor) * (1 + rate * t) ** -1.3


_A3 = ((3.0, 10.0, 30.0), (0.1, 10.0, 35.0), (3.0, 10.0, 30.0), (0.1, 10.0, 35.0))
_P3 = ((0.3689, 0.1170, 0.2673), (0.4699, 0.4387, 0.7470), (0.1091, 0.8732, 0.5547), (0.0381, 0.5743, 0.8828))
HARTMANN3_MIN = -3.86278


def hartmann3(config: dict[str, Any], t: int, seed: int) -> float:
    x, z = [config[f"x{j}"] for j in range(3)], t / MAX_T
    alpha = (1.0 - 0.1 * (1 - z), 1.2, 3.0, 3.2)
    value = -sum(a * math.exp(-sum(A * (xj - P) ** 2 for A, xj, P in zip(row, x, centre)))
                 for a, row, centre in zip(alpha, _A3, _P3))
    return value + 0.5 * (1 - z) ** 2 * (1 + math.sin(7 * x[0]))


# The grid objectives (the peers search GRID81 on each); hartmann3 is bench/search.py --continuous's.
OBJECTIVES: dict[str, Callable[[dict[str, Any], int, int], float]] = {"saturating": saturating, "surface": surface}


def observe(objective: str, config: dict[str, Any], t: int, seed: int) -> float:
    """What a trial of ``config`` reports at step ``t``: the curve plus fixed noise."""
    noise = random.Random(f"noise:{objective}:{seed}:{key(config)}:{t}").gauss(0.0, NOISE)
    return OBJECTIVES[objective](config, t, seed) + noise


def grid() -> list[dict[str, Any]]:
    return [dict(zip(GRID81, values)) for values in itertools.product(*GRID81.values())]


def optimum(objective: str, seed: int) -> tuple[str, float]:
    """The config best at ``MAX_T`` without noise, and its value."""
    best = min(grid(), key=lambda c: OBJECTIVES[objective](c, MAX_T, seed))
    return key(best), OBJECTIVES[objective](best, MAX_T, seed)


def regret(objective: str, seed: int, picked: dict[str, Any] | None) -> float | None:
    """The picked config's true final value minus the optimum's; None: nothing was picked."""
    if picked is None:
        return None
    return OBJECTIVES[objective](picked, MAX_T, seed) - optimum(objective, seed)[1]
