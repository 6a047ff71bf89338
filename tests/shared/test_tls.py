"""The TLS settings' decisions without a server: which errors are a refused
certificate (and so permanent, named clearly), which settings become which
client options, and what a wrong setting says. The same paths over real
servers: tests/security/test_tls.py."""

from __future__ import annotations

import ssl
from pathlib import Path

import psycopg
import pytest
import urllib3

from spotsweep import cli
from spotsweep.shared.broker.rabbit import RabbitBroker
from spotsweep.shared.db import Database
from spotsweep.shared.db.liveness import LIVENESS
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.settings import Settings
from spotsweep.shared.tls import AmqpTls, amqp_context, pg_options, refusal, refused_detail


def _verify_error(message: str = "unable to get local issuer certificate") -> ssl.SSLCertVerificationError:
    e = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: {message}")
    e.verify_message = message
    return e


def test_urllib3s_wrapped_verification_error_is_a_refusal_saying_why() -> None:
    wrapped = urllib3.exceptions.MaxRetryError(None, "/bucket", urllib3.exceptions.SSLError(_verify_error()))  # type: ignore[arg-type]
    assert refused_detail(wrapped) == "certificate verify failed: unable to get local issuer certificate"


def test_pikas_connection_error_holding_the_verification_error_is_a_refusal() -> None:
    import pika.exceptions as pe

    error = pe.AMQPConnectionError(_verify_error("Hostname mismatch, certificate is not valid for '10.0.0.1'."))
    assert "Hostname mismatch" in (refused_detail(error) or "")


def test_libpqs_messages_are_refusals_and_the_clause_is_kept() -> None:
    failed = psycopg.OperationalError('connection failed: connection to server at "127.0.0.1", port 5432 failed: '
                                      "SSL error: certificate verify failed")
    assert refused_detail(failed) == "certificate verify failed"
    host = psycopg.OperationalError('connection to server at "10.0.0.1", port 5432 failed: server certificate for '
                                    '"db.example" does not match host name "10.0.0.1"')
    error = refusal(host, "PostgreSQL", "postgresql://u:***@10.0.0.1:5432/db", "SPOTSWEEP_DATABASE_SSLROOTCERT")
    assert isinstance(error, PermanentError)
    assert str(error).startswith("cannot connect to PostgreSQL at postgresql://u:***@10.0.0.1:5432/db: TLS certificate "
                                 'verify failed: server certificate for "db.example" does not match host name')
    assert "SPOTSWEEP_DATABASE_SSLROOTCERT" in str(error)


@pytest.mark.parametrize("error", [ConnectionRefusedError(111, "Connection refused"), TimeoutError("timed out"),
                                   psycopg.OperationalError("password authentication failed for user x")])
def test_other_connection_errors_are_not_refusals(error: Exception) -> None:
    assert refused_detail(error) is None
    assert refusal(error, "S3", "https://s3:9000", "SPOTSWEEP_S3_CA_FILE") is None


def test_the_database_settings_are_added_to_the_connection_and_the_url_stays_as_given() -> None:
    settings = Settings(database_url="postgresql://u:pw@db/x?application_name=a", database_sslmode="verify-full",
                        database_sslrootcert=Path("/etc/ca.pem"))
    options = pg_options(settings)
    assert options == {"sslmode": "verify-full", "sslrootcert": "/etc/ca.pem"}
    db = Database("postgresql://u:pw@db/x?application_name=a", options=options)
    assert db.url == "postgresql://u:pw@db/x?application_name=a" and db.options == {**LIVENESS, **options}
    assert pg_options(Settings()) == {}


def test_a_missing_ca_file_or_a_key_without_its_certificate_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(PermanentError, match=f"SPOTSWEEP_AMQP_CA_FILE={tmp_path}/none.pem: cannot load the CA"):
        amqp_context(AmqpTls(ca_file=tmp_path / "none.pem"))
    with pytest.raises(PermanentError, match="SPOTSWEEP_AMQP_KEY_FILE=.* needs SPOTSWEEP_AMQP_CERT_FILE"):
        amqp_context(AmqpTls(key_file=tmp_path / "client.key"))
    context = amqp_context(AmqpTls())  # the system's CAs, hostname checked
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_ca_files_with_a_plain_amqp_url_are_refused_before_connecting(tmp_path: Path) -> None:
    with pytest.raises(PermanentError, match=r"plain amqp://: use amqps://") as e:
        RabbitBroker("amqp://guest:s3cret@127.0.0.1:1/%2F", tls=AmqpTls(ca_file=tmp_path / "ca.pem"))
    assert "s3cret" not in str(e.value)


def test_a_bad_sslmode_exits_2_naming_the_variable(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SPOTSWEEP_DATABASE_SSLMODE", "verify-everything")
    assert cli.main(["status"]) == 2
    assert "SPOTSWEEP_DATABASE_SSLMODE" in capsys.readouterr().err
