"""TLS to RabbitMQ, PostgreSQL and S3: what the settings ask of each client, and
what a refused server certificate says.

Every process (the services and the CLI) reaches the three backends with the
same settings (:class:`~spotsweep.shared.settings.Settings`), so the TLS
options are made here once, from them:

* RabbitMQ: an ``amqps://`` URL, verified against ``SPOTSWEEP_AMQP_CA_FILE``
  (else the system's CAs), the hostname checked, with an optional client
  certificate; :func:`amqp_context` is the ``ssl.SSLContext`` pika is given.
* PostgreSQL: libpq's own ``sslmode``/``sslrootcert``, in the URL or from
  ``SPOTSWEEP_DATABASE_SSLMODE``/``SPOTSWEEP_DATABASE_SSLROOTCERT``;
  :func:`pg_options` are keyword arguments added to the connection, so the
  URL the user gave is used (and printed, redacted) as given.
* S3: HTTPS verified against ``SPOTSWEEP_S3_CA_FILE``: :func:`s3_http_client`.

A server certificate that does not verify is a configuration error, not an
outage: :func:`refusal` turns it into a :class:`PermanentError` that names
the endpoint and says "certificate verify failed", so no process retries it
for a minute nor prints a traceback. Nothing here reads a secret.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from spotsweep.shared.errors import PermanentError

if TYPE_CHECKING:
    import urllib3

    from spotsweep.shared.settings import Settings

# What each client says when the peer's certificate does not verify (OpenSSL
# through Python, libpq) or does not name the host (libpq's own check).
_REFUSED_TEXT = ("certificate verify failed", "does not match host name", "hostname mismatch")


@dataclass(frozen=True)
class AmqpTls:
    """The files that ``SPOTSWEEP_AMQP_*_FILE`` name (each may be unset)."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None

    def __bool__(self) -> bool:
        return any((self.ca_file, self.cert_file, self.key_file))


def amqp_tls(settings: Settings) -> AmqpTls:
    return AmqpTls(settings.amqp_ca_file, settings.amqp_cert_file, settings.amqp_key_file)


def amqp_context(tls: AmqpTls) -> ssl.SSLContext:
    """A client context that verifies the broker's certificate and hostname:
    against ``tls.ca_file`` or, unset, the system's CAs; with the client
    certificate when one is given. An unreadable file is a PermanentError
    naming its variable and path."""
    if tls.key_file is not None and tls.cert_file is None:
        raise PermanentError(f"SPOTSWEEP_AMQP_KEY_FILE={tls.key_file} needs SPOTSWEEP_AMQP_CERT_FILE, the certificate it belongs to")
    context = _context(tls.ca_file, "SPOTSWEEP_AMQP_CA_FILE")
    if tls.cert_file is not None:
        try:
            context.load_cert_chain(str(tls.cert_file), str(tls.key_file) if tls.key_file else None)
        except (OSError, ssl.SSLError) as e:
            raise PermanentError(f"SPOTSWEEP_AMQP_CERT_FILE={tls.cert_file} / SPOTSWEEP_AMQP_KEY_FILE={tls.key_file}: "
                                 f"cannot load the client certificate ({_why(e)})") from None
    return context


def pg_options(settings: Settings) -> dict[str, str]:
    """libpq connection parameters from the settings, added to the URL's (a setting
    wins over the same parameter in the URL)."""
    options: dict[str, str] = {}
    if settings.database_sslmode is not None:
        options["sslmode"] = settings.database_sslmode
    if settings.database_sslrootcert is not None:
        options["sslrootcert"] = str(settings.database_sslrootcert)
    return options


def s3_http_client(ca_file: Path) -> urllib3.PoolManager:
    """minio's HTTP pool, with the certificate verified against ``ca_file``
    (timeouts and retries as minio's own default pool has them)."""
    import urllib3  # deferred: 50 ms, for the processes that reach S3 alone

    _context(ca_file, "SPOTSWEEP_S3_CA_FILE")  # a clear error now, not urllib3's on the first request
    return urllib3.PoolManager(timeout=urllib3.Timeout(connect=300, read=300), maxsize=10, cert_reqs="CERT_REQUIRED",
                               ca_certs=str(ca_file),
                               retries=urllib3.Retry(total=5, backoff_factor=0.2, status_forcelist=[500, 502, 503, 504]))


def _context(ca_file: Path | None, variable: str) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=str(ca_file) if ca_file is not None else None)
    except (OSError, ssl.SSLError) as e:
        raise PermanentError(f"{variable}={ca_file}: cannot load the CA certificates ({_why(e)})") from None


def _why(e: BaseException) -> str:
    return (e.strerror if isinstance(e, OSError) and e.strerror else None) or str(e) or type(e).__name__


def refused_detail(error: BaseException) -> str | None:
    """Why a TLS peer was refused, when ``error`` or any error it wraps (its
    cause, context, arguments, urllib3's ``reason``) is a certificate that did
    not verify; else None. The innermost error says it best."""
    chain: list[BaseException] = []
    todo: list[object] = [error]
    while todo:
        e = todo.pop()
        if isinstance(e, BaseException) and all(e is not c for c in chain):
            chain.append(e)
            todo += [e.__cause__, e.__context__, getattr(e, "reason", None), *e.args]
    for e in reversed(chain):
        if isinstance(e, ssl.SSLCertVerificationError):
            return f"certificate verify failed: {e.verify_message}" if e.verify_message else "certificate verify failed"
    for e in reversed(chain):
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        at = max(text.lower().find(marker) for marker in _REFUSED_TEXT)
        if at >= 0:  # libpq: '...port 5432 failed: SSL error: certificate verify failed' -> the last clause
            clause = text.rfind(": ", 0, at)
            return text[clause + 2 if clause >= 0 else 0:][:300]
    return None


def refusal(error: BaseException, service: str, endpoint: str, setting: str) -> PermanentError | None:
    """A clear PermanentError when ``error`` is a refused server certificate:
    it names ``service`` at ``endpoint`` (already redacted) and the setting that
    holds the trusted CAs; None for any other error."""
    detail = refused_detail(error)
    if detail is None:
        return None
    if "certificate verify failed" not in detail.lower():
        detail = f"certificate verify failed: {detail}"
    return PermanentError(f"cannot connect to {service} at {endpoint}: TLS {detail} (the server's certificate is not "
                          f"signed by a CA in {setting}, or does not name this host)")
