#!/bin/sh
# The Python base image spotsweep's images (and CI's trial test image) start from, printed on stdout:
# PYTHON_IMAGE (python:3.12-slim-bookworm) if present or pullable, else Debian 12's own python3
# made with mmdebstrap from the apt mirror and `docker import`ed as spotsweep-python:3.11-bookworm
# (about 30 s, once). Used by deploy/images.sh and tests/agent/containers (no registry needed).
set -eu
PYTHON_IMAGE="${PYTHON_IMAGE:-python:3.12-slim-bookworm}"
DEBIAN_BASE=spotsweep-python:3.11-bookworm
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
if docker image inspect "$PYTHON_IMAGE" >/dev/null 2>&1 || docker pull -q "$PYTHON_IMAGE" >/dev/null 2>&1; then
  echo "$PYTHON_IMAGE"; exit 0
fi
if ! docker image inspect "$DEBIAN_BASE" >/dev/null 2>&1; then
  echo "base-image: $PYTHON_IMAGE cannot be pulled; making $DEBIAN_BASE with mmdebstrap from $DEBIAN_MIRROR" >&2
  command -v mmdebstrap >/dev/null || { echo "base-image: needs mmdebstrap (apt-get install mmdebstrap)" >&2; exit 1; }
  mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --aptopt='Acquire::Languages "none"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    bookworm - "$DEBIAN_MIRROR" | docker import --change 'CMD ["python3"]' - "$DEBIAN_BASE" >/dev/null
fi
echo "$DEBIAN_BASE"
