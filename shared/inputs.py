"""A spec's ``inputs``: data staged once per node and linked read-only into each trial's folder.

``{from: s3://bucket/prefix/, to: data}`` fetches every object under the
prefix (in the S3 store the agent already talks to, the bucket named by the
URL) into the agent's input cache and links it at ``data`` in the trial's
working directory; ``{from: /mnt/shared/x, to: data}`` links a path already
on the node (a shared filesystem) as it is. The same model is the spec's
block and the trial message's field (the planner copies it), so what the
spec accepted is what the agent gets.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

SCHEMES = ("s3://", "/")  # what ``from`` may start with: an S3 prefix, a path on the node


class Input(BaseModel):
    """One input: where it comes from, where the trial sees it (relative to its working directory)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, populate_by_name=True)

    source: str = Field(alias="from", min_length=1)
    to: str = Field(min_length=1)

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
        if source.startswith("/") and ".." not in PurePosixPath(source).parts:
            return source
        raise ValueError(f"must be an S3 prefix (s3://bucket/prefix/) or an absolute path on the node without '..' "
                         f"(got {source!r}; https:// and other schemes are not supported)")

    @field_validator("to")
    @classmethod
    def _relative(cls, to: str) -> str:
        path = PurePosixPath(to)
        if path.is_absolute() or ".." in path.parts or str(path) in (".", ""):
            raise ValueError(f"must be a relative path inside the trial's working directory, without '..' (got {to!r})")
        return str(path)

    @property
    def bucket_prefix(self) -> tuple[str, str]:
        """``(bucket, prefix)`` of an ``s3://`` source."""
        bucket, _, prefix = self.source[5:].partition("/")
        return bucket, prefix


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
