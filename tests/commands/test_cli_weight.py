"""The reading commands (ls, status, report, logs) start without loading the services' code: the
planner, the agent, local mode, the dashboard's web framework, the search libraries. Each
of those cost a person typing `spotsweep ls` a second (2.5 s in all before; 0.9 s after)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("spotsweep.services.planner.handlers", "spotsweep.services.agent.main", "spotsweep.services.local.run",
         "spotsweep.services.reporter.web.app", "spotsweep.commands.code_upload", "starlette", "optuna", "numpy",
         "torch", "pika")


def test_the_reading_commands_import_none_of_the_services() -> None:
    code = ("import sys\n"
            "import spotsweep.cli, spotsweep.commands.sweeps, spotsweep.commands.artifacts\n"
            "import spotsweep.services.reporter.web.queries, spotsweep.shared.db.embedded\n"
            f"print([m for m in {HEAVY!r} if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize(("argv", "loaded"), [(["--help"], []), (["agent", "--help"], ["processes"]),
                                              (["ls", "--help"], ["listing", "sweeps"])])
def test_a_command_loads_only_its_own_module(argv: list[str], loaded: list[str]) -> None:
    """`spotsweep --help` loads no command's code, and a command no other's but what it builds on (an agent
    no table printer: ls's module builds on sweeps')."""
    code = ("import sys\nfrom spotsweep.cli import main\nfrom spotsweep.commands import COMMANDS\n"
            f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
            "print(sorted({m for m, _ in COMMANDS.values() if f'spotsweep.commands.{m}' in sys.modules}), file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stderr.strip().splitlines()[-1] == repr(loaded), out.stderr
