"""The sweep spec: what a user writes to describe a sweep, and its validation.

A spec arrives as YAML or JSON text (the CLI) or as an already decoded mapping
(a message body, a row reloaded from PostgreSQL). Every way in ends in
:func:`parse_spec`, which returns a frozen :class:`SweepSpec` or raises
:class:`SpecError` with ``(field, message)`` pairs whose dotted paths are what
the user wrote, e.g. ``space.dropout.low: must be less than high (got low=0.3,
high=0.1)``: never a traceback, never pydantic's union tags in a path.

Defaults: metric mode ``min``; strategy ``grid``; max_concurrent 20; trial_name
``"{name}_{index:04d}"`` (sweep name and 0-based trial number: unique, and sorts
in trial order); repeats 1; retries.max_failures 3; resources 1 GPU of class
``gpu``; no extra env; priority 0; an empty space (one configuration).

The search strategies (subset, tpe, gp, cmaes, nsga2, asha), ``early_stop``,
``budget``, ``pricing`` and ``smoke`` are in :mod:`.spec_search`; a list of
objectives (``metric: [a, b]``) is read as ``metric: a`` plus ``objectives``.

``spec.to_json_dict()`` re-parses to an equal spec. The order of ``space``
keys is the grid order, so store the dump as ``json``/text, not ``jsonb``
(which reorders keys).

The models live in :mod:`.spec_models` (the space's parameter types in
:mod:`.spec_params`), the loading and error translation in :mod:`.spec_load`;
import them from here.
"""

from __future__ import annotations

from spotsweep.shared.spec_load import load_spec, load_spec_file, parse_spec
from spotsweep.shared.spec_models import Metric, Resources, Retries, SweepSpec, spec_json_schema
from spotsweep.shared.spec_params import Choice, IntRange, LogUniform, Param, Uniform
from spotsweep.shared.spec_search import (AshaStrategy, Budget, BudgetParam, GridStrategy, HyperbandStop, MedianStop,
                                          ModelStrategy, Pricing, RandomStrategy, Smoke, SubsetStrategy)

__all__ = ["AshaStrategy", "Budget", "BudgetParam", "Choice", "GridStrategy", "HyperbandStop", "IntRange", "LogUniform",
           "MedianStop", "Metric", "ModelStrategy", "Param", "Pricing", "RandomStrategy", "Resources", "Retries",
           "Smoke", "SubsetStrategy", "SweepSpec", "Uniform", "load_spec", "load_spec_file", "parse_spec",
           "spec_json_schema"]
