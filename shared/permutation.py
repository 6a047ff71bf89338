"""A seeded permutation of ``range(size)`` evaluated one index at a time.

Random search over a finite space draws without replacement, and ASHA or
Hyperband over a grid takes its configurations in a shuffled order: both
need "the ``i``-th element of a random permutation of the space" for spaces
far too large to list (a 10^12-point grid), as a pure function of
``(seed, i)`` so that a restarted planner proposes the same configurations.

:class:`IndexPermutation` is a balanced Feistel network over the smallest
even number of bits that holds ``size``, with cycle walking (an output at
or past ``size`` is encrypted again until it falls inside): a bijection of
``range(size)`` that costs a few dozen integer operations per index and no
memory. The round keys come from BLAKE2b of the seed string, so the
permutation is stable across processes and Python versions.
"""

from __future__ import annotations

import hashlib

ROUNDS = 6  # Feistel rounds: 4 make a pseudo-random permutation; 6 mix small domains better
_MASK64 = (1 << 64) - 1


def _mix(x: int) -> int:
    """SplitMix64's finaliser: a well-mixed 64-bit hash of ``x``."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


class IndexPermutation:
    """``perm(i)`` for ``i`` in ``range(size)``: a seeded bijection of ``range(size)``."""

    def __init__(self, size: int, seed: int | str) -> None:
        if size < 1:
            raise ValueError(f"a permutation needs at least one element (got size {size})")
        self.size = size
        bits = max(2, (size - 1).bit_length())
        self._half = (bits + 1) // 2
        self._mask = (1 << self._half) - 1
        self._keys = tuple(
            int.from_bytes(hashlib.blake2b(f"spotsweep-perm:{seed}:{r}".encode(), digest_size=8).digest(), "big")
            for r in range(ROUNDS))

    def _encrypt(self, x: int) -> int:
        left, right = x >> self._half, x & self._mask
        for key in self._keys:
            left, right = right, left ^ (_mix(right ^ key) & self._mask)
        return (left << self._half) | right

    def __call__(self, index: int) -> int:
        if not 0 <= index < self.size:
            raise IndexError(f"index {index} outside a permutation of {self.size}")
        x = self._encrypt(index)
        while x >= self.size:  # cycle walking: the orbit of an index inside comes back inside
            x = self._encrypt(x)
        return x
