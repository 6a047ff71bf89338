"""docs/architecture.md's recipes, followed once each, so that none can rot.

Each test copies the tree, adds a trivial strategy, message kind, artifact
store or service exactly as its recipe says, editing only files the recipe
names (hard-coded test lists included), installs the copy and runs there the
tests the recipe points to. Where the recipe says a test fails until a step
is done, the test checks that it does fail before that step.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pika
import pika.exceptions


ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text()
UNIT = "not needs_pg and not needs_rabbit and not needs_s3"


def recipe(title: str) -> str:
    """The text of the recipe headed ``### <title>``, up to the next heading."""
    found = re.search(rf"^### {re.escape(title)}\n(.*?)(?=^##)", DOC, re.M | re.S)
    assert found, f"docs/architecture.md has no recipe {title!r}"
    return found.group(1)


class Tree:
    """A copy of the working tree that a recipe is followed in."""

    def __init__(self, where: Path, title: str) -> None:
        self.root, self.text, self.installs = where / "tree", recipe(title), 0
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                               capture_output=True).stdout.decode().split("\0")
        for name in filter(None, files):
            if (ROOT / name).is_file():
                (self.root / name).parent.mkdir(parents=True, exist_ok=True)
                (self.root / name).write_bytes((ROOT / name).read_bytes())

    def edit(self, path: str, change: Callable[[str], str]) -> None:
        """Change one file; the recipe must name it."""
        file = self.root / path
        folder = path.rsplit("/", 1)[0] + "/"
        named = set(re.findall(r"`([^`\s]+)`", self.text))
        patterns = [re.escape(n).replace("<name>", "[a-z]+") for n in named]
        assert any(re.fullmatch(p, path) or (not file.exists() and re.fullmatch(p, folder)) for p in patterns), \
            f"the recipe edits {path}, which it does not name"
        before = file.read_text() if file.exists() else ""
        after = change(before)
        assert after != before, f"the edit of {path} changed nothing (the recipe's anchor moved?)"
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(after)

    def regenerate_settings_table(self) -> None:
        """The settings table of docs/architecture.md, made again from the copy as last installed (see Settings there)."""
        table = subprocess.run([sys.executable, "-P", "-c", "from spotsweep.shared.settings_cli import table; print(table())"],
                               env={**_environ(), "PYTHONPATH": str(self.root.parent / f"site{self.installs}")},
                               capture_output=True, text=True, check=True).stdout.rstrip("\n")
        self.edit("docs/architecture.md", lambda s: re.sub(
            r"(<!-- settings-table: generated from shared/settings.py -->\n)(\|.*\n)+", lambda m: m.group(1) + table + "\n",
            s, count=1))

    def pytest(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Install the copy as it is now and run pytest on it (the copy's package, not this checkout's)."""
        self.installs += 1
        site = self.root.parent / f"site{self.installs}"
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                        "--target", str(site), "."], cwd=self.root, check=True, capture_output=True)
        env = {"PYTHONPATH": str(site), "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
        # -P: not the copy's folder first on sys.path (its spotsweep/ is only the CLI part of the package)
        return subprocess.run([sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *args],
                              cwd=self.root, env={**_environ(), **env}, capture_output=True, text=True, timeout=900)


def _environ() -> dict[str, str]:
    """This run's environment (services' addresses), minus what points at this checkout."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}


def passes(run: subprocess.CompletedProcess[str]) -> bool:
    if run.returncode != 0:
        print(run.stdout[-6000:], run.stderr[-3000:])
    return run.returncode == 0


def insert_before(anchor: str, text: str) -> Callable[[str], str]:
    return lambda source: source.replace(anchor, text + anchor, 1)


# -- an artifact store -----------------------------------------------------------------------

DICT_STORE = '''"""Objects in a dictionary: the recipe's trivial artifact store."""

from __future__ import annotations

import builtins
from pathlib import Path

from spotsweep.shared.artifacts.port import ArtifactStore, NotFound


class DictArtifactStore(ArtifactStore):
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put_bytes(self, key: str, data: bytes) -> str:
        self.objects[key] = bytes(data)
        return self.uri(key)

    def put_file(self, key: str, path: Path) -> str:
        return self.put_bytes(key, Path(path).read_bytes())

    def get_bytes(self, key: str) -> bytes:
        if key not in self.objects:
            raise NotFound(key)
        return self.objects[key]

    def get_file(self, key: str, path: Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(self.get_bytes(key))

    def list(self, prefix: str) -> builtins.list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)

    def uri(self, key: str) -> str:
        return f"dict://{key}"
'''


def test_an_artifact_store(tmp_path: Path) -> None:
    tree = Tree(tmp_path, "An artifact store")
    tree.edit("shared/artifacts/dictionary.py", lambda _: DICT_STORE)
    tree.edit("shared/settings.py", insert_before(
        "    s3_endpoint:", '    artifact_store: str = Field(default="auto", description="dict: objects kept in memory")\n'))
    tree.edit("shared/artifacts/__init__.py", lambda s: s.replace(
        "    if settings.s3_endpoint:",
        "    if settings.artifact_store == 'dict':\n"
        "        from spotsweep.shared.artifacts.dictionary import DictArtifactStore\n\n"
        "        return DictArtifactStore()\n    if settings.s3_endpoint:", 1))
    tree.edit("tests/shared/artifacts/conftest.py", lambda s: s.replace(
        'params=["local", "s3"]', 'params=["local", "s3", "dict"]').replace(
        '    if request.param == "local":',
        '    if request.param == "dict":\n        monkeypatch.setenv("SPOTSWEEP_ARTIFACT_STORE", "dict")\n'
        '        return open_store(Settings())\n    if request.param == "local":').replace(
        "from spotsweep.shared.artifacts import ", "from spotsweep.shared.artifacts import open_store, ", 1))
    assert not passes(tree.pytest("tests/shared/test_settings_and_logging.py")), \
        "a new setting must fail the settings table's test until the table is regenerated"
    tree.regenerate_settings_table()
    assert passes(tree.pytest("tests/shared/artifacts/test_artifact_contract.py", "-k", "dict",
                              "tests/shared/test_settings_and_logging.py"))


# -- a message kind --------------------------------------------------------------------------

NOTE = '''class TrialNote(Envelope):
    """A line a trial wants kept beside its metrics: the recipe's trivial message kind."""

    kind: Literal["trial.note"] = "trial.note"
    text: str


'''
BINDING = '''    {
      "source": "spotsweep.events",
      "vhost": "/",
      "destination": "spotsweep.collector",
      "destination_type": "queue",
      "routing_key": "trial.note.#",
      "arguments": {}
    },
'''
DOCS_TESTS = ("tests/shared/test_topology.py", "tests/shared/test_protocol_docs.py")


def test_a_message_kind(tmp_path: Path) -> None:
    tree = Tree(tmp_path, "A message kind")
    tree.edit("shared/messages.py", lambda s: insert_before("EVENTS: tuple", NOTE)(s).replace(
        "EVENTS: tuple[type[Envelope], ...] = (", "EVENTS: tuple[type[Envelope], ...] = (TrialNote, ", 1))
    assert not passes(tree.pytest("tests/shared/test_topology.py")), "the recipe says: fails until model and table agree"
    tree.edit("shared/topology.py", lambda s: s.replace('COLLECTOR_KINDS = (', 'COLLECTOR_KINDS = ("trial.note", ', 1))
    tree.edit("deploy/rabbitmq/definitions.json", insert_before('    {\n      "source": "spotsweep.events",', BINDING))
    assert passes(tree.pytest("tests/shared/test_topology.py"))
    assert not passes(tree.pytest("tests/shared/test_protocol_docs.py")), "the recipe says: fails until the doc names it"
    tree.edit("docs/architecture.md", lambda s: s.replace("durable queue bound `trial.metrics.#`,",
                                                          "durable queue bound `trial.metrics.#`, `trial.note.#`,", 1))
    assert passes(tree.pytest(*DOCS_TESTS, "tests/shared/test_messages.py", "tests/services/collector", "-m", UNIT))


# -- a strategy ------------------------------------------------------------------------------

DIAGONAL = re.search(r"\*\*A strategy with a static design\*\*.*?```python\n(.*?)```",
                     (ROOT / "docs" / "search.md").read_text(), re.S)


def test_a_strategy(tmp_path: Path) -> None:
    """docs/search.md's diagonal strategy, as written there, runs a local sweep along the diagonal."""
    tree = Tree(tmp_path, "A strategy or an early stopper")
    assert DIAGONAL, "docs/search.md's recipe has lost its example"
    tree.edit("shared/spec_search/diagonal.py", lambda _: '"""The recipe\'s strategy."""\n\n' + DIAGONAL.group(1))
    tree.edit("shared/spec_search/__init__.py", lambda s: insert_before(
        "from spotsweep.shared.spec_search.grid import", "from spotsweep.shared.spec_search.diagonal import DiagonalStrategy\n")(
        s).replace("for _strategy in (GridStrategy, ", "for _strategy in (GridStrategy, DiagonalStrategy, ", 1))
    # test_registry.py registers a toy strategy of the same name itself
    assert passes(tree.pytest("tests/shared/test_spec_plugins.py", "tests/services/planner/search", "-m", UNIT,
                              "--ignore", "tests/services/planner/search/test_registry.py"))
    spec = (ROOT / "examples" / "noop.yaml").read_text() + "strategy: {type: diagonal, trials: 3}\n"
    (tmp_path / "diagonal.yaml").write_text(spec)
    env = {**_environ(), "PYTHONPATH": str(tmp_path / f"site{tree.installs}"), "SPOTSWEEP_HOME": str(tmp_path / "home")}
    run = subprocess.run([sys.executable, "-P", "-m", "spotsweep", "run", str(tmp_path / "diagonal.yaml"), "--workers", "3"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert all(name in run.stdout for name in ("noop_00_x-1_y-1", "noop_01_x0_y0", "noop_02_x1_y1")), run.stdout


# -- a service -------------------------------------------------------------------------------

ECHO = {
    "services/echo/__init__.py": '"""The recipe\'s service: it acks what reaches its queue, keeping the bodies."""\n',
    "services/echo/handlers.py": '''"""Echo's handler."""

from __future__ import annotations

from dataclasses import dataclass, field

from spotsweep.shared.broker.port import Delivery


@dataclass
class EchoDeps:
    seen: list[bytes] = field(default_factory=list)


def handle(delivery: Delivery, deps: EchoDeps) -> None:
    deps.seen.append(delivery.body)
    delivery.ack()
''',
    "services/echo/main.py": '''"""``spotsweep echo``: the thin process around echo's handler."""

from __future__ import annotations

from functools import partial

from spotsweep.services.echo.handlers import EchoDeps, handle
from spotsweep.shared.broker.port import Broker
from spotsweep.shared.health import probes
from spotsweep.shared.health_startup import CurrentBroker, broker_check, first_broker, reusing
from spotsweep.shared.runtime import Cleanup, broker_factory, serve
from spotsweep.shared.settings import EchoSettings, Settings
from spotsweep.shared.topology import QueueSpec

QUEUE = "spotsweep.echo"


def main(settings: Settings) -> int:
    assert isinstance(settings, EchoSettings)
    current = CurrentBroker()
    probes(settings.metrics_host, settings.metrics_port, {"rabbitmq": broker_check(current, QUEUE)})
    first = first_broker(settings, settings.startup_timeout)
    deps = EchoDeps()

    def start_on(broker: Broker) -> Cleanup:
        broker.declare([QueueSpec(QUEUE)])
        broker.consume(QUEUE, partial(handle, deps=deps), prefetch=10)
        current.broker = broker
        return lambda: None

    return serve(reusing(first, broker_factory(settings)), start_on)
''',
    "tests/services/echo/test_handlers.py": '''from spotsweep.services.echo.handlers import EchoDeps, handle


def test_echo_keeps_the_body_and_acks(delivery) -> None:
    deps, message = EchoDeps(), delivery(b"hello")
    handle(message, deps)
    assert deps.seen == [b"hello"] and message.settled == "ack"
''',
}
PROCESS = '''

@command("echo", lambda p: add_flags(p, PROCESSES["echo"]))
def _echo(args: argparse.Namespace, settings: Settings) -> int:
    from spotsweep.services.echo.main import main as echo_main  # deferred: the service

    return echo_main(settings)
'''
COMPOSE = '''  echo:
    <<: *control
    command: ["echo"]
    environment:
      <<: *settings
      SPOTSWEEP_DATABASE_URL_FILE: ""   # only RabbitMQ: no other secret
      SPOTSWEEP_S3_ACCESS_KEY_FILE: ""
      SPOTSWEEP_S3_SECRET_KEY_FILE: ""
    secrets: [{source: amqp-url-echo, target: amqp-url}]
    healthcheck: *probe
    depends_on:
      rabbitmq: {condition: service_healthy}
'''
USER = '''    {
      "name": "spotsweep-echo",
      "password": "change-me-echo",
      "tags": []
    },
'''
GRANT = '''    {
      "user": "spotsweep-echo",
      "vhost": "/",
      "configure": "^spotsweep\\\\.echo$",
      "write": "^spotsweep\\\\.dlx$",
      "read": "^spotsweep\\\\.echo$"
    },
'''
DEPLOY_TESTS = ("tests/deploy/test_compose.py", "tests/shared/test_settings_and_logging.py",
                "tests/services/echo", "tests/commands")


def test_a_service(tmp_path: Path, rabbit_url: str) -> None:
    tree = Tree(tmp_path, "A service")
    for path, text in ECHO.items():
        tree.edit(path, lambda _, text=text: text)
    tree.edit("shared/settings.py", lambda s: insert_before("class AgentSettings(", (
        'class EchoSettings(_Service):\n    """``spotsweep echo``."""\n\n\n'))(s).replace(
        '"dashboard": DashboardSettings,', '"dashboard": DashboardSettings, "echo": EchoSettings,', 1))
    tree.edit("spotsweep/commands/processes.py", lambda s: s + PROCESS)
    tree.edit("spotsweep/commands/__init__.py", lambda s: s.replace(
        '    "agent": ("processes",', '    "echo": ("processes", "run the echo service"),\n    "agent": ("processes",', 1))
    tree.edit("docker-compose.yml", insert_before("  cli:\n", COMPOSE))
    tree.edit("docker-compose.yml", lambda s: s.replace(
        "secrets:\n  amqp-url-planner:", "secrets:\n  amqp-url-echo: {file: ./deploy/compose/secrets/amqp-url-echo}\n"
        "  amqp-url-planner:", 1))
    tree.edit("deploy/compose/secrets/amqp-url-echo", lambda _: "amqp://spotsweep-echo:change-me-echo@rabbitmq:5672/%2F\n")
    tree.edit("deploy/rabbitmq/definitions.json", lambda s: insert_before('    {\n      "name": "spotsweep-planner"', USER)(
        insert_before('    {\n      "user": "spotsweep-planner"', GRANT)(s)))
    assert not passes(tree.pytest("tests/deploy/test_compose.py")), "the recipe says: the compose tests list the services"
    tree.edit("tests/deploy/test_compose.py", lambda s: s.replace('"agent", "cli"}', '"agent", "cli", "echo"}', 1).replace(
        '"agent": "amqp-url-agent",', '"agent": "amqp-url-agent", "echo": "amqp-url-echo",', 1).replace(
        '("planner", "collector", "agent", "submitter")', '("planner", "collector", "agent", "submitter", "echo")', 1).replace(
        '["planner", "collector", "reporter", "agent"]', '["planner", "collector", "reporter", "agent", "echo"]', 1))
    tree.regenerate_settings_table()
    assert passes(tree.pytest(*DEPLOY_TESTS, "-m", UNIT))
    _serves(tmp_path / f"site{tree.installs}", rabbit_url)


def _serves(site: Path, rabbit_url: str) -> None:
    """The wiring once over RabbitMQ: ``spotsweep echo`` declares its queue, takes what is published to it, and
    drains and exits 0 on SIGTERM."""
    env = {**_environ(), "PYTHONPATH": str(site), "SPOTSWEEP_AMQP_URL": rabbit_url}
    service = subprocess.Popen([sys.executable, "-P", "-m", "spotsweep", "echo"], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    connection = pika.BlockingConnection(pika.URLParameters(rabbit_url))
    try:
        channel = connection.channel()
        deadline = time.monotonic() + 60
        while (depth := _queue(connection, "spotsweep.echo")) is None or depth[1] == 0:
            assert time.monotonic() < deadline and service.poll() is None, "spotsweep echo never consumed its queue"
            time.sleep(0.2)
        for n in range(3):
            channel.basic_publish("", "spotsweep.echo", f"message {n}".encode())
        while _queue(connection, "spotsweep.echo") != (0, 1):
            assert time.monotonic() < deadline, "spotsweep echo left messages in its queue"
            time.sleep(0.2)
    finally:
        connection.close()
        service.send_signal(signal.SIGTERM)
        output = service.communicate(timeout=60)[0]
    assert service.returncode == 0, output


def _queue(connection: Any, name: str) -> tuple[int, int] | None:
    """(messages ready, consumers) of a queue; None while it does not exist."""
    channel = connection.channel()
    try:
        ok = channel.queue_declare(name, passive=True).method
    except pika.exceptions.ChannelClosedByBroker:
        return None
    channel.close()
    return ok.message_count, ok.consumer_count
