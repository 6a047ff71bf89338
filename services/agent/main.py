"""``spotsweep agent``: one process per node, one slot per GPU.

Agents need RabbitMQ and S3 only, never the database: scaling out is
starting this on more nodes.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Callable, Collection
from functools import partial
from pathlib import Path

from spotsweep.services.agent import announce, cgroup, container, hold, idle, notice, url_policy
from spotsweep.services.agent.capacity import Ledger, detect, share
from spotsweep.services.agent.handlers import (
    Connection, handle_control, handle_trial, resume_after_cooldown, send_notices,
)
from spotsweep.services.agent.health import Health
from spotsweep.services.agent.inputs import allowed_roots
from spotsweep.services.agent.insecure import (
    broker_user, check_setup, check_store_settings, check_writable, forget_credentials, non_dumpable, planner_users,
)
from spotsweep.services.agent.launch import WATCHDOG
from spotsweep.services.agent.runner import RunnerConfig, kill_all
from spotsweep.services.agent.unpack import Caps, MiB
from spotsweep.services.agent.state import Agent, Slots
from spotsweep.services.agent.trial_env import names
from spotsweep.services.agent.trial_user import UserPool
from spotsweep.shared import log, topology
from spotsweep.shared import metrics as exported
from spotsweep.shared.artifacts import open_store
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.broker.port import Broker, Consumer
from spotsweep.shared.health import probes
from spotsweep.shared.health_startup import CurrentBroker, broker_check, first_broker, reusing
from spotsweep.shared.middleware import Backoff
from spotsweep.shared.quantity import human_bytes
from spotsweep.shared.runtime import Cleanup, ExitCode, broker_factory, serve, with_startup_retries
from spotsweep.shared.settings import AgentSettings, Settings, default

_log = log.get("spotsweep.agent")


def detect_gpus() -> list[str]:
    """GPU indexes from ``nvidia-smi -L``; none on a CPU node."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def start(
    broker: Broker, store: ArtifactStore, slots: Slots, resource_class: str = "gpu", workdir: Path | None = None,
    agent_id: str | None = None, log_upload_seconds: float = default(Settings, "log_upload_seconds"),
    code_dir: Path | None = None,
) -> Connection:
    """:func:`connect` a new agent (one connection, as local mode and tests use it); ``code_dir``:
    local mode's workdir, where trials run in place."""
    agent_id = agent_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:4]}"
    # Trials run as the user who started local mode: any node path theirs to read, but the system's (inputs.py).
    config = RunnerConfig(agent_id=agent_id, workdir=workdir or Path(tempfile.gettempdir()) / "spotsweep-agent",
                          log_upload_seconds=log_upload_seconds, code_dir=code_dir, input_paths=("/",))
    return connect(broker, Agent(store=store, config=config, slots=slots,
                                 ledger=Ledger(detect(None, None, resource_class, gpus=slots.gpus))), resource_class)


def connect(broker: Broker, agent: Agent, resource_class: str = "gpu",
            accept_users: Collection[str] | None = None, own_user: str | None = None) -> Connection:
    """Declare, subscribe to control messages, and consume trials with one worker per slot.

    ``accept_users``: the broker users whose trials and control messages run
    (the planner's, :func:`~.insecure.planner_users`); the dispatcher dead-letters any
    other sender's before a handler sees it. None: every sender (local mode).
    ``own_user``: the agent's broker user; when it is not accepted, a trial
    is handed back by requeueing it, not republished under this user.

    Called again on every reconnection with the same ``agent`` (so GPUs held
    by trials of a dead connection are not handed out twice, and a node found
    broken stays out).
    """
    broker.declare([topology.dead_letter_queue(), topology.trial_queue_spec(resource_class)])
    conn = Connection(broker=broker, agent=agent, republish=accept_users is None or own_user in accept_users)
    agent.slots.use_workdir(agent.config.workdir)
    control_queue = broker.declare_private_queue([(topology.CONTROL_EXCHANGE, "")])
    broker.consume(control_queue, partial(handle_control, conn=conn), prefetch=10, accept_users=accept_users)
    send_notices(conn)
    announce.start(broker, agent, resource_class, conn.lost)  # what it offers, for submit and status (issue 30)

    count = agent.slots.count
    conn.resume = partial(consume_trials, broker, conn, resource_class, count, count, accept_users)
    if agent.health.tripped:
        _log.error(f"not taking trials for another {agent.health.remaining():.0f} s: recent failures of several "
                   "sweeps blamed this node", detail=agent.health.summary())
        resume_after_cooldown(conn)
        return conn
    conn.resume()
    _log.info("agent ready", agent=agent.config.agent_id, slots=count, resource_class=resource_class)
    return conn


def consume_trials(broker: Broker, conn: Connection, resource_class: str, prefetch: int, concurrency: int,
                   accept_users: Collection[str] | None = None) -> Consumer:
    """Subscribe ``handle_trial`` to the class's trials queue (at start, and after a breaker's cooldown);
    only ``accept_users``' trials run (see :func:`connect`)."""
    consumer = broker.consume(
        # No in-place retry: a trial handler that raised has lost its delivery
        # (the broker went away) and the trial is redelivered to some agent.
        topology.trials_queue(resource_class), conn.agent.idle.track(partial(handle_trial, conn=conn)), retry=Backoff(attempts=1),
        # Deliveries prefetched but not started when this consumer is cancelled
        # (a drain, a breaker trip) go to handle_trial, which hands them back
        # unmarked, instead of being requeued marked "redelivered": the next
        # agent would count each as a loss.
        prefetch=prefetch, concurrency=concurrency, finish_buffered=True, accept_users=accept_users,
        slow_after=None,  # the handler lasts as long as the training run: never "slow"
    )
    conn.trials_consumer = consumer
    return consumer


CONSUMER_TIMEOUT_HINT = (
    "RabbitMQ's consumer_timeout closed the delivery of a trial that ran longer than it allows ({reason}); "
    "the trial goes back to the queue and resumes from its last checkpoint, but would be cut off again: raise "
    "consumer_timeout above your longest trial (deploy/rabbitmq.conf, docs/faults.md)"
)


def describe_loss(close_reason: str | None) -> str:
    """Why a connection's running trials were lost, in words a user can act on."""
    if close_reason and "delivery acknowledgement" in close_reason and "timed out" in close_reason:
        return CONSUMER_TIMEOUT_HINT.format(reason=close_reason)
    if close_reason == hold.LAPSED:
        return close_reason
    if close_reason:
        return f"RabbitMQ closed the agent's channel: {close_reason}"
    return "the agent's connection to RabbitMQ was lost"


def notice_watcher(kind: str, url: str | None, interval: float = 5.0) -> Callable[[Callable[[], None]], None] | None:
    """``serve``'s ``watch`` hook for ``--preemption-notice``; None for ``signal``."""
    if kind == "signal":
        return None
    poller = notice.MetadataPoller(kind, url or notice.DEFAULT_URLS[kind])

    def begin(drain: Callable[[], None]) -> None:
        stop = threading.Event()
        notice.watch(poller, lambda reason: drain(), stop, interval)

    return begin


def gpu_groups(gpus: list[str], per_slot: int) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` value of each slot: 8 GPUs, 2 per slot -> "0,1", "2,3", ..."""
    per_slot = max(1, per_slot)
    return [",".join(gpus[i:i + per_slot]) for i in range(0, len(gpus) - per_slot + 1, per_slot)]


def bound_drain(seconds: float, kill: Callable[[], None], done: threading.Event,
                exit_now: Callable[[int], None] = os._exit) -> threading.Thread:
    """Give a drain a deadline: still draining ``seconds`` after it began, stop as on a second SIGTERM (exit 137;
    unacked trials go back to the queue, a loss each). A drain's last steps (logs, final events, acks) each wait on
    S3 or RabbitMQ: a hung endpoint or a resource alarm would keep the node busy long after the platform expects it gone."""

    def watchdog() -> None:
        if done.wait(seconds):
            return
        _log.error(f"drain not done {seconds:g} s after it began (--grace + --after-grace): stopping now; "
                   "unacked trials go back to the queue and count as lost")
        kill()
        exit_now(ExitCode.KILLED)

    thread = threading.Thread(target=watchdog, name="drain-deadline", daemon=True)
    thread.start()
    return thread


def _slots(settings: AgentSettings) -> tuple[Slots, UserPool | None]:
    """This process hardened (a trial may run as our user), and its slots and trial users."""
    # A trial may run as this user: it must not read our /proc entries, nor inherit credentials (docs/security.md).
    non_dumpable()
    forget_credentials()
    trial_users = UserPool.from_setting(settings.trial_user)
    gpus = gpu_groups(detect_gpus(), settings.gpus_per_slot)
    pool = Slots(settings.slots or max(1, len(gpus)), gpus)
    if trial_users is not None and len(trial_users.users) < pool.count:
        _log.warning(f"--trial-user: {len(trial_users.users)} user(s) for {pool.count} slots: trials running at once "
                     "share a user and can read each other's files; give one user per slot")
    return pool, trial_users


def _observed(settings: AgentSettings, pool: Slots) -> CurrentBroker:
    """--metrics-port: the probes answer (503) while we still wait for RabbitMQ; the slot gauges."""
    current = CurrentBroker()
    probes(settings.metrics_host, settings.metrics_port,
           {"rabbitmq": broker_check(current, topology.trials_queue(settings.resource_class))})
    exported.export(exported.AGENT)
    exported.AGENT_SLOTS.set(pool.count)
    exported.AGENT_SLOTS_BUSY.set_function(lambda: pool.busy)
    return current


def _keep_hold(current: CurrentBroker, heartbeat: int, done: threading.Event) -> None:
    """Hold the running attempts on a lease renewed while the broker is heard (services/agent/hold.py): past
    it the watchdog kills them, and a lapse closes the connection, so that no attempt runs twice at once."""
    def lapsed() -> None:
        kill_all()
        if current.broker is not None:
            current.broker.abandon(hold.LAPSED)

    hold.keep(hold.HOLD, heartbeat, lambda: current.broker.heard_age() if current.broker is not None else None,
              WATCHDOG.renew, lapsed, done)


def _agent(settings: AgentSettings, pool: Slots, trial_users: UserPool | None) -> Agent:
    """The agent's state, over its artifact store (checked writable when it is S3)."""
    agent_id = f"{socket.gethostname()}-{os.getpid()}"
    store = with_startup_retries(lambda: open_store(settings), "open the artifact store")
    if settings.s3_endpoint:
        check_writable(store, agent_id)
    workdir = settings.workdir or Path(tempfile.gettempdir()) / "spotsweep-agent"
    cgroups = cgroup.find()
    if cgroups is not None:
        cgroups.remove_stale()
    capacity = detect(settings.cpus, settings.memory, settings.resource_class,
                      cgroups.own_limit() if cgroups is not None else None, pool.gpus)
    policy = container.Policy(pids=settings.pids_limit, tmp_bytes=settings.tmp_size, memory=share(capacity, pool.count),
                              host_network=settings.allow_host_network)
    runtime = container.from_settings(settings.runtime, settings.default_image, workdir, policy)
    _log.info(f"offering trials {capacity.cpus:g} cores and {human_bytes(capacity.memory)} in all; "
              + (f"each in a container ({settings.runtime}; default image {settings.default_image or 'none'})" if runtime else
                 f"a memory cgroup per trial (v{cgroups.version}, {cgroups.path})" if cgroups is not None else
                 "no memory cgroups here: the resource monitor enforces resources.memory"))
    config = RunnerConfig(agent_id=agent_id, workdir=workdir,
                          log_upload_seconds=settings.log_upload_seconds, trial_users=trial_users,
                          trial_env_pass=names(settings.trial_env_pass), trial_env_deny=names(settings.trial_env_deny),
                          reap_orphans=True, code_caps=Caps(bytes=int(settings.workdir_limit_mib * MiB)),
                          pip_envs_bytes=int(settings.pip_envs_gib * 2**30),
                          input_cache_bytes=int(settings.input_cache_size * 2**30), cgroups=cgroups, runtime=runtime,
                          url_policy=url_policy.Policy.from_setting(
                              settings.allow_input_hosts, min(settings.max_input_bytes, int(settings.input_cache_size * 2**30)),
                              settings.input_deadline, settings.input_min_rate),
                          input_paths=allowed_roots(settings.input_paths))
    return Agent(store=store, config=config, slots=pool, ledger=Ledger(capacity),
                 health=Health(limit=settings.max_node_failures, cooldown=settings.node_cooldown,
                               own_paths=(str(workdir.resolve()),)), grace=settings.grace)


def main(settings: AgentSettings) -> int:
    """The agent process; its knobs (flags or SPOTSWEEP_* variables) are ``settings``'s."""
    check_setup(settings, os.geteuid())
    resource_class, grace = settings.resource_class, settings.grace
    pool, trial_users = _slots(settings)
    check_store_settings(settings)
    current = _observed(settings, pool)
    agent = _agent(settings, pool, trial_users)
    first = first_broker(settings, settings.startup_timeout)
    done = threading.Event()  # serve() returned: the drain deadline has nothing left to bound
    _keep_hold(current, settings.heartbeat, done)
    deadline_lock = threading.Lock()
    deadline: list[threading.Thread] = []

    accept_users = planner_users(settings)
    _log.info("taking trials and control messages only from the broker user(s) " + ", ".join(sorted(accept_users)))

    def start_on(broker: Broker) -> Cleanup:
        conn = connect(broker, agent, resource_class, accept_users, broker_user(settings))
        current.broker = broker

        def lost() -> None:
            # When this connection ends, its deliveries are void: trials still
            # running on it are stopped (RabbitMQ hands them out again).
            conn.lost_reason = describe_loss(broker.close_reason)
            if broker.close_reason:
                _log.error("running trials lost with the channel", reason=conn.lost_reason)
            conn.lost.set()
            # Let the stopped trials' handlers note what was lost, so the next
            # connection reports it (their processes die within a poll).
            conn.wait_idle(timeout=15)

        return lost

    quiet = threading.Event()  # set by --exit-when-idle: its drain stops taking trials, preempts nothing

    def drain() -> None:
        # Preemption: running trials get SIGTERM and up to --grace seconds to
        # checkpoint (then SIGKILL); each is then reported preempted and acked,
        # and the planner puts it back for another node to resume. The whole
        # drain is bounded by --grace + --after-grace.
        if quiet.is_set():
            quiet.clear()  # an idle exit's own drain; a SIGTERM after it still preempts
            return
        exported.AGENT_PREEMPTIONS.inc()
        agent.preempt.set()
        with deadline_lock:  # a notice, then the platform's SIGTERM: one deadline, from the first
            if not deadline:
                deadline.append(bound_drain(grace + settings.after_grace, kill, done))

    def kill() -> None:
        agent.kill.set()
        kill_all()

    try:
        return serve(reusing(first, broker_factory(settings)), start_on, drain, kill,
                     watch=idle.both(notice_watcher(settings.preemption_notice, settings.metadata_url, settings.notice_interval),
                                     idle.watcher(agent.idle, settings.exit_when_idle, quiet)))
    finally:
        done.set()
        kill_all()  # whatever way we leave, no trial runs on unsupervised
        pool.remove_workspaces()
