"""The long-running processes: ``spotsweep dashboard``, ``planner``, ``collector`` and ``agent``.

Their flags are their settings' own knobs (shared/settings.py), each also a SPOTSWEEP_* variable.
Each imports only what it runs, when it runs (an agent on a GPU node never loads the planner's
Optuna, NumPy and SciPy: ~30 MiB and an OpenBLAS thread less).
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time

from spotsweep.commands import command
from spotsweep.shared.settings import PROCESSES, AgentSettings, DashboardSettings, PlannerSettings, Settings
from spotsweep.shared.settings_cli import add_flags


@command("dashboard", lambda p: add_flags(p, DashboardSettings))
def _dashboard(args: argparse.Namespace, settings: Settings) -> int:
    from spotsweep.services.reporter.web.main import serve  # deferred: Starlette, uvicorn, the importance model

    assert isinstance(settings, DashboardSettings)
    _say_when_listening(settings.dashboard_host, settings.dashboard_port)
    return serve(settings, settings.dashboard_host, settings.dashboard_port)


def _say_when_listening(host: str, port: int) -> None:
    """Print "dashboard: open http://HOST:PORT/" once the dashboard answers there: not before,
    so no address is shown for one that waits for the schema or refuses to start."""
    wildcard = host in ("", "0.0.0.0", "::")
    shown = socket.gethostname() if wildcard else f"[{host}]" if ":" in host else host
    target = "::1" if host == "::" else "127.0.0.1" if wildcard else host

    def wait() -> None:
        while True:
            try:
                socket.create_connection((target, port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        print(f"dashboard: open http://{shown}:{port}/ (Ctrl-C stops it)", file=sys.stderr, flush=True)

    threading.Thread(target=wait, name="dashboard-address", daemon=True).start()


@command("planner", lambda p: add_flags(p, PROCESSES["planner"]))
def _planner(args: argparse.Namespace, settings: Settings) -> int:
    from spotsweep.services.planner.main import main as planner_main  # deferred: Optuna, NumPy, SciPy

    assert isinstance(settings, PlannerSettings)
    return planner_main(settings)


@command("collector", lambda p: add_flags(p, PROCESSES["collector"]))
def _collector(args: argparse.Namespace, settings: Settings) -> int:
    from spotsweep.services.collector.main import main as collector_main  # deferred: the service and pika

    return collector_main(settings)


@command("agent", lambda p: add_flags(p, PROCESSES["agent"]))
def _agent(args: argparse.Namespace, settings: Settings) -> int:
    from spotsweep.services.agent.main import main as agent_main  # deferred: the service, pika, psutil

    assert isinstance(settings, AgentSettings)
    return agent_main(settings)
