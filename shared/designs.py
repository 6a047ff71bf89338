"""Space-filling designs behind ``strategy: subset`` and ``sampler: sobol``.

* :func:`balanced_subset`: ``n`` distinct points of a grid with ``sizes``
  levels per dimension, each level of each dimension used ``n // L`` or
  ``n // L + 1`` times (a Latin-hypercube-like, balanced design), and pairs of
  dimensions as even as a local search gets them (towards an orthogonal
  array of strength 2). Built from ``n`` and ``sizes`` alone, never from the
  grid: memory is O(n x dims) whatever the grid size, except for ``n`` over
  half the grid, where the design is the complement of a balanced design of
  the rest (then the grid is at most ``2n`` points).
* :func:`sobol_point`: point ``index`` of a scrambled Sobol' sequence, by
  fast-forwarding scipy's engine (no earlier points are kept).

Written by hand because no library builds balanced designs of arbitrary size
over mixed level counts (scipy's orthogonal-array LHS needs ``n = p**2``
for a prime ``p``; pyDOE's designs enumerate the grid). Deterministic for
``(sizes, n, seed)``: the RNG is seeded with a string (SHA-512 in
``random.seed``), stable across processes and Python versions.
"""

from __future__ import annotations

import functools
import itertools
import math
import random

Design = tuple[tuple[int, ...], ...]
_REPAIR_TRIES = 10_000  # swaps tried to make one duplicate row distinct
_IMPROVE_PER_ROW = 30  # local-search swaps per row (bounded, so a design stays fast to build)
_IMPROVE_MAX = 60_000


def _column(levels: int, n: int, rng: random.Random) -> list[int]:
    """``n`` level indexes, each level ``n // levels`` times plus one for a random few."""
    column = list(range(levels)) * (n // levels) + rng.sample(range(levels), n % levels)
    rng.shuffle(column)
    return column


@functools.lru_cache(maxsize=32)
def balanced_subset(sizes: tuple[int, ...], n: int, seed: int) -> Design:
    """``n`` distinct level-index tuples of the grid ``sizes``; see the module doc."""
    total = math.prod(sizes)
    if not 0 < n <= total:
        raise ValueError(f"a subset of {n} configurations does not fit a grid of {total}")
    rng = random.Random(f"spotsweep:subset:{seed}:{sizes}:{n}")
    if 2 * n > total:
        # Dense: drop a balanced design of the rest. Removing r_l <= ceil(m/L)
        # points of level l from the full grid (total/L each) leaves at least
        # floor(n/L), because L divides total.
        dropped = set(balanced_subset(sizes, total - n, seed)) if n < total else set()
        rows = [point for point in itertools.product(*(range(s) for s in sizes)) if point not in dropped]
        rng.shuffle(rows)  # any prefix of the trials is a spread-out sample too
        return tuple(rows)
    design = [list(row) for row in zip(*(_column(s, n, rng) for s in sizes))] if sizes else [[]]
    _make_distinct(design, rng)
    _even_out_pairs(design, sizes, rng)
    return tuple(tuple(row) for row in design)


def _make_distinct(design: list[list[int]], rng: random.Random) -> None:
    """Swap entries within columns (which keeps every column's balance) until rows differ."""
    seen: set[tuple[int, ...]] = set()
    dims = len(design[0])
    for r, row in enumerate(design):
        for _ in range(_REPAIR_TRIES):
            if tuple(row) not in seen:
                break
            j, s = rng.randrange(dims), rng.randrange(len(design))
            other = design[s]
            if s == r or other[j] == row[j]:
                continue
            new_row = (*row[:j], other[j], *row[j + 1:])
            new_other = (*other[:j], row[j], *other[j + 1:])
            if s < r:  # the other row is already in seen: it must stay distinct
                if new_other in seen or new_other == new_row:
                    continue
                seen.discard(tuple(other))
                seen.add(new_other)
            row[j], other[j] = other[j], row[j]
        else:
            raise RuntimeError("could not make the subset's rows distinct")  # not reached while n <= grid / 2
        seen.add(tuple(row))


def _even_out_pairs(design: list[list[int]], sizes: tuple[int, ...], rng: random.Random) -> None:
    """Local search on pair balance: accept a within-column swap of two rows when
    it lowers sum over dimension pairs of sum_ab count(a, b)^2 / expected (the
    chi-square distance from an orthogonal array) and keeps rows distinct."""
    n, dims = len(design), len(sizes)
    if dims < 2 or n < 4:
        return
    counts = {(j, k): [[0] * sizes[k] for _ in range(sizes[j])] for j in range(dims) for k in range(dims) if j != k}
    for row in design:
        for (j, k), table in counts.items():
            table[row[j]][row[k]] += 1
    weight = {(j, k): sizes[j] * sizes[k] / n for j, k in counts}
    seen = {tuple(row) for row in design}
    for _ in range(min(_IMPROVE_PER_ROW * n, _IMPROVE_MAX)):
        j, r, s = rng.randrange(dims), rng.randrange(n), rng.randrange(n)
        row, other = design[r], design[s]
        a, b = row[j], other[j]
        if a == b:
            continue
        delta = 0.0
        for k in range(dims):
            u, v = row[k], other[k]
            if k == j or u == v:
                continue
            t = counts[(j, k)]
            delta += weight[(j, k)] * (2 * (t[b][u] + t[a][v] - t[a][u] - t[b][v]) + 4)
        if delta >= 0:
            continue
        new_row = (*row[:j], b, *row[j + 1:])
        new_other = (*other[:j], a, *other[j + 1:])
        if new_row in seen or new_other in seen:
            continue
        seen -= {tuple(row), tuple(other)}
        seen |= {new_row, new_other}
        for k in range(dims):
            u, v = row[k], other[k]
            if k == j or u == v:
                continue
            jk, kj = counts[(j, k)], counts[(k, j)]
            jk[a][u] -= 1
            jk[b][v] -= 1
            jk[b][u] += 1
            jk[a][v] += 1
            kj[u][a] -= 1
            kj[v][b] -= 1
            kj[u][b] += 1
            kj[v][a] += 1
        row[j], other[j] = b, a


def sobol_point(dims: int, seed: int, index: int) -> list[float]:
    """Point ``index`` (0-based) of the scrambled Sobol' sequence of ``dims``
    dimensions seeded with ``seed``, each coordinate in [0, 1)."""
    from scipy.stats import qmc  # imported on use: only sobol needs scipy's import time

    if dims == 0:
        return []
    engine = qmc.Sobol(dims, scramble=True, rng=seed)  # ~1 ms; a fresh engine is thread safe
    if index:
        engine.fast_forward(index)
    return [float(u) for u in engine.random(1)[0]]
