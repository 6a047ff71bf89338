"""Trial number -> parameters, without ever materialising the sweep.

The planner asks for trial ``i`` and gets its params; it never holds the grid,
so a 10^9-point grid costs no memory, and a restarted planner gets identical
params for the same ``i`` because nothing depends on what was computed before.

Trial ``i`` is repeat ``i % repeats`` of configuration ``i // repeats``; with
``repeats > 1`` the params carry ``seed = i % repeats`` (repeats of one
configuration differ only in ``seed``).

- grid: configuration ``c`` is the ``c``-th element of
  ``itertools.product(*values)`` over the space keys in the order written
  (first key varies slowest), found by mixed-radix decoding of ``c``.
- grid under successive halving (asha over a grid, grid with early_stop
  hyperband): configuration ``c`` is grid point ``perm(c)`` of a seeded
  permutation (:class:`~.permutation.IndexPermutation`, lazy: no list of the
  grid), so the first rung is a fair sample of the grid, not neighbours in
  the listed order; ``order: listed`` keeps the listed order. The strategy
  says which (:meth:`StrategyModel.grid_shuffle`).
- random over a finite space (every dimension a list or an int range):
  configuration ``c`` is grid point ``perm(c)`` of a permutation seeded with
  ``strategy.seed``: draws without replacement, never a repeated config, as
  lazily as the grid (the strategy runs at most the space's size). Otherwise
  configuration ``c`` is sampled from ``random.Random`` seeded with
  ``(strategy.seed, c)``, so it depends on nothing else. With ``sampler:
  sobol`` it is point ``c`` of a scrambled Sobol' sequence seeded with
  ``strategy.seed`` (each coordinate in [0, 1) mapped onto its dimension);
  over a finite space, the ``c``-th distinct cell the sequence visits
  (:func:`.designs.sobol_cells`), so no config repeats there either.
- subset: configuration ``c`` is row ``c`` of a balanced design of
  ``strategy.trials`` grid points (:func:`.designs.balanced_subset`, built
  once per spec and cached: O(trials x dims), never the grid).
- asha: configurations from the grid, random or Sobol (``strategy.sampler``);
  the budget parameter is not in these params: the search package
  (``spotsweep.services.planner.search.Search.propose``) fills it in.
- tpe, gp, cmaes, nsga2 and asha with ``sampler: tpe`` suggest from the
  results so far: :func:`params_at` refuses them (:class:`NeedsHistory`);
  the planner asks ``spotsweep.services.planner.search.Search.propose``.
- a registered strategy with its own static design: its model's
  :meth:`~spotsweep.shared.spec_search.StrategyModel.design`.

How many configurations there are and how they are drawn is the strategy
model's to say (``configs``, ``sampler_name``): no switch on its type here.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable
from typing import Any

from spotsweep.shared.designs import balanced_subset, extend_subset, sobol_cells, sobol_point
from spotsweep.shared.errors import SpecError
from spotsweep.shared.permutation import IndexPermutation
from spotsweep.shared.spec_models import SweepSpec
from spotsweep.shared.spec_params import Choice, IntRange, LogUniform, Param, grid_size, int_count, levels, sample, value_at
from spotsweep.shared.spec_search import enumerable


class NeedsHistory(SpecError):
    """The strategy suggests params from the results so far: ask the search package."""


def configs(spec: SweepSpec) -> int:
    """Distinct configurations the sweep runs (before repeats), as its strategy says."""
    return spec.strategy.configs(spec)


def sampler_of(spec: SweepSpec) -> str:
    """How configurations are drawn: grid, random, sobol, subset, a model (tpe, gp...)
    or a registered strategy's own design, as its strategy says."""
    return spec.strategy.sampler_name(spec)


def total_trials(spec: SweepSpec) -> int:
    """Trials in the sweep: configurations x repeats."""
    return configs(spec) * spec.repeats


def _grid_params(spec: SweepSpec, config: int) -> dict[str, Any]:
    sizes = [(key, param, levels(key, param)) for key, param in spec.space.items()]
    params: dict[str, Any] = {}
    # Last key varies fastest: peel digits from the right.
    for key, param, size in reversed(sizes):
        config, digit = divmod(config, size)
        params[key] = value_at(param, digit)
    return {key: params[key] for key in spec.space}  # back in the order written


@functools.lru_cache(maxsize=64)
def permutation(size: int, key: str) -> IndexPermutation:
    """The seeded permutation of ``range(size)`` named ``key`` (built once per sweep)."""
    return IndexPermutation(size, key)


def _shuffled_grid_params(spec: SweepSpec, config: int) -> dict[str, Any]:
    seed = spec.strategy.grid_shuffle(spec)
    if seed is None:
        return _grid_params(spec, config)
    return _grid_params(spec, permutation(grid_size(spec.space), f"grid:{seed}")(config))


def _random_params(spec: SweepSpec, seed: int, config: int) -> dict[str, Any]:
    if enumerable(spec):  # finite: without replacement, never a repeated config
        return _grid_params(spec, permutation(grid_size(spec.space), f"random:{seed}")(config))
    # A str seed is hashed with SHA-512 by random.seed: stable across processes
    # and Python runs (unlike hash()), and distinct per (seed, config).
    rng = random.Random(f"spotsweep:{seed}:{config}")
    return {key: sample(rng, param) for key, param in spec.space.items()}


def _unit(param: Param, u: float) -> Any:
    """A coordinate in [0, 1) onto a dimension: equal-width cells for levels."""
    if isinstance(param, Choice):
        return param.values[min(int(u * len(param.values)), len(param.values) - 1)]
    if isinstance(param, IntRange):
        count = int_count(param)
        return param.low + param.step * min(int(u * count), count - 1)
    if isinstance(param, LogUniform):
        value = math.exp(math.log(param.low) + u * (math.log(param.high) - math.log(param.low)))
        return min(max(value, param.low), param.high)
    return param.low + u * (param.high - param.low)


def _sobol_params(spec: SweepSpec, seed: int, config: int) -> dict[str, Any]:
    if enumerable(spec):  # finite: the config-th distinct cell the stream visits, never a repeated config
        sizes = tuple(levels(key, param) for key, param in spec.space.items())
        cell = sobol_cells(sizes, seed).cell(config)
        return {key: value_at(param, level) for (key, param), level in zip(spec.space.items(), cell)}
    point = sobol_point(len(spec.space), seed, config)
    return {key: _unit(param, u) for (key, param), u in zip(spec.space.items(), point)}


@functools.lru_cache(maxsize=32)
def _extended_subset(sizes: tuple[int, ...], stages: tuple[int, ...], seed: int) -> tuple[tuple[int, ...], ...]:
    """A subset grown by ``spotsweep extend``: the design of the first size, then
    grown to each later size by :func:`.designs.extend_subset` (new rows
    balanced with the ones before them, none repeating). The trials already
    run keep their configs."""
    rows = balanced_subset(sizes, stages[0], seed)
    for n in stages[1:]:
        rows = extend_subset(sizes, rows, n, seed)
    return rows


def _subset_params(spec: SweepSpec, trials: int, seed: int, config: int) -> dict[str, Any]:
    sizes = tuple(levels(key, param) for key, param in spec.space.items())
    extends = tuple(getattr(spec.strategy, "extends", ()) or ())
    design = _extended_subset(sizes, (*extends, trials), seed) if extends else balanced_subset(sizes, trials, seed)
    row = design[config]
    return {key: value_at(param, level) for (key, param), level in zip(spec.space.items(), row)}


_DESIGNS: dict[str, Callable[[SweepSpec, int, int], dict[str, Any]]] = {
    "grid": lambda spec, seed, config: _shuffled_grid_params(spec, config),
    "random": _random_params,
    "sobol": _sobol_params,
    "subset": lambda spec, seed, config: _subset_params(spec, configs(spec), seed, config),
}  # the static designs built in, by sampler name: (spec, seed, config) -> params


def config_params(spec: SweepSpec, config: int) -> dict[str, Any]:
    """The params of configuration ``config`` of a static design (no seed, no budget):
    a built-in one, or the strategy's own (:meth:`StrategyModel.design`)."""
    sampler = sampler_of(spec)
    design = _DESIGNS.get(sampler)
    if design is not None:
        return design(spec, getattr(spec.strategy, "seed", 0), config)
    own = spec.strategy.design(spec, config)
    if own is not None:
        return own
    raise NeedsHistory([("strategy.type", f"{spec.strategy.type} (sampler {sampler}) suggests params from the results "
                         "so far; the planner's search package proposes them")])


def params_at(spec: SweepSpec, index: int) -> dict[str, Any]:
    """The params of trial ``index`` (0-based); IndexError outside the sweep."""
    total = total_trials(spec)
    if not 0 <= index < total:
        raise IndexError(f"trial index {index} out of range for a sweep of {total} trials")
    config, repeat = divmod(index, spec.repeats)
    params = config_params(spec, config)
    if spec.repeats > 1:
        params["seed"] = repeat
    return params
