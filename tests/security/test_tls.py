"""TLS everywhere (issue 19, section 4), end to end over real servers: a private
RabbitMQ node with a TLS listener, a private PostgreSQL cluster with
``ssl=on`` and moto's S3 over HTTPS, all with a server certificate for
127.0.0.1/localhost signed by a CA this test makes. A sweep runs with every
process (planner, collector, agent, the CLI) verifying each server against
that CA, every connection encrypted; trusting another CA instead, each of the
three is refused with one clear line that names the endpoint and says
"certificate verify failed" (exit 2, no traceback, no password).

Needs root where the servers drop to their own users (CI runs as root): the
private servers' files are handed to the rabbitmq and postgres users.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from cluster import Cluster, wait_for  # tests/support
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from servers import MotoS3, PrivatePostgres, PrivateRabbit, TlsFiles

from spotsweep.shared.artifacts.s3 import S3ArtifactStore
from spotsweep.shared.tls import s3_http_client

pytestmark = [pytest.mark.needs_rabbit, pytest.mark.needs_pg, pytest.mark.needs_s3]
TRIAL = Path(__file__).parents[1] / "chaos" / "chaos_trial.py"
PG_PASSWORD = "pg-Secret-7"  # trust auth ignores it: it is there to be kept out of every message


# -- certificates ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ca:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    path: Path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _builder(subject: str, issuer: x509.Name, public: Any) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer).public_key(public)
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1)))


def make_ca(folder: Path, name: str) -> Ca:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (_builder(name, _name(name), key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    path = folder / f"{name}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Ca(key, cert, path)


def server_files(ca: Ca, folder: Path) -> TlsFiles:
    """A certificate for 127.0.0.1 and localhost signed by ``ca``, with its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (_builder("localhost", ca.cert.subject, key.public_key())
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca.key, hashes.SHA256()))
    (folder / "server.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "server.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
    return TlsFiles(ca.path, folder / "server.pem", folder / "server.key")


# -- the servers -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Servers:
    rabbit: PrivateRabbit
    postgres: PrivatePostgres
    s3: MotoS3
    ca: Path  # the CA that signed all three servers' certificates
    other_ca: Path  # a CA that signed none of them

    @property
    def database_url(self) -> str:
        return f"postgresql://postgres:{PG_PASSWORD}@127.0.0.1:{self.postgres.port}/postgres"

    def env(self, ca: Path, tmp: Path) -> dict[str, str]:
        """Every process's settings: TLS to all three, trusting ``ca`` (the database's by the settings)."""
        return {**os.environ, "SPOTSWEEP_AMQP_URL": self.rabbit.tls_url, "SPOTSWEEP_AMQP_CA_FILE": str(ca),
                "SPOTSWEEP_DATABASE_URL": self.database_url, "SPOTSWEEP_DATABASE_SSLMODE": "verify-full",
                "SPOTSWEEP_DATABASE_SSLROOTCERT": str(ca), **self.s3.env("tls"), "SPOTSWEEP_S3_CA_FILE": str(ca),
                "SPOTSWEEP_HOME": str(tmp / "home")}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    root = tmp_path_factory.mktemp("tls")
    certs = root / "certs"
    certs.mkdir()
    ca, other = make_ca(certs, "spotsweep-test-ca"), make_ca(certs, "another-ca")
    files = server_files(ca, certs)
    rabbit, postgres = PrivateRabbit(root / "rabbit", tls=files), PrivatePostgres(root / "pg", tls=files)
    s3 = None
    try:
        postgres.start()
        rabbit.start()
        s3 = MotoS3(tls=files)
        yield Servers(rabbit, postgres, s3, ca.path, other.path)
    finally:
        if s3 is not None:
            s3.stop()
        rabbit.stop()
        postgres.stop()


def sweep_spec(name: str) -> dict[str, Any]:
    return {"name": name, "command": ["python", str(TRIAL), "--k", "{k}", "--steps", "12", "--pause", "0.02",
                                      "--ckpt-every", "5"],
            "metric": {"name": "loss"}, "space": {"k": [2, 5]}, "resources": {"gpus": 0, "class": "cpu"}}


def encrypted_pg_clients(servers: Servers) -> list[bool]:
    """Whether each other client's connection to the private PostgreSQL is encrypted."""
    url = f"postgresql://postgres@127.0.0.1:{servers.postgres.port}/postgres?sslmode=verify-full&sslrootcert={servers.ca}"
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)"
                            " WHERE a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()").fetchall()
    return [r[0] for r in rows]


# -- the tests ---------------------------------------------------------------------------------------------


def test_a_sweep_runs_with_every_connection_verified_and_encrypted(servers: Servers, tmp_path: Path) -> None:
    env = servers.env(servers.ca, tmp_path)
    cluster = Cluster(env, tmp_path)
    try:
        # The planner takes libpq's own form, in the URL; the others the two settings.
        in_url = {"SPOTSWEEP_DATABASE_URL": f"{servers.database_url}?sslmode=verify-full&sslrootcert={servers.ca}",
                  "SPOTSWEEP_DATABASE_SSLMODE": "", "SPOTSWEEP_DATABASE_SSLROOTCERT": ""}
        cluster.start("planner", "planner", env=in_url)
        cluster.start("collector", "collector")
        cluster.start("agent", "agent", "--class", "cpu")
        sweep_id = cluster.submit(sweep_spec("tls-sweep"))
        check = f"{servers.database_url}?sslmode=verify-full&sslrootcert={servers.ca}"
        state = wait_for(check, "SELECT state FROM sweeps WHERE sweep_id = %s", (sweep_id,), lambda s: s == "completed",
                         timeout=180)
        assert state == "completed", cluster.logs()

        # While they run, every connection of theirs is TLS: to PostgreSQL ...
        clients = encrypted_pg_clients(servers)
        assert clients and all(clients), clients
        # ... and to RabbitMQ (the plain listener is never named to them).
        listed = servers.rabbit.ctl("list_connections", "--no-table-headers", "ssl", "peer_port")
        assert listed.returncode == 0, listed.stderr
        flags = [line.split()[0] for line in listed.stdout.splitlines() if line.strip()]
        assert flags and set(flags) == {"true"}, listed.stdout

        status = cluster.cli("status", sweep_id)
        assert status.returncode == 0, status.stderr
        assert "completed" in status.stdout
    finally:
        cluster.kill_all()
    with psycopg.connect(check) as conn:
        rows = conn.execute("SELECT state, metrics->>'loss' FROM trial_results WHERE sweep_id = %s", (sweep_id,)).fetchall()
    assert [r[0] for r in rows] == ["completed", "completed"]
    # ... and to S3: the agent uploaded the trials' checkpoints over HTTPS.
    store = S3ArtifactStore(servers.s3.endpoint, "testing", "testing-secret", "tls", region="us-east-1",
                            http_client=s3_http_client(servers.ca))
    assert any("/checkpoints/" in key for key in store.list(f"sweeps/{sweep_id}/")), store.list("")


def refused_clearly(output: str, service: str, endpoint: str) -> None:
    """One line naming the endpoint and the refusal; no traceback, no password."""
    line = next((ln for ln in output.splitlines() if f"cannot connect to {service} at {endpoint}" in ln), None)
    assert line is not None, output
    assert "certificate verify failed" in line, line
    assert "Traceback" not in output, output
    assert PG_PASSWORD not in output and "guest:guest" not in output and "testing-secret" not in output, output


def test_postgresql_with_a_certificate_from_another_ca_is_refused_by_status(servers: Servers, tmp_path: Path) -> None:
    env = {**servers.env(servers.ca, tmp_path), "SPOTSWEEP_DATABASE_SSLROOTCERT": str(servers.other_ca)}
    out = Cluster(env, tmp_path).cli("status")
    assert out.returncode == 2, out
    refused_clearly(out.stderr, "PostgreSQL", f"postgresql://postgres:***@127.0.0.1:{servers.postgres.port}/postgres")


def test_rabbitmq_with_a_certificate_from_another_ca_is_refused_by_submit_and_by_an_agent(
        servers: Servers, tmp_path: Path) -> None:
    cluster = Cluster({**servers.env(servers.other_ca, tmp_path), "SPOTSWEEP_S3_CA_FILE": str(servers.ca)}, tmp_path)
    endpoint = f"amqps://guest:***@127.0.0.1:{servers.rabbit.tls_port}/%2F"
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(sweep_spec("refused")))
    out = cluster.cli("submit", str(spec))
    assert out.returncode == 2, out
    refused_clearly(out.stderr, "RabbitMQ", endpoint)

    agent = cluster.start("agent", "agent", "--class", "cpu")
    try:
        assert agent.wait(120) == 2, cluster.logs()
    finally:
        cluster.kill_all()
    refused_clearly((tmp_path / "agent.log").read_text(), "RabbitMQ", endpoint)


def test_s3_with_a_certificate_from_another_ca_is_refused_by_an_agent(servers: Servers, tmp_path: Path) -> None:
    cluster = Cluster({**servers.env(servers.ca, tmp_path), "SPOTSWEEP_S3_CA_FILE": str(servers.other_ca)}, tmp_path)
    agent = cluster.start("agent", "agent", "--class", "cpu")
    try:
        assert agent.wait(120) == 2, cluster.logs()
    finally:
        cluster.kill_all()
    refused_clearly((tmp_path / "agent.log").read_text(), "S3", servers.s3.endpoint)

