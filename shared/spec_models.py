"""The sweep spec's models: fields, defaults, and the checks on them.

Every model is frozen and strict (no ``"3"`` -> 3 coercion) and forbids unknown
keys. Checks that span fields (parameter names, templates against the space,
strategy against the space) raise :class:`_Problems` with paths relative to the
model; :mod:`.spec_load` turns those, and pydantic's own errors, into a
:class:`SpecError`. Import from :mod:`spotsweep.shared.spec`, the public face.

``strategy`` and ``early_stop`` are the discriminated unions of the plugin
models registered in :mod:`.spec_search` (grid and random among them);
registering one more rebuilds :class:`SweepSpec` (:func:`_rebuild`), and
the strategy's own checks run through its hooks, not a switch on its type.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional, Union

from pydantic import BeforeValidator, Field
from pydantic import SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator
from pydantic.fields import FieldInfo

from spotsweep.shared.inputs import Inputs
from spotsweep.shared.limits import TRIAL_NAME_CHARS, Limits
from spotsweep.shared.naming import check_template, placeholders
from spotsweep.shared.quantity import MIN_CPUS, MIN_MEMORY, at_least, cpu_cores, memory_bytes
from spotsweep.shared.spec_base import Duration, _Model, _Problems
from spotsweep.shared.spec_params import Choice, IntRange, Param
from spotsweep.shared.spec_search import (Budget, GridStrategy, Pricing, Smoke, StopModel, StrategyModel, budget_of,
                                          on_change, search_problems, smoke_param, stop_union, strategy_union)

BUILTINS = ("index", "name", "trial_name")  # fields every template may use; no parameter may take these names
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_PARAM = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class Metric(_Model):
    name: str = Field(min_length=1)
    mode: Literal["min", "max"] = "min"


if TYPE_CHECKING:  # the registered plugin models, as mypy sees them
    Strategy = StrategyModel
    EarlyStop = StopModel
else:  # the discriminated unions of the registered plugins (rebuilt by _rebuild on registration)
    Strategy = strategy_union()
    EarlyStop = stop_union()


class Retries(_Model):
    """What the planner and agents do when attempts end badly (docs/faults.md)."""

    max_failures: int = Field(default=3, ge=0)  # 3 means up to 4 attempts
    # Deliveries of one attempt lost together with their agent (kill -9, a node
    # gone without notice, a trial that takes its agent down) before the attempt
    # is dead-lettered and the trial failed. Graceful preemptions never count.
    max_lost: int = Field(default=10, ge=0)
    # The sweep's own breaker: this many trials failed for good (after their
    # retries) and none ran to its end stop the sweep as failed (its code is
    # broken, not the fleet: services/planner/breaker.py). 0: never.
    max_failed_trials: int = Field(default=10, ge=0)
    # halve_batch: a CUDA out-of-memory exit is retried with batch_param halved
    # and accum_param doubled (same effective batch), not counted as a failure.
    on_oom: Literal["fail", "halve_batch"] = "fail"
    batch_param: str = Field(default="batch_size", min_length=1)
    accum_param: str = Field(default="grad_accum", min_length=1)




class Timeout(_Model):
    """Per-trial time limits, enforced by the agent; a trial past one is killed and counts as a failure."""

    stall: Duration | None = None  # no metric, checkpoint or heartbeat line for this long
    total: Duration | None = None  # running time over all attempts (a trial past it is not retried)


class Checkpoints(_Model):
    """What a trial's checkpoints leave in the store (``shared/artifacts/retention.py``): ``last``, the
    latest one; ``best``, also the one nearest the best objective; ``all``, every one. Pruned trials keep none."""

    keep: Literal["last", "best", "all"] = "last"


class Resources(_Model):
    """What one trial reserves on its agent. ``cpus`` and ``memory`` (Kubernetes quantities: ``8``, ``500m``;
    ``256Mi``, ``32Gi``) are optional: an agent starts a trial only when they fit what its running trials
    leave free, and a trial over its memory is killed and fails (docs/trial-contract.md, Resources)."""

    gpus: int = Field(default=1, ge=0)
    resource_class: str = Field(default="gpu", alias="class", min_length=1)  # routes trials to agents serving it
    cpus: Annotated[float | None, BeforeValidator(cpu_cores, json_schema_input_type=Union[float, str, None])] = None  # cores reserved (not a hard limit)
    memory: Annotated[int | None, BeforeValidator(memory_bytes, json_schema_input_type=Union[int, str, None])] = None  # bytes reserved, enforced
    # /dev/shm of the trial's container (--runtime docker|podman; PyTorch's DataLoader workers share tensors there)
    shm: Annotated[int | None, BeforeValidator(memory_bytes, json_schema_input_type=Union[int, str, None])] = None

    @model_serializer(mode="wrap")
    def _without_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """No ``cpus``/``memory``/``shm`` keys when not asked: a spec without them dumps as before this field existed."""
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if v is not None or k not in ("cpus", "memory", "shm")}

    @field_validator("cpus", mode="wrap")
    @classmethod
    def _runnable_cpus(cls, value: object, handler: Any) -> float | None:
        cores = handler(value)
        return cores if cores is None else at_least(cores, MIN_CPUS, "0.01 cores (10m)", value)

    @field_validator("memory", mode="wrap")
    @classmethod
    def _runnable_memory(cls, value: object, handler: Any) -> int | None:
        size = handler(value)
        return size if size is None else int(at_least(size, MIN_MEMORY, "6Mi", value))


def _placeholders(template: str) -> set[str]:
    """The fields a command argument uses; none for a malformed one (check_template names it)."""
    try:
        return placeholders(template)
    except ValueError:
        return set()


def _split_command(value: object) -> object:
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as e:
            raise ValueError(f"cannot split into arguments: {e} (got {value!r})") from e
    return value


def _objectives(data: Any) -> Any:
    """``metric: [a, b]`` (several objectives) -> ``metric: a, objectives: [a, b]``,
    so that every caller of ``spec.metric`` sees the first objective."""
    if isinstance(data, Mapping) and isinstance(data.get("metric"), list):
        metrics = data["metric"]
        if not metrics:
            raise _Problems([(("metric",), "must list at least one objective")])
        if "objectives" in data:
            raise _Problems([(("objectives",), "give the objectives once: as a metric list, or as metric and objectives")])
        return {**data, "metric": metrics[0], "objectives": metrics}
    return data


class Setup(_Model):
    """``setup: {pip: FILE}``: without an image, each trial runs in a virtualenv the agent builds
    (with uv, once per node) from this requirements file of the sweep's ``workdir``."""

    pip: str = Field(min_length=1)

    @field_validator("pip")
    @classmethod
    def _inside_workdir(cls, value: str) -> str:
        parts = value.replace("\\", "/").split("/")
        if value.startswith("/") or ".." in parts or "\0" in value:
            raise ValueError(f"must be a file of the workdir, relative to it (got {value!r})")
        return value


class SweepSpec(_Model):
    name: str
    command: Annotated[list[str], BeforeValidator(_split_command)]
    metric: Metric  # the objective, or the first of several (``objectives``)
    space: dict[str, Param] = Field(default_factory=dict)
    strategy: Strategy = Field(default_factory=GridStrategy)
    max_concurrent: int = Field(default=20, ge=1)
    trial_name: str = "{name}_{index:04d}"
    repeats: int = Field(default=1, ge=1)
    retries: Retries = Field(default_factory=Retries)
    timeout: Timeout = Field(default_factory=Timeout)
    resources: Resources = Field(default_factory=Resources)
    env: dict[str, str] = Field(default_factory=dict)
    priority: int = Field(default=0, ge=0, le=9)
    objectives: list[Metric] = Field(default_factory=list)  # empty: the one metric
    early_stop: EarlyStop | None = None
    budget: Budget | None = None
    pricing: Pricing | None = None
    smoke: Smoke | None = None
    limits: Limits = Field(default_factory=Limits)  # what the agent accepts from a trial's files
    checkpoints: Checkpoints = Field(default_factory=Checkpoints)  # retention in the store
    # The trial's code: a directory (relative to the spec file) that `spotsweep submit` packs and
    # uploads, and agents unpack as each trial's working directory; local mode runs in it in place.
    workdir: str | None = Field(default=None, min_length=1)
    # The sha256 of the packed workdir (``code/<sha256>.tar.gz`` in the store): set by `submit`;
    # a spec posted by another client with one is trusted as given.
    workdir_sha256: str | None = None
    setup: Setup | None = None  # setup.pip: the trial's Python environment, built by the agent (services/agent/pyenv.py)
    inputs: Inputs = Field(default_factory=list)  # data staged once per node, linked read-only (shared/inputs.py)
    # The OCI image the command runs in, on agents started with --runtime docker|podman (services/agent/container.py);
    # None: the agent's --default-image there. The container's network: the runtime's bridge unless the spec asks.
    image: str | None = Field(default=None, min_length=1, max_length=512, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")
    network: Literal["bridge", "host", "none"] = "bridge"

    @model_validator(mode="before")
    @classmethod
    def _metric_list(cls, data: Any) -> Any:
        return _objectives(data)

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str) -> str:
        if not _NAME.fullmatch(name):
            raise ValueError(f"must be 1-100 letters, digits, '-', '_' or '.', starting with a letter or digit (got {name!r})")
        return name

    @field_validator("workdir_sha256")
    @classmethod
    def _sha256(cls, digest: str | None) -> str | None:
        if digest is not None and not _SHA256.fullmatch(digest):
            raise ValueError(f"must be 64 lowercase hex digits, the sha256 of the packed workdir (got {digest!r})")
        return digest

    @field_validator("command")
    @classmethod
    def _not_empty(cls, command: list[str]) -> list[str]:
        if not command:
            raise ValueError("must not be empty")
        if not command[0].strip():
            raise ValueError(f"must name a program to run first (got {command[0]!r})")
        return command

    @model_validator(mode="after")
    def _consistent(self) -> SweepSpec:
        """Checks across fields: parameter names, templates, strategy against space."""
        problems: list[tuple[tuple[str | int, ...], str]] = []
        for key, param in self.space.items():
            if key in BUILTINS:
                problems.append((("space", key), f"reserved name; {', '.join(BUILTINS)} are built in"))
            elif not _PARAM.fullmatch(key):
                problems.append((("space", key), f"must be letters, digits, '_' or '-', not starting with a digit (got {key!r})"))
            if key == "seed" and self.repeats > 1:
                problems.append((("space", "seed"), f"cannot be a parameter when repeats > 1 (got repeats={self.repeats}); each repeat sets seed"))
            problems += self.strategy.param_problems(key, param)
        problems += self._oom_problems()
        samples = self._samples()
        command_samples = {k: v for k, v in samples.items() if k != "name"}
        for i, arg in enumerate(self.command):
            problems += [(("command", i), m) for m in check_template(arg, command_samples)]
        name_samples = {k: v for k, v in samples.items() if k != "trial_name"}
        problems += [(("trial_name",), m) for m in check_template(self.trial_name, name_samples, TRIAL_NAME_CHARS)]
        problems += [(("env", k), f"not a valid environment variable name (got {k!r})") for k in self.env if not _ENV.fullmatch(k)]
        if self.objectives and self.objectives[0] != self.metric:
            problems.append((("objectives",), f"the first objective must be metric (got {self.objectives[0].name!r}, "
                             f"metric {self.metric.name!r})"))
        problems += search_problems(self, BUILTINS)
        if self.image is not None and self.setup is not None:
            problems.append((("setup",), f"setup.pip builds a virtualenv for trials without an image; with image "
                                         f"{self.image!r}, install the packages in the image"))
        if problems:
            raise _Problems(problems)
        return self

    def _oom_problems(self) -> list[tuple[tuple[str | int, ...], str]]:
        r = self.retries
        if r.on_oom != "halve_batch":
            return []
        out: list[tuple[tuple[str | int, ...], str]] = []
        for field, name, required in (("batch_param", r.batch_param, True), ("accum_param", r.accum_param, False)):
            param = self.space.get(name)
            if param is None:
                if required:
                    out.append((("retries", field), f"on_oom: halve_batch needs space.{name}, the batch size to halve "
                                                    f"(got no parameter {name!r}; set retries.{field} to name it)"))
                continue
            ints = isinstance(param, IntRange) or (
                isinstance(param, Choice) and all(isinstance(v, int) and not isinstance(v, bool) for v in param.values))
            if not ints:
                out.append((("space", name), f"must take whole numbers for on_oom: halve_batch (got {param.type})"))
        # The retry doubles the accumulation to keep the effective batch: a command without its slot
        # would train the retry with half the batch and the same accumulation, another experiment.
        if not any(r.accum_param in _placeholders(arg) for arg in self.command):
            out.append((("retries", "on_oom"), f"halve_batch keeps the effective batch by doubling {r.accum_param}, but "
                                              f"the command has no {{{r.accum_param}}} slot (add e.g. --grad-accum "
                                              f"{{{r.accum_param}}}, or set retries.accum_param to the command's)"))
        return out

    def _samples(self) -> dict[str, list[Any]]:
        """Values each template field can take: every choice, range bounds, built-ins."""
        samples: dict[str, list[Any]] = {"index": [0], "name": [self.name], "trial_name": [self.name]}
        for key, param in self.space.items():
            samples[key] = list(param.values) if isinstance(param, Choice) else [param.low, param.high]
        if self.repeats > 1:
            samples["seed"] = [0]
        if self.retries.on_oom == "halve_batch":
            samples.setdefault(self.retries.accum_param, [1])  # filled in with 1 when not in space
        budget = budget_of(self)
        if budget is not None and budget.param is not None and budget.param not in samples:
            samples[budget.param] = [budget.min, budget.max]  # filled in by the strategy
        smoke_key = smoke_param(self)
        if self.smoke is not None and self.smoke.budget is not None and smoke_key is not None:
            samples[smoke_key] = [*samples.get(smoke_key, []), self.smoke.budget]
        return samples

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-ready dict that :func:`parse_spec` turns back into an equal spec."""
        return self.model_dump(mode="json", by_alias=True)


def _rebuild() -> None:
    """A strategy or stopper was registered: validate and describe with the new unions."""
    fields = SweepSpec.model_fields
    fields["strategy"] = FieldInfo.merge_field_infos(FieldInfo.from_annotation(strategy_union()),
                                                     default_factory=GridStrategy)
    optional_stop: Any = Optional[stop_union()]  # noqa: UP007 - built at run time
    fields["early_stop"] = FieldInfo.merge_field_infos(FieldInfo.from_annotation(optional_stop), default=None)
    SweepSpec.model_rebuild(force=True)


on_change(_rebuild)


def spec_json_schema() -> dict[str, Any]:
    """JSON Schema of the spec's long form (a list is also accepted for a choice)."""
    return SweepSpec.model_json_schema(by_alias=True)

