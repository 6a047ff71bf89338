"""One contract for every ArtifactStore adapter, then what is adapter-specific.

The ``store`` fixture (conftest.py) yields a LocalArtifactStore on a temp dir and an
S3ArtifactStore on a fresh bucket of the moto S3 server (a real HTTP server on
loopback, not a mock), so both adapters must pass the same tests.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3
from minio import Minio

from spotsweep.shared.artifacts import LocalArtifactStore, NotFound, S3ArtifactStore, open_store
from spotsweep.shared.artifacts.port import ArtifactStore
from spotsweep.shared.errors import PermanentError, RetryableError
from spotsweep.shared.settings import Settings

MiB = 1024 * 1024


def _s3_settings(s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    for name, value in s3_env.items():
        monkeypatch.setenv(name, value)
    return Settings()


def _raw_client(s3_env: dict[str, str]) -> Minio:
    """A plain minio client, to look at the bucket behind the store's back."""
    return Minio(
        s3_env["SPOTSWEEP_S3_ENDPOINT"].removeprefix("http://"),
        access_key=s3_env["SPOTSWEEP_S3_ACCESS_KEY"],
        secret_key=s3_env["SPOTSWEEP_S3_SECRET_KEY"],
        secure=False,
        region=s3_env["SPOTSWEEP_S3_REGION"],
    )


# -- the contract ---------------------------------------------------------------


def test_put_and_get_bytes(store: ArtifactStore) -> None:
    uri = store.put_bytes("sweeps/s1/x.json", b'{"a": 1}')
    assert uri == store.uri("sweeps/s1/x.json")
    assert store.get_bytes("sweeps/s1/x.json") == b'{"a": 1}'


def test_empty_object_round_trips(store: ArtifactStore) -> None:
    store.put_bytes("empty", b"")
    assert store.get_bytes("empty") == b""
    assert store.exists("empty")


def test_put_and_get_file(store: ArtifactStore, tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(b"\x00\x01binary\xff")
    store.put_file("a/file.bin", src)
    dest = tmp_path / "out" / "nested" / "file.bin"  # parents do not exist yet
    store.get_file("a/file.bin", dest)
    assert dest.read_bytes() == b"\x00\x01binary\xff"
    assert store.get_bytes("a/file.bin") == b"\x00\x01binary\xff"


def test_put_replaces_existing(store: ArtifactStore, tmp_path: Path) -> None:
    store.put_bytes("k", b"first, and longer than the second")
    store.put_bytes("k", b"second")
    assert store.get_bytes("k") == b"second"
    src = tmp_path / "third"
    src.write_bytes(b"third")
    store.put_file("k", src)
    assert store.get_bytes("k") == b"third"


def test_missing_key_raises_not_found(store: ArtifactStore, tmp_path: Path) -> None:
    store.put_bytes("present", b"x")
    with pytest.raises(NotFound):
        store.get_bytes("absent")
    with pytest.raises(NotFound):
        store.get_bytes("present/below")
    dest = tmp_path / "dest"
    with pytest.raises(NotFound):
        store.get_file("absent", dest)
    assert not dest.exists()


def test_list_is_recursive_sorted_and_a_plain_prefix(store: ArtifactStore) -> None:
    for key in ["a/b/z", "a/b/c/deep", "a/b/1", "a/b2/sibling", "a/c", "top"]:
        store.put_bytes(key, key.encode())
    assert store.list("a/b/") == ["a/b/1", "a/b/c/deep", "a/b/z"]
    assert store.list("a/") == ["a/b/1", "a/b/c/deep", "a/b/z", "a/b2/sibling", "a/c"]
    assert store.list("a/b") == ["a/b/1", "a/b/c/deep", "a/b/z", "a/b2/sibling"]
    assert store.list("") == ["a/b/1", "a/b/c/deep", "a/b/z", "a/b2/sibling", "a/c", "top"]
    assert store.list("nothing/") == []


def test_delete_is_idempotent(store: ArtifactStore) -> None:
    store.put_bytes("d/one", b"1")
    store.put_bytes("d/two", b"2")
    store.delete("d/one")
    store.delete("d/one")
    store.delete("never/was")
    with pytest.raises(NotFound):
        store.get_bytes("d/one")
    assert store.list("d/") == ["d/two"]


def test_exists(store: ArtifactStore) -> None:
    assert not store.exists("e/x")
    store.put_bytes("e/x", b"x")
    assert store.exists("e/x")
    assert not store.exists("e")  # a "folder" is not a key
    store.delete("e/x")
    assert not store.exists("e/x")


class _Dict(ArtifactStore):
    """An adapter without a copy of its own: the port's default copy serves it."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put_bytes(self, key: str, data: bytes) -> str:
        self.objects[key] = data
        return self.uri(key)

    def put_file(self, key: str, path: Path) -> str:
        return self.put_bytes(key, path.read_bytes())

    def get_bytes(self, key: str) -> bytes:
        if key not in self.objects:
            raise NotFound(key)
        return self.objects[key]

    def get_file(self, key: str, path: Path) -> None:
        path.write_bytes(self.get_bytes(key))

    def list(self, prefix: str) -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)

    def uri(self, key: str) -> str:
        return f"mem://{key}"


@pytest.mark.parametrize("kind", ["adapter", "port default"])
def test_copy_replaces_the_target_and_leaves_the_source(store: ArtifactStore, kind: str) -> None:
    """PBT's exploit copies a donor's checkpoint files into another trial's prefix this way."""
    target: ArtifactStore = store if kind == "adapter" else _Dict()
    target.put_bytes("c/src/model.pt", b"weights" * 1000)
    target.put_bytes("c/dst/model.pt", b"old")
    uri = target.copy("c/src/model.pt", "c/dst/model.pt")
    assert uri == target.uri("c/dst/model.pt")
    assert target.get_bytes("c/dst/model.pt") == b"weights" * 1000
    assert target.get_bytes("c/src/model.pt") == b"weights" * 1000
    assert target.copy("c/src/model.pt", "c/new/deep/model.pt") == target.uri("c/new/deep/model.pt")
    assert target.list("c/") == ["c/dst/model.pt", "c/new/deep/model.pt", "c/src/model.pt"]
    with pytest.raises(NotFound):
        target.copy("c/absent", "c/dst/other")
    assert not target.exists("c/dst/other")


def test_copy_of_an_object_above_one_copyobject_goes_in_parts(store: ArtifactStore,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Above 5 GiB S3's CopyObject refuses a source: a frozen base model that large is still copied in the
    store (UploadPartCopy parts), never sent again. The limit is lowered to 5 MiB so moto sees the parts."""
    import minio.api

    monkeypatch.setattr(minio.api, "MAX_PART_SIZE", 5 * MiB)
    data = os.urandom(12 * MiB + 3)
    store.put_bytes("c/src/base.safetensors", data)
    store.copy("c/src/base.safetensors", "c/dst/base.safetensors")
    assert store.get_bytes("c/dst/base.safetensors") == data
    if isinstance(store, S3ArtifactStore):  # a multipart object's ETag ends in its part count: 5 + 5 + 2 MiB
        assert str(store._client.stat_object(store.bucket, "c/dst/base.safetensors").etag).endswith("-3")


def test_uri_format(store: ArtifactStore) -> None:
    key = "sweeps/s1/trials/t1/logs/attempt-1/stdout.log"
    assert store.uri(key).split("://")[0].isalnum() and store.uri(key).endswith(key)  # any store: a URI ending in the key
    if isinstance(store, LocalArtifactStore):
        assert store.uri(key) == "file://" + str(store.root / key)
    if isinstance(store, S3ArtifactStore):
        assert store.uri(key) == f"s3://{store.bucket}/{key}"


def test_large_file_round_trip(store: ArtifactStore, tmp_path: Path) -> None:
    data = os.urandom(6 * MiB + 123)  # above S3's 5 MiB part size: multipart
    src = tmp_path / "big.bin"
    src.write_bytes(data)
    store.put_file("big/model.pt", src)
    dest = tmp_path / "back.bin"
    store.get_file("big/model.pt", dest)
    assert dest.read_bytes() == data


def test_get_range_reads_part_of_an_object_and_tells_its_size(store: ArtifactStore) -> None:
    data = bytes(range(256)) * 100
    store.put_bytes("r/obj", data)
    assert store.get_range("r/obj", 0, 10) == (data[:10], len(data))
    assert store.get_range("r/obj", 25_000, 1_000) == (data[25_000:], len(data))  # short past the end
    assert store.get_range("r/obj", len(data), 10) == (b"", len(data))  # nothing past the end
    with pytest.raises(NotFound):
        store.get_range("r/absent", 0, 10)


def test_get_tail_reads_only_the_end_and_tells_the_size(store: ArtifactStore) -> None:
    data = os.urandom(3 * MiB + 7)
    store.put_bytes("t/log", data)
    assert store.get_tail("t/log", 1000) == (data[-1000:], len(data))
    assert store.get_tail("t/log", 4 * MiB) == (data, len(data))  # a shorter object: all of it
    assert store.get_tail("t/log", 0) == (b"", len(data))
    store.put_bytes("t/empty", b"")
    assert store.get_tail("t/empty", 10) == (b"", 0)
    with pytest.raises(NotFound):
        store.get_tail("t/absent", 10)


def test_get_range_into_writes_a_range_at_its_offset(store: ArtifactStore, tmp_path: Path) -> None:
    data = os.urandom(3 * MiB + 5)
    store.put_bytes("r/big", data)
    target = tmp_path / "out.bin"
    fd = os.open(target, os.O_RDWR | os.O_CREAT)
    try:
        os.ftruncate(fd, len(data))
        assert store.get_range_into("r/big", 2 * MiB, 2 * MiB, fd) == (MiB + 5, len(data))  # short past the end
        assert store.get_range_into("r/big", 0, 2 * MiB, fd) == (2 * MiB, len(data))
    finally:
        os.close(fd)
    assert target.read_bytes() == data
    with pytest.raises(NotFound):
        store.get_range_into("r/absent", 0, 10, 0)


def _multipart(store: ArtifactStore) -> None:
    if type(store).start_multipart is ArtifactStore.start_multipart:
        pytest.skip("no multipart uploads in this adapter (optional: a transfer then sends a file whole)")


def test_multipart_upload_appears_whole_only_when_completed(store: ArtifactStore) -> None:
    _multipart(store)
    parts = [os.urandom(5 * MiB), os.urandom(5 * MiB), b"tail"]
    upload = store.start_multipart("mp/model.pt")
    etags = [""] * 3
    for n in (3, 1, 2):  # in any order, as parallel workers send them
        etags[n - 1] = store.put_part("mp/model.pt", upload, n, parts[n - 1])
    assert store.list("mp/") == []  # nothing to read until it is complete
    store.complete_multipart("mp/model.pt", upload, etags)
    assert store.get_bytes("mp/model.pt") == b"".join(parts)
    assert store.list("mp/") == ["mp/model.pt"]


def test_an_aborted_multipart_upload_leaves_the_key_as_it_was(store: ArtifactStore) -> None:
    _multipart(store)
    store.put_bytes("mp/k", b"old")
    upload = store.start_multipart("mp/k")
    store.put_part("mp/k", upload, 1, b"new part")
    store.abort_multipart("mp/k", upload)
    assert store.get_bytes("mp/k") == b"old"
    assert store.list("mp/") == ["mp/k"]
    # Gone with its parts (S3: NoSuchUpload; moto answers 500, so any refusal counts).
    with pytest.raises((PermanentError, RetryableError, NotFound)):
        store.complete_multipart("mp/k", upload, ["x"])


# -- S3 only --------------------------------------------------------------------


def test_s3_large_file_goes_multipart(s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    store = S3ArtifactStore.from_settings(_s3_settings(s3_env, monkeypatch))
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(6 * MiB))
    store.put_file("big", src)
    etag = _raw_client(s3_env).stat_object(store.bucket, "big").etag
    assert etag is not None and etag.endswith("-2"), etag  # "<md5 of md5s>-<parts>"


def test_s3_creates_missing_bucket_and_shares_it(s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    raw = _raw_client(s3_env)
    bucket = s3_env["SPOTSWEEP_S3_BUCKET"]
    assert not raw.bucket_exists(bucket)
    first = S3ArtifactStore.from_settings(_s3_settings(s3_env, monkeypatch))
    assert raw.bucket_exists(bucket)
    first.put_bytes("shared", b"from the first")
    second = S3ArtifactStore.from_settings(_s3_settings(s3_env, monkeypatch))
    assert second.get_bytes("shared") == b"from the first"


def test_s3_concurrent_creators_all_succeed(s3_env: dict[str, str]) -> None:
    # Outside us-east-1 S3 (and moto) answers a second create of a bucket you
    # own with BucketAlreadyOwnedByYou; in us-east-1 it quietly succeeds, which
    # would not exercise the race. Eight stores start at once on a new bucket.
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def create() -> None:
        barrier.wait()
        try:
            S3ArtifactStore(
                s3_env["SPOTSWEEP_S3_ENDPOINT"],
                s3_env["SPOTSWEEP_S3_ACCESS_KEY"],
                s3_env["SPOTSWEEP_S3_SECRET_KEY"],
                s3_env["SPOTSWEEP_S3_BUCKET"],
                region="eu-west-1",
            )
        except BaseException as e:  # collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=create) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_s3_endpoint_forms(s3_env: dict[str, str]) -> None:
    url = s3_env["SPOTSWEEP_S3_ENDPOINT"]
    args = (s3_env["SPOTSWEEP_S3_ACCESS_KEY"], s3_env["SPOTSWEEP_S3_SECRET_KEY"], s3_env["SPOTSWEEP_S3_BUCKET"])
    bare = S3ArtifactStore(url.removeprefix("http://"), *args, secure=False, region="us-east-1")
    assert (bare.endpoint, bare.secure) == (url.removeprefix("http://"), False)
    schemed = S3ArtifactStore(url, *args, region="us-east-1")
    assert schemed.secure is False
    bare.put_bytes("k", b"v")
    assert schemed.get_bytes("k") == b"v"
    with pytest.raises(PermanentError):
        S3ArtifactStore("ftp://host:21", *args)
    with pytest.raises(PermanentError):
        S3ArtifactStore(url + "/some/path", *args)


def test_s3_secrets_stay_out_of_repr(s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    store = S3ArtifactStore.from_settings(_s3_settings(s3_env, monkeypatch))
    text = repr(store) + str(store)
    assert s3_env["SPOTSWEEP_S3_SECRET_KEY"] not in text
    assert s3_env["SPOTSWEEP_S3_ACCESS_KEY"] not in text
    assert store.bucket in text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def authenticating_s3() -> Iterator[str]:
    """A second moto server that checks credentials (the shared one accepts any):
    with INITIAL_NO_AUTH_ACTION_COUNT=0 every request must carry IAM keys it
    knows, and it knows none."""
    port = _free_port()
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def test_s3_wrong_credentials_are_permanent_and_keep_the_secret(authenticating_s3: str) -> None:
    secret = f"wrong-secret-{uuid.uuid4().hex}"
    with pytest.raises(PermanentError) as info:
        S3ArtifactStore(authenticating_s3, "AKIAWRONGKEY", secret, "spotsweep", region="us-east-1")
    assert not isinstance(info.value, RetryableError)
    assert "spotsweep" in str(info.value)  # says which bucket
    assert secret not in str(info.value)
    assert secret not in repr(info.value)
    assert "AKIAWRONGKEY" not in str(info.value)


def test_s3_unreachable_endpoint_is_retryable_and_quick() -> None:
    port = _free_port()  # closed again at once: nothing listens there
    secret = f"secret-{uuid.uuid4().hex}"
    pool = urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=1.0, read=1.0),
        retries=urllib3.Retry(total=0),
    )
    started = time.monotonic()
    with pytest.raises(RetryableError) as info:
        S3ArtifactStore(f"127.0.0.1:{port}", "key", secret, "spotsweep", secure=False, http_client=pool)
    assert time.monotonic() - started < 5
    assert secret not in str(info.value)
    assert f"127.0.0.1:{port}" in str(info.value)


# -- local only -----------------------------------------------------------------


@pytest.mark.parametrize("key", ["../outside", "a/../../outside", "/etc/passwd", "a//b", "./a", ""])
def test_local_rejects_keys_that_leave_the_root(tmp_path: Path, key: str) -> None:
    store = LocalArtifactStore(tmp_path / "root")
    with pytest.raises(PermanentError) as info:
        store.put_bytes(key, b"x")
    assert repr(key) in str(info.value)
    with pytest.raises(PermanentError):
        store.get_bytes(key)
    assert not (tmp_path / "outside").exists()


def test_local_rejects_symlink_out_of_the_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(outside)
    store = LocalArtifactStore(root)
    with pytest.raises(PermanentError):
        store.put_bytes("link/x", b"x")
    assert list(outside.iterdir()) == []


def test_local_readers_never_see_half_a_file(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    versions = (b"a" * (4 * MiB), b"b" * (4 * MiB))
    store.put_bytes("ckpt", versions[0])
    done = threading.Event()
    whole: list[bool] = []

    def read() -> None:
        while not done.is_set():
            whole.append(store.get_bytes("ckpt") in versions)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(40):
            store.put_bytes("ckpt", versions[i % 2])
    finally:
        done.set()
        reader.join()
    assert whole and all(whole), f"{whole.count(False)} of {len(whole)} reads saw a partial write"
    assert store.list("") == ["ckpt"]  # no temp files left, none listed


# -- open_store -------------------------------------------------------------------


def test_open_store_picks_local_without_endpoint(tmp_path: Path) -> None:
    store = open_store(Settings(s3_endpoint=None, home=tmp_path))
    assert isinstance(store, LocalArtifactStore)
    assert store.root == (tmp_path / "artifacts").resolve()
    explicit = open_store(Settings(s3_endpoint=None, home=tmp_path), local_root=tmp_path / "elsewhere")
    assert isinstance(explicit, LocalArtifactStore) and explicit.root == (tmp_path / "elsewhere").resolve()


def test_open_store_picks_s3_with_endpoint(s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(_s3_settings(s3_env, monkeypatch))
    assert isinstance(store, S3ArtifactStore)
    assert store.bucket == s3_env["SPOTSWEEP_S3_BUCKET"]
