"""A spec's ``inputs``: data staged once per node and linked read-only into each trial's folder.

``{from: s3://bucket/prefix/, to: data}`` fetches every object under the
prefix (in the S3 store the agent already talks to, the bucket named by the
URL) into the agent's input cache and links it at ``data`` in the trial's
working directory; ``{from: https://host/path/file.tar, to: data}`` fetches
one file into that cache (linked at ``data/file.tar``; ``sha256`` names its
content and is checked, else the server's ETag or Last-Modified and length
key it; a plain ``http://`` URL needs ``sha256``); ``{from: /mnt/shared/x,
to: data}`` links a path already on the node (a shared filesystem) as it is. The same model is the spec's
block and the trial message's field (the planner copies it), so what the
spec accepted is what the agent gets.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated, Any
from urllib.parse import unquote, urlsplit

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, field_validator,
                      model_serializer, model_validator)

SCHEMES = ("s3://", "https://", "http://", "/")  # what ``from`` may start with: an S3 prefix, a URL, a node path


class Input(BaseModel):
    """One input: where it comes from, where the trial sees it (relative to its working directory)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, populate_by_name=True)

    source: str = Field(alias="from", min_length=1)
    to: str = Field(min_length=1)
    # A URL's content digest (hex): checked after the download, and the cache key instead of the server's headers.
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")

    @field_validator("source")
    @classmethod
    def _known(cls, source: str) -> str:
        if source.startswith("s3://"):
            bucket = source[5:].split("/", 1)[0]
            if not bucket:
                raise ValueError(f"must name a bucket: s3://BUCKET/PREFIX/ (got {source!r})")
            if not source.endswith("/"):  # s3://b/v3 would also take v30/...: a prefix is a folder
                raise ValueError(f"must be a folder prefix ending in '/' (got {source!r}; did you mean {source + '/'!r}?)")
            return source
        if source.startswith(("https://", "http://")):
            parts = urlsplit(source)
            if not parts.hostname or parts.username or parts.password or not url_file_name(source):
                raise ValueError(f"must be a URL of one file, https://HOST/PATH/FILE, without credentials (got {source!r})")
            return source
        if source.startswith("/") and ".." not in PurePosixPath(source).parts:
            return source
        raise ValueError(f"must be an S3 prefix (s3://bucket/prefix/), an https:// URL of a file or an absolute path "
                         f"on the node without '..' (got {source!r})")

    @model_validator(mode="after")
    def _checkable(self) -> Input:
        if self.sha256 is not None and not self.is_url:
            raise ValueError(f"sha256 is for a URL input, whose one file it checks (from: {self.source!r})")
        if self.source.startswith("http://") and self.sha256 is None:
            raise ValueError(f"a plain http:// URL needs sha256 (the file's digest), since nothing else vouches for "
                             f"what arrives; or use https:// (from: {self.source!r})")
        return self

    @field_validator("to")
    @classmethod
    def _relative(cls, to: str) -> str:
        path = PurePosixPath(to)
        if path.is_absolute() or ".." in path.parts or str(path) in (".", ""):
            raise ValueError(f"must be a relative path inside the trial's working directory, without '..' (got {to!r})")
        return str(path)

    @model_serializer(mode="wrap")
    def _without_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """No ``sha256`` key when not given: an input without one dumps as before the field existed."""
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if v is not None or k != "sha256"}

    @property
    def is_url(self) -> bool:
        return self.source.startswith(("https://", "http://"))

    @property
    def bucket_prefix(self) -> tuple[str, str]:
        """``(bucket, prefix)`` of an ``s3://`` source."""
        bucket, _, prefix = self.source[5:].partition("/")
        return bucket, prefix


def without_store(inputs: list[Input]) -> str | None:
    """Why ``inputs`` cannot be staged where there is no S3 store (local ``spotsweep run`` without
    ``SPOTSWEEP_S3_ENDPOINT``), naming the first ``s3://`` input; None when none needs one."""
    for i, item in enumerate(inputs):
        if item.source.startswith("s3://"):
            return (f"inputs[{i}].from: {item.source} is staged from an S3 store, and this machine has none: set "
                    "SPOTSWEEP_S3_ENDPOINT (and its credentials) to run it here; a cluster's agents stage it from theirs")
    return None


def url_file_name(url: str) -> str:
    """The file name a URL input gets under ``to``: its path's last part (empty when it has none, or an unsafe one)."""
    name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    return "" if name in ("", ".", "..") or "/" in name or "\0" in name else name


def _unique(inputs: list[Input]) -> list[Input]:
    seen: list[PurePosixPath] = []
    for item in inputs:
        to = PurePosixPath(item.to)
        for other in seen:
            if to == other or other in to.parents or to in other.parents:
                raise ValueError(f"two inputs go to {str(other)!r} and {item.to!r}: each 'to' must be its own path, "
                                 "neither inside the other")
        seen.append(to)
    return inputs


Inputs = Annotated[list[Input], AfterValidator(_unique)]
