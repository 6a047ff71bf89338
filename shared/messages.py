"""Every message on the wire: frozen pydantic models with one envelope.

``decode`` is the only way bytes become a message, and it raises only
:class:`DecodeError`; services dead-letter what it refuses. Bump
``SCHEMA_VERSION`` on an incompatible change; decoders refuse newer versions.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Annotated, Any, Literal, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from spotsweep.shared.errors import DecodeError
from spotsweep.shared.inputs import Input
from spotsweep.shared.limits import Limits
from spotsweep.shared.nonfinite import json_safe as json_safe  # re-exported: the stores import it from here

# 2: limits on trial messages, run ids, failure kinds, trial.stop and trial.lost, progress.
# 3: metric points as columns (version-2 bodies with a list of points still decode).
# 4: a run shorter than one poll sends its start inside its end (``TrialFinished.started``).
# (TrialMessage.resume_from is optional and older builds ignore it, so it needed no bump: a bump would make
# every older agent refuse every trial message during a rolling upgrade.)
SCHEMA_VERSION = 4


def _now() -> datetime:
    return datetime.now(timezone.utc)


def new_id() -> str:
    return uuid.uuid4().hex


class Envelope(BaseModel):
    """Fields every message carries: who it is about, and when."""

    # NaN and infinities are real metric values (a diverged loss): keep them
    # on the wire as JSON's NaN/Infinity tokens instead of pydantic's null.
    # Unknown fields are ignored, so adding an optional field is not a breaking
    # change (an older build drops it); ``schema_version`` marks breaking ones.
    model_config = ConfigDict(frozen=True, extra="ignore", ser_json_inf_nan="constants")

    message_id: str = Field(default_factory=new_id)
    schema_version: int = SCHEMA_VERSION
    sweep_id: str
    trial_id: str | None = None
    attempt: int | None = None
    time: datetime = Field(default_factory=_now)


class ResumeFrom(BaseModel):
    """What the planner knows of the trial's checkpoints when it publishes an attempt, so the
    agent's start need not list them in S3. ``folder`` None: no run has started, so a first
    delivery touches S3 not at all. Else the newest checkpoint folder the journal recorded, a
    hint: the agent still follows ``LATEST`` first (:func:`~.artifacts.checkpoints.restore_known`)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    folder: str | None = Field(default=None, pattern=r"^\d{12}-[0-9a-f]{1,32}$")
    step: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _step_of_folder(self) -> ResumeFrom:
        if self.folder is not None and self.step is not None and int(self.folder[:12]) != self.step:
            raise ValueError(f"step {self.step} is not the step of folder {self.folder!r}")
        return self


class TrialMessage(Envelope):
    """Run one attempt of one trial. Published by the planner, consumed by agents."""

    kind: Literal["trial"] = "trial"
    trial_id: str
    attempt: int
    trial_name: str
    index: int
    params: dict[str, Any]
    argv: list[str]
    env: dict[str, str] = Field(default_factory=dict)
    metric: str
    gpus: int = 0
    resource_class: str = "gpu"
    # The spec's resources.cpus (cores) and resources.memory (bytes): reserved on the agent, memory enforced.
    # None: no request (an older planner's message too). An older agent ignores them.
    cpus: float | None = None
    memory: int | None = None
    # Limits the agent enforces (from the spec's retries and timeout blocks).
    max_lost: int = 10  # deliveries of this attempt lost with their agent before it is dead-lettered
    stall_timeout: float | None = None  # seconds without a line from the trial before it is killed
    total_timeout: float | None = None  # seconds of running time over all attempts before it is killed
    elapsed: float = 0.0  # running time of the earlier attempts, seconds
    progress: bool = False  # also send the objective's points to the planner (early stopping decides on them)
    limits: Limits = Field(default_factory=Limits)  # what the agent accepts from the trial's files (spec ``limits``)

    @field_validator("limits", mode="before")
    @classmethod
    def _known_limits(cls, value: Any) -> Any:
        """Ignore limits this build does not know: ``Limits`` forbids unknown keys in a
        spec (a typo), but on the wire a newer planner's new limit must not break an older agent."""
        if isinstance(value, dict):
            return {k: v for k, v in value.items() if k in Limits.model_fields}
        return value
    metric_mode: Literal["min", "max"] = "min"  # the objective's direction (``checkpoint_keep: best``)
    checkpoint_keep: Literal["last", "best", "all"] = "last"  # spec ``checkpoints.keep``: what the agent leaves in the store
    # The sweep's packed workdir (``code/<sha256>.tar.gz``): the trial runs in a fresh copy of it. An agent
    # older than this field ignores it and runs the command in an empty folder (docs/trial-contract.md).
    workdir_sha256: str | None = None
    # What the planner knows of the trial's checkpoints (:class:`ResumeFrom`). None: it does not say (a
    # planner older than this field), and the agent lists the trial's checkpoint prefix as it always did.
    resume_from: ResumeFrom | None = None
    # The spec's ``setup.pip``: the trial runs in the virtualenv the agent builds from this requirements file of the
    # workdir (services/agent/pyenv.py). An agent older than this field runs it in its own environment.
    setup_pip: str | None = None
    # The spec's ``inputs``, staged by the agent before the trial starts (services/agent/inputs.py). An
    # agent older than this field ignores it and the trial finds no data at ``to``.
    inputs: list[Input] = Field(default_factory=list)
    # The spec's ``image``, ``network`` and ``resources.shm``, for agents with a container runtime
    # (services/agent/container.py). An agent older than these fields runs the command as a process.
    image: str | None = None
    network: Literal["bridge", "host", "none"] = "bridge"
    shm: int | None = None


class TrialStarted(Envelope):
    """An attempt's process started. ``run_id`` names this one run of it: a
    redelivered attempt starts again under a new run id."""

    kind: Literal["trial.started"] = "trial.started"
    trial_id: str
    attempt: int
    agent: str
    run_id: str = ""
    resume_step: int | None = None
    redelivered: bool = False  # the broker redelivered the attempt: its previous holder vanished
    losses: int = 0  # how many times that has happened to this attempt
    staging: float | None = None  # seconds spent staging the trial's inputs before it started (journalled); None: none
    image: str | None = None  # "<image> <id>": the image the run's container runs and its id (journalled); None: a process


class MetricPoint(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", ser_json_inf_nan="constants")
    step: int
    name: str
    value: float


class TrialStaging(Envelope):
    """An attempt is being set up before its process starts: inputs staged, its setup.pip env built, its
    image pulled (``run_id`` names the coming run). Journalled by the collector, so ``status`` counts the
    trial as staging, not as training; the ``trial.started`` that follows says how long it took."""

    kind: Literal["trial.staging"] = "trial.staging"
    trial_id: str
    attempt: int
    agent: str
    run_id: str = ""


class TrialMetrics(Envelope):
    """A batch of points from one attempt, in the order the script wrote them.

    On the wire as three columns (``steps``, ``names``, ``values``): one JSON array each instead of
    one object per point, many times cheaper to encode and decode at hundreds of thousands of points
    a second (measured by bench/points_wire.py, now in git history). ``points=[...]`` still builds
    one (a version-2 body still decodes); ``.points`` reads them back as objects."""

    kind: Literal["trial.metrics"] = "trial.metrics"
    trial_id: str
    attempt: int
    steps: list[int]
    names: list[str]
    values: list[float]

    @model_validator(mode="before")
    @classmethod
    def _from_points(cls, data: Any) -> Any:
        if isinstance(data, dict) and "points" in data:
            data = dict(data)
            points = data.pop("points")
            rows = [p if isinstance(p, MetricPoint) else MetricPoint.model_validate(p) for p in points]
            data.update(steps=[p.step for p in rows], names=[p.name for p in rows], values=[p.value for p in rows])
        return data

    @model_validator(mode="after")
    def _same_lengths(self) -> TrialMetrics:
        if not len(self.steps) == len(self.names) == len(self.values):
            raise ValueError(f"steps, names and values must be as long as each other "
                             f"(got {len(self.steps)}, {len(self.names)}, {len(self.values)})")
        return self

    @property
    def points(self) -> list[MetricPoint]:
        return [MetricPoint(step=s, name=n, value=v) for s, n, v in zip(self.steps, self.names, self.values)]


class TrialProgress(Envelope):
    """The objective's new points of a running attempt, for the planner's early
    stopping (median, Hyperband without a budget parameter). Sent only when the
    trial message asks for it, at most once per metrics batch."""

    kind: Literal["trial.progress"] = "trial.progress"
    trial_id: str
    attempt: int
    run_id: str = ""
    points: list[tuple[int, float]]  # (step, value) of the trial's metric, in the order reported
    # Anomaly flags the agent raised on the run (``nan``, ``stalled``, ...), sent
    # once each as they rise, with or without points, whether or not the trial
    # message asked for progress: the planner adds them to ``trials.flags``.
    flags: list[str] = Field(default_factory=list)


class CheckpointSaved(Envelope):
    kind: Literal["trial.checkpoint"] = "trial.checkpoint"
    trial_id: str
    attempt: int
    step: int
    uri: str


Outcome = Literal["completed", "failed", "cancelled", "preempted"]
# Why an attempt failed, for the planner's retry policy: ``exit`` a non-zero
# exit, ``oom`` a CUDA out-of-memory exit, ``stalled`` no line for
# timeout.stall, ``timeout`` past timeout.total, ``lost`` the attempt kept
# killing its agents (dead-lettered), ``agent`` the agent itself broke,
# ``refused`` its input was (a code archive, a command that cannot start, a
# checkpoint that cannot be restored): retried like ``exit``, never the node's fault;
# ``image`` its container image cannot be pulled: not retried; ``killed`` a SIGKILL the agent did not send,
# with no OOM evidence (``docker kill``, ``kill -9``): a crash, retried like ``exit``, never on_oom's.
# (A new kind that older planners refuse: upgrade the planner before the agents.)
Failure = Literal["exit", "oom", "stalled", "timeout", "lost", "agent", "refused", "image", "killed"]


class TrialFinished(Envelope):
    """The attempt ended. ``metrics`` are the last reported value of each name."""

    kind: Literal["trial.finished"] = "trial.finished"
    trial_id: str
    attempt: int
    outcome: Outcome
    exit_code: int | None = None
    error: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    last_step: int | None = None
    agent: str = ""
    run_id: str = ""
    logs_uri: str | None = None
    failure: Failure | None = None  # set when outcome is failed
    duration: float | None = None  # seconds this attempt's process ran
    # What the agent skipped or cut from the trial's output (a line over a
    # limit, a bad metric name, a truncated log): short tags and human text.
    flags: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    # The run's start, when its process ended before the agent sent it (within
    # one poll of starting): one message where there were two. The planner
    # decides and journals it as if it had come on its own, just before this.
    started: TrialStarted | None = None

    @model_validator(mode="after")
    def _one_run(self) -> TrialFinished:
        s = self.started
        if s is not None and (s.sweep_id, s.trial_id, s.attempt, s.run_id) != (self.sweep_id, self.trial_id, self.attempt,
                                                                               self.run_id):
            raise ValueError(f"started: the start of run {s.run_id!r} of {s.trial_id} attempt {s.attempt} rides on the end "
                             f"of run {self.run_id!r} of {self.trial_id} attempt {self.attempt}: it must be the same run")
        return self


class TrialLost(Envelope):
    """An agent lost a running attempt's delivery (its channel or connection closed under it) and
    stopped the process; published once it is connected again, so the planner can show why."""

    kind: Literal["trial.lost"] = "trial.lost"
    trial_id: str
    attempt: int
    agent: str
    run_id: str = ""
    reason: str
    duration: float | None = None  # seconds the lost run's process ran (counted in the trial's running time)


class AgentSeen(Envelope):
    """What an agent offers its trials, announced when it connects and every minute after, so
    ``submit`` and ``status`` can name a request no agent of its class can ever hold (``sweep_id``
    empty). An older collector dead-letters it; an older agent never sends it (and is not judged)."""

    kind: Literal["agent.seen"] = "agent.seen"
    sweep_id: str = ""
    agent: str = Field(min_length=1, max_length=255)
    resource_class: str = Field(min_length=1, max_length=255)
    slots: int = Field(ge=0, le=2**31 - 1)
    cpus: float = Field(ge=0, allow_inf_nan=False)  # cores offered to all its trials together (--cpus, else detected)
    memory: int = Field(ge=0, le=2**63 - 1)  # bytes offered to all its trials together (--memory, else detected)
    gpus: int = Field(default=0, ge=0, le=2**31 - 1)  # GPUs each slot gets


class SubmitSweep(Envelope):
    """Start a sweep: posted to ``spotsweep.sweeps`` by ``spotsweep submit``.
    ``sweep_id`` names the sweep (``name-<hex8>``); a redelivery is a no-op."""

    kind: Literal["sweep.submit"] = "sweep.submit"
    spec: dict[str, Any]  # the sweep spec as JSON (checked by the planner, which records a bad one as rejected)


class CancelSweep(Envelope):
    """Cancel a sweep: posted to ``spotsweep.sweeps`` by ``spotsweep cancel``; broadcast to agents."""

    kind: Literal["sweep.cancel"] = "sweep.cancel"


class ExtendSweep(Envelope):
    """More trials and/or new budget caps for spec version ``version`` of a sweep
    (``spotsweep extend``): a redelivered one, whose version is no longer current, changes nothing."""

    kind: Literal["sweep.extend"] = "sweep.extend"
    version: int
    trials: int = 0
    budget: dict[str, Any] = Field(default_factory=dict)


StopReason = Literal["duplicate", "ended", "pruned", "stale"]


class StopTrial(Envelope):
    """Broadcast by the planner: stop run ``run_id`` of an attempt, without a report. ``duplicate``:
    another run of the attempt counts; ``ended``: the trial already ended; ``pruned``: early
    stopping ended it; ``stale``: a run of an earlier attempt."""

    kind: Literal["trial.stop"] = "trial.stop"
    trial_id: str
    attempt: int
    run_id: str
    reason: StopReason


# Every message model, listed once; which queue takes each kind is shared/topology.py's (its *_KINDS tables,
# which tests/shared/test_topology.py holds these to).
EVENTS: tuple[type[Envelope], ...] = (TrialStarted, TrialFinished, TrialLost, TrialProgress, TrialMetrics, CheckpointSaved,
                                      TrialStaging, AgentSeen)
COMMANDS: tuple[type[Envelope], ...] = (SubmitSweep, CancelSweep, ExtendSweep)  # on ``spotsweep.sweeps``
CONTROLS: tuple[type[Envelope], ...] = (CancelSweep, StopTrial)  # to every agent
# Union[...] of a tuple: the discriminated unions are built from the lists above (mypy cannot follow that).
_MESSAGE: TypeAdapter[Envelope] = TypeAdapter(
    Annotated[Union[(TrialMessage, *EVENTS, *CONTROLS)], Field(discriminator="kind")])  # type: ignore[arg-type]
_COMMAND: TypeAdapter[SubmitSweep | CancelSweep | ExtendSweep] = TypeAdapter(
    Annotated[Union[COMMANDS], Field(discriminator="kind")])  # type: ignore[arg-type]
COMMAND_KINDS = tuple(m.model_fields["kind"].default for m in COMMANDS)


def encode(message: Envelope) -> bytes:
    return message.model_dump_json().encode()


def unpack(message: Envelope) -> list[Envelope]:
    """The events one message stands for, in order: a run's end that carries
    its start (``TrialFinished.started``) is both, the start first."""
    if isinstance(message, TrialFinished) and message.started is not None:
        return [message.started, message]
    return [message]


_E = TypeVar("_E", bound=Envelope)


def _checked(validate: Callable[[], _E], what: str) -> _E:
    """``validate()``'s message, or :class:`DecodeError` naming a bad field or a newer schema version."""
    try:
        msg = validate()
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise DecodeError(f"undecodable {what}: {where}: {first['msg']}") from e
    if msg.schema_version > SCHEMA_VERSION:
        raise DecodeError(f"schema_version {msg.schema_version} is newer than this build ({SCHEMA_VERSION})")
    return msg


def decode(body: bytes) -> Envelope:
    """Bytes to a message, or :class:`DecodeError` naming what is wrong."""
    return _checked(lambda: _MESSAGE.validate_json(body), "message")


def decode_command(data: Any) -> SubmitSweep | CancelSweep | ExtendSweep:
    """A sweeps-queue command from its parsed JSON body, or :class:`DecodeError` naming what is wrong."""
    return _checked(lambda: _COMMAND.validate_python(data), "sweep command")


_EVERY: TypeAdapter[Envelope] = TypeAdapter(Annotated[Union[tuple(dict.fromkeys((TrialMessage, *EVENTS, *CONTROLS,
                                                                                    *COMMANDS)))],
                                                       Field(discriminator="kind")])  # type: ignore[arg-type]


def json_schemas() -> dict[str, Any]:
    """JSON Schema of every message (the sweeps queue's commands too), for ``spotsweep schema``."""
    return _EVERY.json_schema()
