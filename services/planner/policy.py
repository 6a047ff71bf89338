"""Who may command the planner, and what a sweep may run: the planner's policy (docs/security.md).

Both checks are off by default (a one-user setup keeps working).
``SPOTSWEEP_SUBMITTERS`` names the broker users whose commands are taken, by
the AMQP ``user_id`` RabbitMQ validates against the login (a message without
one is refused). ``SPOTSWEEP_ALLOWED_COMMANDS`` holds ``fnmatch`` globs the
spec's command template must match as one ``shlex.join``-ed line, so an
argument holding spaces cannot pass for several; under a policy the spec's
``env`` may not set what chooses the program (:data:`CODE_VARIABLES`).

Pure functions of plain values; no I/O.
"""

from __future__ import annotations

import fnmatch
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from spotsweep.shared.limits import cap_text

# Variables that choose the program or load code into it: with a command
# policy, a spec may not set them (they would run what the policy refuses).
CODE_VARIABLES = frozenset({
    "PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONEXECUTABLE", "BASH_ENV", "ENV",
    "NODE_OPTIONS", "NODE_PATH", "PERL5OPT", "PERL5LIB", "RUBYOPT", "RUBYLIB", "JAVA_TOOL_OPTIONS",
})
CODE_PREFIXES = ("LD_", "DYLD_")


def listed(text: str | None) -> tuple[str, ...]:
    """A comma-separated setting as its items, blanks dropped."""
    return tuple(item.strip() for item in (text or "").split(",") if item.strip())


@dataclass(frozen=True)
class Policy:
    """``submitters``: None accepts every sender; ``allowed_commands``: empty allows every command."""

    submitters: frozenset[str] | None = None
    allowed_commands: tuple[str, ...] = ()

    @classmethod
    def of(cls, submitters: str | None, allowed_commands: str | None) -> Policy:
        """From the settings' comma-separated values (PlannerSettings)."""
        users = listed(submitters)
        return cls(frozenset(users) if users else None, listed(allowed_commands))


def sender_problem(policy: Policy, user_id: str | None) -> str | None:
    """Why the planner does not take a command from broker user ``user_id``; None when it does."""
    if policy.submitters is None or (user_id is not None and user_id in policy.submitters):
        return None
    sender = "no user_id" if user_id is None else f"broker user {cap_text(repr(user_id), 80)}"
    allowed = ", ".join(repr(u) for u in sorted(policy.submitters))
    return f"not a submitter: sent by {sender}; the planner takes sweep commands only from {allowed} (SPOTSWEEP_SUBMITTERS)"


def command_line(command: Iterable[str]) -> str:
    """The argv template as the policy's globs see it: shell-quoted, slots unfilled."""
    return shlex.join(list(command))


def command_problem(policy: Policy, command: Iterable[str], env: Mapping[str, str]) -> str | None:
    """Why ``command`` (with the spec's ``env``) may not run under ``policy``; None when it may."""
    if not policy.allowed_commands:
        return None
    line = command_line(command)
    if not any(fnmatch.fnmatchcase(line, pattern) for pattern in policy.allowed_commands):
        patterns = ", ".join(repr(p) for p in policy.allowed_commands)
        return (f"command {cap_text(repr(line), 300)} is not allowed: it matches none of the planner's "
                f"SPOTSWEEP_ALLOWED_COMMANDS ({cap_text(patterns, 600)})")
    code = sorted(k for k in env if k in CODE_VARIABLES or k.startswith(CODE_PREFIXES))
    if code:
        return (f"env may not set {', '.join(cap_text(k, 60) for k in code[:5])} under the planner's "
                "SPOTSWEEP_ALLOWED_COMMANDS: it changes which program or code runs")
    return None
