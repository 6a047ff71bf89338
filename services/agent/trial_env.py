"""A trial's environment, from an allow-list: the node's secrets never reach it.

A trial is someone else's code on a node that holds the cluster's
credentials (the broker URL with its password, the S3 keys). Copying the
agent's environment would hand them over, so a trial gets only:

* the trial contract's variables (``SPOTSWEEP_PARAMS``, ``SPOTSWEEP_METRICS``
  ...: the runner's ``ours``, which win over everything) and the spec's
  ``env`` (the sweep author's own, passed as written);
* from the agent's environment, the names in :data:`PASS` and :data:`PASS_GLOBS`
  (what a program, the Python interpreter and the GPU runtime need to run;
  ``PYTHONPATH`` included: it names code, not secrets, and a sweep run from a
  checkout needs it) and the operator's extra names or globs
  (``SPOTSWEEP_TRIAL_ENV_PASS``);
* between the agent's and the spec's, the experiment trackers' ids
  (:func:`tracker_ids`), the same on every attempt, so a preempted trial goes
  on with its W&B run.

Whatever the lists say, :data:`DENY_GLOBS` (every ``SPOTSWEEP_*`` but
``SPOTSWEEP_HOME``, any name ending in ``_PASSWORD``, ``_TOKEN``, ``_KEY``...)
and the operator's ``SPOTSWEEP_TRIAL_ENV_DENY`` never pass from the agent.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase

PASS = frozenset({
    "PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL", "TERM",
    "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH",
    "PYTHONPATH", "PYTHONHOME", "PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONHASHSEED",
    "PYTHONDONTWRITEBYTECODE", "PYTHONWARNINGS", "PYTHONFAULTHANDLER", "PYTHONPYCACHEPREFIX",
    "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
})
PASS_GLOBS = ("LC_*", "CUDA_*", "NVIDIA_*", "NCCL_*")
# The agent's own settings that are no secret and that trials read (the trainer's data cache: $SPOTSWEEP_HOME/data).
SPOTSWEEP_PASS = frozenset({"SPOTSWEEP_HOME"})
# Never from the agent, whatever PASS or the operator says.
DENY_GLOBS = ("SPOTSWEEP_*", "*_PASSWORD", "*_PASSWD", "*_SECRET", "*_TOKEN", "*_KEY", "*_CREDENTIALS")


WANDB_ID_CHARS = 64  # W&B keeps run ids short; past this the id is cut and ends in a hash
_NOT_WANDB = re.compile(r"[^A-Za-z0-9_-]+")


def wandb_run_id(sweep_id: str, trial_id: str) -> str:
    """A W&B run id for a trial, the same for every attempt: the trial id (the sweep's id in front when it
    lacks it) made of letters, digits, ``-`` and ``_``; a long one cut, ending in a hash of the whole id."""
    full = trial_id if trial_id.startswith(sweep_id) else f"{sweep_id}.{trial_id}"
    slug = _NOT_WANDB.sub("-", full).strip("-") or "trial"
    if len(slug) <= WANDB_ID_CHARS:
        return slug
    digest = hashlib.sha256(full.encode()).hexdigest()[:12]
    return f"{slug[:WANDB_ID_CHARS - 13].rstrip('-')}-{digest}"


def tracker_ids(sweep_id: str, trial_id: str) -> dict[str, str]:
    """The trackers' variables every attempt of a trial gets alike (unless the
    spec's ``env`` sets them): W&B resumes the run of that id when it exists
    (``allow``) and starts it otherwise. MLflow has no such variable for a new
    run (its server makes run ids; ``MLFLOW_RUN_ID`` only names one that
    exists): a script finds its run by the ``SPOTSWEEP_TRIAL_ID`` it tagged it
    with (docs/trial-contract.md)."""
    return {"WANDB_RUN_ID": wandb_run_id(sweep_id, trial_id), "WANDB_RESUME": "allow"}


def names(setting: str | None) -> tuple[str, ...]:
    """``"A, B_*"`` (an operator's list: comma- or space-separated names or globs) as a tuple."""
    return tuple(n for n in (setting or "").replace(",", " ").split() if n)


def _any(name: str, globs: Iterable[str]) -> bool:
    return any(fnmatchcase(name, g) for g in globs)


def passes(name: str, extra: Iterable[str] = (), deny: Iterable[str] = ()) -> bool:
    """Whether the agent's variable ``name`` reaches a trial (``extra``, ``deny``: the operator's lists)."""
    if _any(name, deny) or (name not in SPOTSWEEP_PASS and _any(name, DENY_GLOBS)):
        return False
    return name in PASS or name in SPOTSWEEP_PASS or _any(name, PASS_GLOBS) or _any(name, extra)


def trial_environment(agent: Mapping[bytes, bytes], spec: Mapping[str, str], ours: Mapping[str, str],
                      extra: Iterable[str] = (), deny: Iterable[str] = (),
                      defaults: Mapping[str, str] | None = None) -> dict[bytes, bytes]:
    """The environment a trial runs with, as bytes for ``Popen``: the agent's
    variables that :func:`passes`, then ``defaults`` (:func:`tracker_ids`),
    then the spec's ``env``, then ``ours`` (the trial contract's, which nothing overrides)."""
    extra, deny = tuple(extra), tuple(deny)
    env = {k: v for k, v in agent.items() if passes(os.fsdecode(k), extra, deny)}
    env.update((os.fsencode(k), os.fsencode(v)) for k, v in (defaults or {}).items())
    env.update((os.fsencode(k), os.fsencode(v)) for k, v in spec.items())
    env.update((os.fsencode(k), os.fsencode(v)) for k, v in ours.items())
    return env
