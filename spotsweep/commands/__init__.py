"""The command line's commands: each module here declares its own (name, help, arguments and what
it runs) with :func:`command`; spotsweep/cli.py builds the parser from :func:`load`'s table.

A new command is a function ``(args, settings) -> exit code`` under ``@command("name", "help", args)``
in the module of its family, or in a new module named in :data:`MODULES`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

from spotsweep.shared.settings import Settings

Args = Callable[[argparse.ArgumentParser], None]  # adds a subcommand's arguments
Run = Callable[[argparse.Namespace, Settings], int]  # runs it; returns the exit code

# The modules that declare commands, in the order `spotsweep --help` lists them.
MODULES = ("local", "submit", "listing", "top", "sweeps", "artifacts", "processes")


@dataclass(frozen=True)
class Command:
    """One subcommand: its help, its arguments and what it runs (declared together, in its module)."""

    help: str
    args: Args
    run: Run


COMMANDS: dict[str, Command] = {}


def command(name: str, help: str, args: Args = lambda p: None) -> Callable[[Run], Run]:
    """Declare the subcommand ``name``: the decorated function runs it; ``args`` adds its arguments."""
    def register(run: Run) -> Run:
        COMMANDS[name] = Command(help, args, run)
        return run
    return register


def load() -> dict[str, Command]:
    """Every command, in :data:`MODULES`' order, then each module's own (modules import each other)."""
    for module in MODULES:
        import_module(f"{__name__}.{module}")
    return dict(sorted(COMMANDS.items(), key=lambda c: MODULES.index(c[1].run.__module__.rpartition(".")[2])))


# What more than one command's arguments share: the checked value types and the spec file.

def _whole(text: str, floor: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < floor:
        raise argparse.ArgumentTypeError(f"must be at least {floor}, got {value}")
    return value


def positive(text: str) -> int:
    return _whole(text, 1)


def port(text: str) -> int:
    value = positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 1 to 65535, got {text!r}")
    return value


def step(text: str) -> int:
    return _whole(text, 0)


def names(text: str) -> list[str]:
    found = [n.strip() for n in text.split(",") if n.strip()]
    if not found:
        raise argparse.ArgumentTypeError(f"expected NAME,NAME..., got {text!r}")
    return found


def spec_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", type=Path)
