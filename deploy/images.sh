#!/bin/sh
# `make images`: spotsweep's control and CPU worker images, built with no registry.
#
# 1. The base image (deploy/base-image.sh): PYTHON_IMAGE (python:3.12-slim-bookworm) if present
#    or pullable, else Debian 12's own python3 made with mmdebstrap from the apt mirror and
#    `docker import`ed as spotsweep-python:3.11-bookworm (about 30 s, once).
# 2. torch: the wheel the machine's own pip finds (its find-links, index, proxy and CA,
#    plus TORCH_INDEX as an extra index) goes to deploy/wheelhouse/, where the build
#    takes it from; the other packages come from PIP_INDEX_URL (pip's `index-url`,
#    else PyPI), and pip's `cert` (a private CA) goes in as the build secret pip-cert.
# 3. `docker compose build`: Compose v2 drives BuildKit in the daemon itself, so
#    neither buildx nor a recent docker client is needed (docs/deploy.md "Images").
#
# Usage: deploy/images.sh [OVERRIDE_FILE SERVICE...]   (more images of an override
# file, built in the same run: tests/images/stack.py builds its backing services so).
set -eu
cd "$(dirname "$0")/.."
TORCH_INDEX="${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
PIP="${PIP:-python3 -m pip}"
now() { date +%s; }
t0=$(now)
mkdir -p build deploy/wheelhouse

base=$(deploy/base-image.sh)
echo "images: base $base ($(( $(now) - t0 )) s)"

# The machine's pip settings (`pip config`, PIP_* variables): an index reachable from a
# container (not file://) and a CA file; a proxy comes from Docker's own proxy settings.
pipconf() { $PIP config get "global.$1" 2>/dev/null || true; }
index="${PIP_INDEX_URL:-$(pipconf index-url)}"
case "$index" in http://*|https://*) ;; *) index=https://pypi.org/simple ;; esac
cert="${PIP_CERT:-$(pipconf cert)}"
[ -n "$cert" ] && [ -s "$cert" ] || cert=/dev/null

t1=$(now)
pyver=$(docker run --rm --entrypoint python3 "$base" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
torch=$(grep -o 'torch==[0-9.]*' pyproject.toml | head -1)
if $PIP --version >/dev/null 2>&1; then
  # --only-binary with the image's Python: a wheel for the image, not for this machine.
  $PIP download --quiet --retries 1 --no-deps --only-binary=:all: --dest deploy/wheelhouse \
    --python-version "$pyver" --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform linux_x86_64 \
    --extra-index-url "$TORCH_INDEX" "$torch" 2>/dev/null \
    || echo "images: no $torch wheel for Python $pyver through this machine's pip; the build asks $TORCH_INDEX"
fi
echo "images: torch wheel ($(( $(now) - t1 )) s): $(ls deploy/wheelhouse | grep '^torch' || echo none)"

t2=$(now)
export SPOTSWEEP_PYTHON_IMAGE="$base" SPOTSWEEP_PIP_INDEX_URL="$index" SPOTSWEEP_PIP_CERT="$cert"
files="-f docker-compose.yml"
if [ $# -gt 0 ]; then files="$files -f $1"; shift; fi
# planner and agent build spotsweep-control:dev and spotsweep-worker:cpu (the other
# control services use the same image).
docker compose $files build --progress=plain planner agent "$@" >build/images.log 2>&1 \
  || { tail -40 build/images.log >&2; echo "images: build failed (whole log: build/images.log)" >&2; exit 1; }
echo "images: built in $(( $(now) - t2 )) s (log: build/images.log); $(( $(now) - t0 )) s in all"
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^spotsweep-' | sort
