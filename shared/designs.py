"""Space-filling designs behind ``strategy: subset`` and ``sampler: sobol``.

* :func:`balanced_subset`: ``n`` distinct points of a grid with ``sizes``
  levels per dimension, each level of each dimension used ``n // L`` or
  ``n // L + 1`` times (a Latin-hypercube-like, balanced design), and pairs of
  dimensions as even as a local search gets them (towards an orthogonal
  array of strength 2). Built from ``n`` and ``sizes`` alone, never from the
  grid: memory is O(n x dims) whatever the grid size, except for ``n`` over
  half the grid, where the design is the complement of a balanced design of
  the rest (then the grid is at most ``2n`` points).
* :func:`extend_subset`: a design already run, grown to ``n`` rows (``spotsweep
  extend``): its rows stay first and unchanged, the new ones are drawn with
  per-level quotas so that the whole is as balanced as a design of ``n``
  rows, and distinct from every row before them.
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
import threading

from spotsweep.shared.permutation import IndexPermutation

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


@functools.lru_cache(maxsize=32)
def extend_subset(sizes: tuple[int, ...], rows: Design, n: int, seed: int) -> Design:
    """``rows`` (distinct, already run) followed by ``n - len(rows)`` new distinct
    rows, each level of each dimension used ``n // L`` or ``n // L + 1`` times
    over all ``n`` whenever ``rows`` was itself that balanced for its size.

    Each column of the new rows gets the quota that tops its levels up to that
    balance (the levels already used one time more than ``n // L`` count among
    the ``n % L`` that get one more), the rows are made distinct from each
    other and from ``rows`` by swaps within new columns and by moving an entry
    between two levels whose counts are ``n // L + 1`` and ``n // L`` (neither
    breaks the balance), and pairs are evened out among the new rows. When no
    distinct rows can be found that way (a design covering much of its grid),
    the new rows are those of :func:`balanced_subset` of size ``n`` not in
    ``rows``: distinct, but only as balanced as that allows.
    """
    prev = len(rows)
    if not prev <= n <= math.prod(sizes):
        raise ValueError(f"a subset of {prev} configurations cannot grow to {n} in a grid of {math.prod(sizes)}")
    if n == prev:
        return rows
    rng = random.Random(f"spotsweep:subset-extend:{seed}:{sizes}:{prev}:{n}")
    columns = [_topped_column(levels, [row[j] for row in rows], n, rng) for j, levels in enumerate(sizes)]
    design = [list(row) for row in rows] + [list(row) for row in zip(*columns)] if sizes else [[] for _ in range(n)]
    try:
        _make_distinct(design, rng, start=prev, sizes=sizes)
    except RuntimeError:
        taken = set(rows)
        return rows + tuple(row for row in balanced_subset(sizes, n, seed) if row not in taken)[:n - prev]
    _even_out_pairs(design, sizes, rng, start=prev)
    return tuple(tuple(row) for row in design)


def _topped_column(levels: int, used: list[int], n: int, rng: random.Random) -> list[int]:
    """The entries ``n - len(used)`` new rows need in one column so that every
    level is used ``n // levels`` or ``n // levels + 1`` times in all."""
    base, extra = divmod(n, levels)
    counts = [used.count(level) for level in range(levels)]
    # Levels already past the base must be among the ``extra`` ones; the rest at random.
    order = sorted(range(levels), key=lambda level: (-min(counts[level], base + 1), rng.random()))
    target = [base + (1 if level in order[:extra] else 0) for level in range(levels)]
    column = [level for level in range(levels) for _ in range(max(0, target[level] - counts[level]))]
    while len(column) < n - len(used):  # only if ``used`` was not balanced: top up the least used levels
        column.append(min(range(levels), key=lambda level: counts[level] + column.count(level)))
    rng.shuffle(column)
    return column[:n - len(used)]


def _make_distinct(design: list[list[int]], rng: random.Random, start: int = 0,
                   sizes: tuple[int, ...] | None = None) -> None:
    """Swap entries within columns (which keeps every column's balance) until
    rows differ; rows before ``start`` are fixed (and taken). With ``sizes``,
    an entry may also move from a level used ``n // L + 1`` times to one used
    ``n // L`` times, which keeps the balance too."""
    seen: set[tuple[int, ...]] = {tuple(row) for row in design[:start]}
    dims = len(design[0])
    n = len(design)
    counts = [[sum(1 for row in design if row[j] == level) for level in range(size)] for j, size in enumerate(sizes or ())]
    for r in range(start, n):
        row = design[r]
        for _ in range(_REPAIR_TRIES):
            if tuple(row) not in seen:
                break
            if sizes and rng.random() < 0.5:
                j = rng.randrange(dims)
                _relevel(row, j, counts[j], n // sizes[j], rng)
            else:
                _swap_with_any(design, seen, r, start, rng)
        else:
            raise RuntimeError("could not make the subset's rows distinct")  # for a new design, not reached while n <= grid / 2
        seen.add(tuple(row))


def _relevel(row: list[int], j: int, counts: list[int], base: int, rng: random.Random) -> None:
    """Move ``row``'s entry in column ``j`` from a level used ``base + 1`` times to a random one used ``base``
    times (``counts``: the column's uses per level, kept up to date); the column stays balanced."""
    if counts[row[j]] != base + 1:
        return
    lower = [level for level, used in enumerate(counts) if used == base]
    if lower:
        level = rng.choice(lower)
        counts[row[j]] -= 1
        counts[level] += 1
        row[j] = level


def _swap_with_any(design: list[list[int]], seen: set[tuple[int, ...]], r: int, start: int,
                   rng: random.Random) -> None:
    """Swap a random column's entry of row ``r`` with a random row's at or after ``start``; not when that row
    is an earlier one (in ``seen``, kept up to date) that would then equal another."""
    row = design[r]
    j, s = rng.randrange(len(row)), rng.randrange(start, len(design))
    other = design[s]
    if s == r or other[j] == row[j]:
        return
    if s < r:  # the other row is already in seen: it must stay distinct
        new_row = (*row[:j], other[j], *row[j + 1:])
        new_other = (*other[:j], row[j], *other[j + 1:])
        if new_other in seen or new_other == new_row:
            return
        seen.discard(tuple(other))
        seen.add(new_other)
    row[j], other[j] = other[j], row[j]


def _even_out_pairs(design: list[list[int]], sizes: tuple[int, ...], rng: random.Random, start: int = 0) -> None:
    """Local search on pair balance: accept a within-column swap of two rows
    (both at or after ``start``: earlier rows are fixed) when it lowers sum
    over dimension pairs of sum_ab count(a, b)^2 / expected (the chi-square
    distance from an orthogonal array) and keeps rows distinct."""
    n, dims = len(design), len(sizes)
    if dims < 2 or n - start < 4:
        return
    counts = {(j, k): [[0] * sizes[k] for _ in range(sizes[j])] for j in range(dims) for k in range(dims) if j != k}
    for row in design:
        for (j, k), table in counts.items():
            table[row[j]][row[k]] += 1
    weight = {(j, k): sizes[j] * sizes[k] / n for j, k in counts}
    seen = {tuple(row) for row in design}
    for _ in range(min(_IMPROVE_PER_ROW * (n - start), _IMPROVE_MAX)):
        j, r, s = rng.randrange(dims), rng.randrange(start, n), rng.randrange(start, n)
        row, other = design[r], design[s]
        a, b = row[j], other[j]
        if a == b:
            continue
        if _swap_cost(counts, weight, row, other, j) >= 0:
            continue
        new_row = (*row[:j], b, *row[j + 1:])
        new_other = (*other[:j], a, *other[j + 1:])
        if new_row in seen or new_other in seen:
            continue
        seen -= {tuple(row), tuple(other)}
        seen |= {new_row, new_other}
        _count_swap(counts, row, other, j)
        row[j], other[j] = b, a


PairCounts = dict[tuple[int, int], list[list[int]]]  # (j, k) -> count of (level in j, level in k) over the rows


def _swap_cost(counts: PairCounts, weight: dict[tuple[int, int], float], row: list[int], other: list[int],
               j: int) -> float:
    """How much swapping the two rows' entries in column ``j`` changes the weighted sum of squared pair counts
    (negative: the design gets closer to an orthogonal array)."""
    a, b = row[j], other[j]
    delta = 0.0
    for k, (u, v) in enumerate(zip(row, other)):
        if k == j or u == v:
            continue
        t = counts[(j, k)]
        delta += weight[(j, k)] * (2 * (t[b][u] + t[a][v] - t[a][u] - t[b][v]) + 4)
    return delta


def _count_swap(counts: PairCounts, row: list[int], other: list[int], j: int) -> None:
    """Update the pair counts for the swap of the two rows' entries in column ``j`` (before it is made)."""
    a, b = row[j], other[j]
    for k, (u, v) in enumerate(zip(row, other)):
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


class _SobolCells:
    """The distinct grid cells a scrambled Sobol' stream visits, in order of first visit.

    Over a finite space, Sobol' points land in the same cell again (a repeat is a
    wasted GPU run): configuration ``c`` is the ``c``-th *new* cell. The stream is
    continued lazily, never recomputed; when it stops finding new cells (the last
    few of a small grid take long to hit), the rest come from a seeded permutation
    of the grid, so ``c`` up to the grid's size always has an answer. Written here
    because scipy's ``qmc`` has no draw without replacement over levels.
    """

    def __init__(self, sizes: tuple[int, ...], seed: int) -> None:
        from scipy.stats import qmc  # imported on use: only sobol needs scipy's import time

        self.sizes, self.seed, self.total = sizes, seed, math.prod(sizes)
        self._engine = qmc.Sobol(len(sizes), scramble=True, rng=seed)
        self._cells: list[tuple[int, ...]] = []
        self._seen: set[tuple[int, ...]] = set()
        self._drawn = 0
        self._lock = threading.Lock()

    def cell(self, index: int) -> tuple[int, ...]:
        """The levels (one per dimension) of configuration ``index`` (< the grid's size)."""
        if not 0 <= index < self.total:
            raise IndexError(f"configuration {index} of a {self.total}-point grid")
        with self._lock:
            while len(self._cells) <= index and self._drawn < 8 * (index + 1) + 1024:
                batch = self._engine.random(256)
                self._drawn += len(batch)
                for u in batch:
                    self._add(tuple(min(int(x * n), n - 1) for x, n in zip(u, self.sizes)))
            if len(self._cells) <= index:
                self._fill(index + 1)
            return self._cells[index]

    def _add(self, cell: tuple[int, ...]) -> None:
        if cell not in self._seen:
            self._seen.add(cell)
            self._cells.append(cell)

    def _fill(self, count: int) -> None:
        order = IndexPermutation(self.total, f"sobol-fill:{self.seed}")
        for i in range(self.total):
            if len(self._cells) >= count:
                return
            rest, levels = order(i), []
            for n in reversed(self.sizes):
                rest, level = divmod(rest, n)
                levels.append(level)
            self._add(tuple(reversed(levels)))


@functools.lru_cache(maxsize=32)
def sobol_cells(sizes: tuple[int, ...], seed: int) -> _SobolCells:
    """The distinct Sobol' cells of a grid of ``sizes`` levels, seeded (one per sweep)."""
    return _SobolCells(sizes, seed)
