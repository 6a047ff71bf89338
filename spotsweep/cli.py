"""The ``spotsweep`` command line: the parser, built from the commands spotsweep/commands/ declares, and
the exit codes. Only the module of the command that runs is imported (:func:`spotsweep.commands.load`).

Errors the user can act on (a bad spec, a missing sweep, a service that is
down) print one clear message and exit with a named code; never a traceback.
"""

from __future__ import annotations

import argparse
import sys

from spotsweep import __version__
from spotsweep.commands import COMMANDS, load
from spotsweep.services.reporter.safe import printable
from spotsweep.shared import log
from spotsweep.shared.errors import PermanentError, RetryableError, SpecError, SpotsweepError, UnsafeSetup
from spotsweep.shared.runtime import ExitCode
from spotsweep.shared.settings import PROCESSES, Settings
from spotsweep.shared.settings_cli import load as load_settings

# What a refused command exits with, the first class that matches (SpecError, a PermanentError, prints each field).
EXIT_CODES = {UnsafeSetup: ExitCode.UNSAFE, PermanentError: ExitCode.USAGE, RetryableError: ExitCode.UNAVAILABLE,
              SpotsweepError: ExitCode.FAILED}


def _parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command with its arguments; with ``only``, that command's arguments alone (the others
    are listed, their modules not imported: "" for none, as `spotsweep --help` needs)."""
    p = argparse.ArgumentParser(prog="spotsweep", description="Hyperparameter sweeps on spot GPUs.")
    p.add_argument("--version", action="version", version=f"spotsweep {__version__}")
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING... (default INFO; WARNING for run, whose UI is a progress bar)")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for name, (_, help) in COMMANDS.items():
        added = sub.add_parser(name, help=help)
        if only in (None, name):
            load(name).args(added)
    # Only listed here: main() hands `train ...` to the trainer's own parser before this one runs.
    sub.add_parser("train", help="train a built-in model under the trial contract (needs torch): "
                                 "spotsweep train tinylm --help", add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["train"]:
        return _train(argv[1:])
    args = _parser(next((a for a in argv if a in COMMANDS), "")).parse_args(argv)  # the first command named
    log.configure(args.log_level or ("WARNING" if args.cmd in ("run", "resume") else "INFO"))
    try:
        return load(args.cmd).run(args, _settings(args))
    except SpecError as e:
        for field, message in e.errors:
            _error(f"{field}: {message}" if field else message)
        return ExitCode.USAGE
    except SpotsweepError as e:
        _error(e)
        return next(code for kind, code in EXIT_CODES.items() if isinstance(e, kind))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except OSError as e:  # e.g. --csv into a folder that cannot be written
        print(f"error: {e.strerror or e}: {e.filename or ''}".rstrip(": "), file=sys.stderr)
        return ExitCode.FAILED


def _error(what: object) -> None:
    """An error for the person typing: a value it quotes (a spec's field, a sweep id) may hold
    anything, so control characters are shown escaped, never sent to the terminal raw."""
    print(f"error: {printable(str(what), newlines=True)}", file=sys.stderr)


def _train(argv: list[str]) -> int:
    """``spotsweep train``: the one command that needs torch, imported only here."""
    try:
        import numpy  # noqa: F401 - deferred, as both below: they come with the worker extra
        import torch  # noqa: F401
    except ImportError:
        print("spotsweep train needs torch: pip install 'spotsweep[worker]'", file=sys.stderr)
        return ExitCode.USAGE
    from spotsweep.trainer.cli import main as train_main  # deferred: torch

    return train_main(argv)


def _settings(args: argparse.Namespace) -> Settings:
    """The command's settings (its process's model, or the shared one) from its flags over
    the environment; a bad value names its flag or variable (PermanentError: exit 2)."""
    return load_settings(PROCESSES.get("run" if args.cmd == "resume" else args.cmd, Settings), args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
