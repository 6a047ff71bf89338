"""The artifact store on MinIO or any S3 API, through the ``minio`` client.

Errors are translated here, at the edge, into the house taxonomy:

* a missing object -> :class:`~spotsweep.shared.artifacts.port.NotFound`;
* network failures, timeouts, HTTP 5xx and 429 -> :class:`RetryableError`;
* everything else the server refuses -> :class:`PermanentError`. Wrong
  credentials (``InvalidAccessKeyId``, ``SignatureDoesNotMatch``,
  ``AccessDenied``) are permanent: retrying with the same keys cannot help, and
  a retry loop would only hide a configuration mistake. So is a server
  certificate that does not verify (``SPOTSWEEP_S3_CA_FILE``, :mod:`spotsweep.shared.tls`).

The access key and the secret never appear in a repr, a log line or an error
message: messages are built from the operation, key, bucket and the server's
error code, and are scrubbed of both keys in case a server echoes one back.
"""

from __future__ import annotations

import builtins

import copy
import io
import os
import re
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn
from xml.sax.saxutils import escape

import certifi
import urllib3
from minio import Minio
from minio.commonconfig import CopySource
from minio.error import InvalidResponseError, S3Error, ServerError
from minio.xml import findtext
from urllib3.util import Retry, Timeout
from pydantic import SecretStr

from spotsweep.shared import log
from spotsweep.shared.artifacts.port import ArtifactStore, NotFound, ObjectInfo
from spotsweep.shared.errors import PermanentError, RetryableError
from spotsweep.shared.tls import refusal, s3_http_client

if TYPE_CHECKING:
    from spotsweep.shared.settings import Settings

_log = log.get(__name__)

# Connections kept per endpoint: checkpoint transfers run 16 requests at once
# (transfer.py), beside log uploads; minio's default pool keeps 10 and drops the rest.
POOL_SIZE = 32

# S3 error codes that mean "busy or broken right now", whatever the status.
_RETRYABLE_CODES = frozenset({"InternalError", "ServiceUnavailable", "SlowDown", "RequestTimeout"})


def _reveal(value: str | SecretStr | None) -> str | None:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def parse_endpoint(endpoint: str, secure: bool | None) -> tuple[str, bool]:
    """``host:port`` or ``http(s)://host:port`` -> (``host:port``, secure).

    An explicit ``secure`` wins; otherwise the scheme decides, and a bare
    ``host:port`` defaults to TLS (the safe choice, as in the minio client).
    """
    scheme, sep, rest = endpoint.partition("://")
    if not sep:
        scheme, rest = "", endpoint
    elif scheme not in ("http", "https"):
        raise PermanentError(f"S3 endpoint {endpoint!r}: scheme must be http or https")
    host = rest.rstrip("/")
    if not host or "/" in host or "@" in host:
        raise PermanentError("S3 endpoint must be host:port or http(s)://host:port, without a path or credentials")
    if secure is None:
        secure = scheme != "http"
    return host, secure


def _ca_certs() -> str:
    """The certificates minio's default pool trusts: ``SSL_CERT_FILE``, else certifi's bundle."""
    return os.environ.get("SSL_CERT_FILE") or certifi.where()


class S3ArtifactStore(ArtifactStore):
    """Artifacts as objects in one bucket, created on first use if missing."""

    def __init__(self, endpoint: str, access_key: str | SecretStr | None, secret_key: str | SecretStr | None,
                 bucket: str, secure: bool | None = None, region: str | None = None, *,
                 http_client: urllib3.PoolManager | None = None) -> None:
        """``http_client`` replaces minio's default pool (5 min timeouts, 5
        retries); tests pass one with short timeouts."""
        self.endpoint, self.secure = parse_endpoint(endpoint, secure)
        self.bucket = bucket
        # Kept only to scrub them from messages; never formatted anywhere.
        self._secrets = [s for s in (_reveal(access_key), _reveal(secret_key)) if s]
        if http_client is None:  # minio's own default pool, timeouts and retries, with room for parallel transfers
            http_client = urllib3.PoolManager(timeout=Timeout(connect=300, read=300), maxsize=POOL_SIZE,
                                              retries=Retry(total=5, backoff_factor=0.2, status_forcelist=[500, 502, 503, 504]),
                                              cert_reqs="CERT_REQUIRED", ca_certs=_ca_certs())
        elif http_client.connection_pool_kw.get("maxsize", 1) < POOL_SIZE:
            http_client.connection_pool_kw["maxsize"] = POOL_SIZE
        self._http = http_client
        try:
            self._client = Minio(self.endpoint, access_key=_reveal(access_key), secret_key=_reveal(secret_key),
                                 secure=self.secure, region=region, http_client=http_client)
        except ValueError as e:
            raise PermanentError(self._scrub(f"S3 client for {self!r}: {e}")) from None
        self._ensure_bucket(region)

    @classmethod
    def from_settings(cls, settings: Settings) -> S3ArtifactStore:
        if not settings.s3_endpoint:
            raise PermanentError("SPOTSWEEP_S3_ENDPOINT is not set")
        return cls(settings.s3_endpoint, settings.s3_access_key, settings.s3_secret_key, settings.s3_bucket,
                   secure=settings.s3_secure, region=settings.s3_region,
                   http_client=s3_http_client(settings.s3_ca_file) if settings.s3_ca_file is not None else None)

    def in_bucket(self, bucket: str) -> S3ArtifactStore:
        """This store's client over another (existing) bucket, never created: the source of ``inputs``."""
        other = copy.copy(self)
        other.bucket = bucket
        return other

    def __repr__(self) -> str:
        scheme = "https" if self.secure else "http"
        return f"S3ArtifactStore(endpoint='{scheme}://{self.endpoint}', bucket={self.bucket!r})"

    # -- error translation ----------------------------------------------------

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    @contextmanager
    def _translate(self, op: str, key: str | None = None) -> Iterator[None]:
        """Turn minio and urllib3 exceptions into NotFound/Retryable/Permanent."""
        try:
            yield
        except S3Error as e:
            if e.code == "NoSuchKey" and key is not None:
                raise NotFound(key) from e
            status = e.response.status if e.response is not None else 0
            retryable = e.code in _RETRYABLE_CODES or status >= 500 or status == 429
            self._fail(op, key, f"{e.code}: {e.message}", retryable, e)
        except (ServerError, InvalidResponseError) as e:
            # Neither carries an S3 error code, only an HTTP status (a proxy's
            # HTML error page, say). The body may be large: leave it out.
            code = re.search(r"Response code: (\d+)", str(e))  # InvalidResponseError says it only in its message
            status = e.status_code if isinstance(e, ServerError) else int(code[1]) if code else 0
            self._fail(op, key, f"HTTP {status}", status >= 500 or status == 429, e)
        except (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError) as e:
            scheme = "https" if self.secure else "http"
            if (refused := refusal(e, "S3", f"{scheme}://{self.endpoint}", "SPOTSWEEP_S3_CA_FILE")) is not None:
                raise PermanentError(self._scrub(str(refused))) from None
            self._fail(op, key, f"{type(e).__name__}: {e}", True, e)
        except ValueError as e:  # minio's client-side checks: empty key, bad name
            self._fail(op, key, str(e), False, e)

    def _fail(self, op: str, key: str | None, why: str, retryable: bool, cause: Exception) -> NoReturn:
        what = f"S3 {op}" + (f" of {key!r}" if key is not None else "")
        message = self._scrub(f"{what} in bucket {self.bucket!r} at {self.endpoint} failed: {why}")
        raise (RetryableError if retryable else PermanentError)(message) from cause

    # -- bucket ---------------------------------------------------------------

    def _ensure_bucket(self, region: str | None) -> None:
        with self._translate("bucket check"):
            if self._client.bucket_exists(self.bucket):
                return
        try:
            with self._translate("bucket create"):
                self._client.make_bucket(self.bucket, location=region)
            _log.info("artifacts.bucket_created", bucket=self.bucket, endpoint=self.endpoint)
        except PermanentError as e:
            # Another process may have created it between our check and create.
            code = getattr(e.__cause__, "code", None)
            if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise
            # BucketAlreadyExists can also mean another account owns the name:
            # then this check fails with AccessDenied, a PermanentError.
            with self._translate("bucket check"):
                exists = self._client.bucket_exists(self.bucket)
            if not exists:
                raise

    # -- the port -------------------------------------------------------------

    def put_bytes(self, key: str, data: bytes) -> str:
        with self._translate("put", key):
            self._client.put_object(self.bucket, key, io.BytesIO(data), len(data))
        return self.uri(key)

    def put_file(self, key: str, path: Path) -> str:
        # fput_object switches to a multipart upload above 5 MiB, so a dropped
        # connection costs one part, not the whole checkpoint.
        with self._translate("upload", key):
            self._client.fput_object(self.bucket, key, str(path))
        return self.uri(key)

    def copy(self, source: str, key: str) -> str:
        # The server copies: minio's copy_object reads the source's size (a HEAD) and sends
        # one CopyObject up to 5 GiB, above that a multipart upload of UploadPartCopy parts.
        with self._translate("copy", source):
            self._client.copy_object(self.bucket, key, CopySource(self.bucket, source))
        return self.uri(key)

    def get_bytes(self, key: str) -> bytes:
        parts: list[bytes] = []
        self._ranged(key, 0, 0, parts.append, "get")  # offset and length 0: the whole object
        return b"".join(parts)

    def get_file(self, key: str, path: Path) -> None:
        # One GET into a temporary file renamed over ``path`` when whole (a reader never
        # sees a partial download); fget_object asked for a HEAD first, a round trip more.
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                self._ranged(key, 0, 0, out.write, "download")
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get_range(self, key: str, offset: int, length: int) -> tuple[bytes, int]:
        parts: list[bytes] = []
        total = self._ranged(key, offset, length, parts.append)
        return b"".join(parts), total

    def get_range_into(self, key: str, offset: int, length: int, fd: int) -> tuple[int, int]:
        written = 0

        def write(chunk: bytes) -> None:
            nonlocal written
            view = memoryview(chunk)
            while view:
                n = os.pwrite(fd, view, offset + written)
                written, view = written + n, view[n:]

        total = self._ranged(key, offset, length, write)
        return written, total

    def get_tail(self, key: str, length: int) -> tuple[bytes, int]:
        # One GET of a suffix range (``bytes=-N``: the last N bytes, all of a shorter object),
        # so the tail and the size it ends come from the same version of the object.
        if length <= 0:
            with self._translate("stat", key):
                return b"", self._client.stat_object(self.bucket, key).size or 0
        parts: list[bytes] = []
        total = self._ranged(key, 0, 0, parts.append, "tail get", suffix=length)
        return b"".join(parts), total

    def _ranged(self, key: str, offset: int, length: int, sink: Callable[[bytes], object], op: str = "ranged get",
                suffix: int = 0) -> int:
        """GET bytes ``offset`` to ``offset + length`` of ``key`` (or its last ``suffix`` bytes) into
        ``sink`` chunk by chunk; the object's size (a range starting past its end yields nothing)."""
        got = 0
        with self._translate(op, key):
            try:
                response = self._client.get_object(self.bucket, key, offset=offset, length=length,
                                                   request_headers={"Range": f"bytes=-{suffix}"} if suffix else None)
            except S3Error as e:
                if e.code != "InvalidRange":
                    raise
                return self._client.stat_object(self.bucket, key).size or 0  # past the end, or an empty object
            try:
                for chunk in response.stream(1 << 20):
                    sink(chunk)
                    got += len(chunk)
                total = response.headers.get("Content-Range", "").rpartition("/")[2]
            finally:
                response.close()
                response.release_conn()
        return int(total) if total.isdigit() else offset + got

    # minio has no public call for one part at a time (its put_object runs the whole upload
    # itself, which a draining agent could not abandon between parts): these send the S3
    # calls of the same names to URLs its public get_presigned_url signs (SigV4 in the query,
    # an unsigned payload, as boto3 sends parts over TLS): no part is hashed again to sign
    # it, the SHA-256 the checkpoint transfer took for its MANIFEST included. Not retried by
    # urllib3 (its retry warning logs the URL, which names the access key): the transfer
    # retries each call.

    def _presigned(self, method: str, key: str, query: dict[str, Any], body: bytes | None = None) -> Any:
        url = self._client.get_presigned_url(method, self.bucket, key, timedelta(hours=1), extra_query_params=query)
        response = self._http.request(method, url, body=body, retries=False,
                                      headers={"Content-Type": "application/octet-stream"})
        if b"<Error>" in response.data[:512]:  # Complete can fail in a 200
            raise S3Error.fromxml(response)
        if response.status >= 300:
            raise ServerError(f"HTTP {response.status}", response.status)
        return response

    def start_multipart(self, key: str) -> str:
        with self._translate("create multipart upload", key):
            return findtext(ET.fromstring(self._presigned("POST", key, {"uploads": ""}).data), "UploadId", True) or ""

    def put_part(self, key: str, upload_id: str, number: int, data: bytes, sha256: bytes | None = None) -> str:
        with self._translate(f"upload part {number}", key):
            response = self._presigned("PUT", key, {"partNumber": str(number), "uploadId": upload_id}, data)
            return str(response.headers.get("ETag", "")).strip('"')

    def complete_multipart(self, key: str, upload_id: str, etags: builtins.list[str]) -> None:
        parts = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>\"{escape(e)}\"</ETag></Part>" for n, e in enumerate(etags, 1))
        with self._translate("complete multipart upload", key):
            self._presigned("POST", key, {"uploadId": upload_id},
                            f"<CompleteMultipartUpload>{parts}</CompleteMultipartUpload>".encode())

    def abort_multipart(self, key: str, upload_id: str) -> None:
        with self._translate("abort multipart upload", key):
            self._presigned("DELETE", key, {"uploadId": upload_id})

    def exists(self, key: str) -> bool:
        try:
            with self._translate("stat", key):
                self._client.stat_object(self.bucket, key)
        except NotFound:
            return False
        return True

    def list(self, prefix: str) -> list[str]:
        return [o.key for o in self.list_info(prefix)]

    def list_info(self, prefix: str) -> builtins.list[ObjectInfo]:
        with self._translate("list", prefix):
            objects = self._client.list_objects(self.bucket, prefix=prefix, recursive=True)
            found = [ObjectInfo(o.object_name, o.size, o.last_modified, o.etag) for o in objects if o.object_name and not o.is_dir]
        return sorted(found, key=lambda o: o.key)

    def delete(self, key: str) -> None:
        # S3 answers 204 for an absent key, which is what the port asks for.
        with self._translate("delete", key):
            self._client.remove_object(self.bucket, key)

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"
