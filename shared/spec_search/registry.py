"""The registry of search plugins: strategies and early stoppers by their spec ``type``.

Each plugin owns its spec model: a subclass of :class:`StrategyModel`
(``strategy:``) or :class:`StopModel` (``early_stop:``) with ``type:
Literal[...]`` naming the type(s) it takes. Every registration rebuilds
:class:`~spotsweep.shared.spec_models.SweepSpec`'s discriminated unions, so
validation and the JSON Schema know the new type at once; the model's hooks
answer what the rest of the code would otherwise ask with a type switch. The
planner's behaviour for model-based samplers and stoppers is registered apart
(``spotsweep.services.planner.search.registry``): specs are validated by the
CLI and the control plane without the planner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Union, get_args

from pydantic import Field

from spotsweep.shared.errors import SpecError
from spotsweep.shared.spec_base import _Model

if TYPE_CHECKING:
    from spotsweep.shared.spec_models import SweepSpec
    from spotsweep.shared.spec_params import Param
    from spotsweep.shared.spec_search.common import BudgetParam

Problems = list[tuple[tuple[str | int, ...], str]]


class StrategyModel(_Model):
    """Base of a strategy's spec model: what trial ``i`` runs.

    Subclass it with ``type: Literal["name"]`` and the fields the strategy
    takes, override the hooks that differ from the defaults, and register it.
    """

    type: str
    # Its trials may continue from another trial's checkpoint (PBT's exploit): the
    # steps that checkpoint had trained are not the trial's own (budget.max_steps).
    inherits_checkpoints: ClassVar[bool] = False

    def sampler_name(self, spec: SweepSpec) -> str:
        """How configurations are drawn: a static design of ``shared/space.py``
        (grid, random, sobol, subset), a model-based sampler registered with
        the planner (tpe, gp, cmaes, nsga2), or the strategy's own type
        (then :meth:`design` gives its configurations)."""
        return self.type

    def configs(self, spec: SweepSpec) -> int:
        """Distinct configurations the sweep runs (before repeats); ``trials`` by default."""
        trials = getattr(self, "trials", None)
        if not isinstance(trials, int):
            raise NotImplementedError(f"strategy {self.type} must say how many configurations it runs")
        return trials

    def design(self, spec: SweepSpec, config: int) -> dict[str, Any] | None:
        """The params of configuration ``config`` of the strategy's own static
        design (a pure function of the spec and ``config``); None: it has none
        (a built-in design or a model-based sampler draws them)."""
        return None

    def stop(self) -> StopModel | None:
        """The early stopping the strategy implies (asha: successive halving), if any."""
        return None

    def grid_shuffle(self, spec: SweepSpec) -> int | None:
        """The seed of the order a ``grid`` sampler takes the grid's points in
        (a lazy seeded permutation, ``shared/space.py``); None: the listed order."""
        return None

    def warnings(self, spec: SweepSpec) -> list[str]:
        """Things about the strategy in ``spec`` that validate but the user should
        hear (``spotsweep validate``/``submit``), e.g. more trials than configs."""
        return []

    def problems(self, spec: SweepSpec) -> Problems:
        """What is wrong with the strategy in ``spec``, as (path from the spec's root, message)."""
        return []

    def param_problems(self, key: str, param: Param) -> Problems:
        """What is wrong with space parameter ``key`` for this strategy (listed with
        the other problems of that parameter)."""
        return []

    def objective_problems(self, spec: SweepSpec) -> Problems:
        """What is wrong with the spec's objectives for this strategy (listed with
        the other problems of the objectives)."""
        return []

    def describe(self, spec: SweepSpec) -> str:
        """Details after ``strategy <type>`` in ``spotsweep validate``'s summary (" (...)" or "")."""
        return ""

    def grown(self, spec: SweepSpec, more: int) -> dict[str, Any]:
        """The strategy as JSON with ``more`` configurations more (``spotsweep extend``):
        ``trials`` raised by default; the trials already launched keep their params."""
        data = self.model_dump(mode="json", by_alias=True)
        if data.get("trials") is None:
            raise SpecError([("trials", f"strategy {self.type} runs every configuration of its grid already")])
        data["trials"] += more
        return data


class StopModel(_Model):
    """Base of an early stopper's spec model (``early_stop:``); subclass and register it."""

    type: str
    # Where the budget parameter is named, below the strategy or early_stop (for errors).
    budget_path: ClassVar[tuple[str, ...]] = ("budget", "param")

    def halving_budget(self) -> BudgetParam | None:
        """The successive-halving budget the stopper works on, if any."""
        return None

    def problems(self, spec: SweepSpec) -> Problems:
        """What is wrong with the stopper in ``spec``, as (path from the spec's root, message)."""
        return []


_STRATEGIES: list[type[StrategyModel]] = []
_STOPS: list[type[StopModel]] = []
_LISTENERS: list[Callable[[], None]] = []


def types_of(model: type[StrategyModel] | type[StopModel]) -> tuple[str, ...]:
    """The ``type`` values a model takes: the arguments of its ``Literal``."""
    annotation = model.model_fields["type"].annotation
    values = get_args(annotation)
    if not values or not all(isinstance(v, str) for v in values):
        raise TypeError(f"{model.__name__}.type must be a Literal of strings (got {annotation!r})")
    return tuple(values)


def _add(registry: list[Any], model: Any, taken: tuple[str, ...]) -> None:
    clash = [t for t in types_of(model) if t in taken]
    if clash:
        raise ValueError(f"{model.__name__}: type {', '.join(clash)} is already registered")
    registry.append(model)
    for listener in _LISTENERS:
        listener()


def register_strategy(model: type[StrategyModel]) -> type[StrategyModel]:
    """Make ``model``'s type(s) valid in ``strategy:`` (usable as a class decorator)."""
    _add(_STRATEGIES, model, strategy_types())
    return model


def register_stop(model: type[StopModel]) -> type[StopModel]:
    """Make ``model``'s type(s) valid in ``early_stop:`` (usable as a class decorator)."""
    _add(_STOPS, model, stop_types())
    return model


def unregister(model: type[StrategyModel] | type[StopModel]) -> None:
    """Take a registered model out again (tests that register a toy plugin)."""
    registry: list[Any] = _STRATEGIES if issubclass(model, StrategyModel) else _STOPS
    registry.remove(model)
    for listener in _LISTENERS:
        listener()


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener`` after every registration (the spec model rebuilds its unions)."""
    _LISTENERS.append(listener)


def strategy_types() -> tuple[str, ...]:
    return tuple(t for model in _STRATEGIES for t in types_of(model))


def stop_types() -> tuple[str, ...]:
    return tuple(t for model in _STOPS for t in types_of(model))


def _union(models: list[Any]) -> Any:
    return Annotated[Union[tuple(models)], Field(discriminator="type")]  # noqa: UP007 - built at run time


def strategy_union() -> Any:
    """The discriminated union of every registered strategy model."""
    return _union(_STRATEGIES)


def stop_union() -> Any:
    """The discriminated union of every registered stopper model."""
    return _union(_STOPS)


__all__ = ["Problems", "StopModel", "StrategyModel", "on_change", "register_stop", "register_strategy",
           "stop_types", "stop_union", "strategy_types", "strategy_union", "types_of", "unregister"]
