#!/usr/bin/env bash
# A Docker engine and a small test image for the Docker sandbox's tests, on a machine
# that has neither (CI). Idempotent: a running engine and an existing image are reused.
#
#   docker/test-engine.sh            # prints the DOCKER_HOST to use on its last line
#
# The engine gets its own data root and socket and no bridge, NAT or iptables rules,
# so it touches nothing of the host's networking and starts in seconds. No registry is
# reachable here, so the image is a Debian minbase root (with python3) made by debootstrap
# from the Debian mirror apt already uses, imported with `docker import`.
set -euo pipefail

STATE_DIR="${MLRA_TEST_DOCKER_DIR:-/var/tmp/mlra-test-docker}"
SOCKET="$STATE_DIR/docker.sock"
IMAGE="${MLRA_TEST_IMAGE:-mlra-test:latest}"
export DOCKER_HOST="unix://$SOCKET"

say() { echo "test-engine: $*" >&2; }

if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing docker.io and debootstrap"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap >/dev/null 2>&1 \
            || { apt-get update -q >/dev/null 2>&1 \
                 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap >/dev/null 2>&1; } \
            || { say "could not install docker.io"; exit 1; }
    else
        say "dockerd is not installed and cannot be installed here (needs root and apt)"
        exit 1
    fi
fi

mkdir -p "$STATE_DIR"
if ! docker version >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || { say "starting dockerd needs root"; exit 1; }
    say "starting dockerd (data root $STATE_DIR/data)"
    rm -f "$SOCKET"
    # cgroupfs, also on a cgroup v2 host with systemd (whose default is the systemd
    # driver): a run's containers are then started under the run's own group
    # (mlra/tools/sandbox/docker_run_group.py), which the tests check.
    nohup dockerd --iptables=false --ip-masq=false --bridge=none \
        --exec-opt native.cgroupdriver=cgroupfs \
        --data-root "$STATE_DIR/data" --exec-root "$STATE_DIR/exec" \
        --pidfile "$STATE_DIR/dockerd.pid" -H "$DOCKER_HOST" \
        >"$STATE_DIR/dockerd.log" 2>&1 &
    for _ in $(seq 1 120); do
        docker version >/dev/null 2>&1 && break
        sleep 0.5
    done
    docker version >/dev/null 2>&1 || { say "dockerd did not come up; see $STATE_DIR/dockerd.log"; tail -5 "$STATE_DIR/dockerd.log" >&2; exit 1; }
fi

if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
    mirror="$(grep -hoE '^(URIs:|deb) +[^ ]+' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null \
        | awk '{print $2}' | grep -v security | head -1 || true)"
    mirror="${mirror:-http://deb.debian.org/debian}"
    root="$STATE_DIR/rootfs"
    rm -rf "$root"
    say "building $IMAGE with debootstrap from $mirror (about a minute)"
    debootstrap --variant=minbase --include=python3 bookworm "$root" "$mirror" >"$STATE_DIR/debootstrap.log" 2>&1 \
        || { say "debootstrap failed; see $STATE_DIR/debootstrap.log"; tail -5 "$STATE_DIR/debootstrap.log" >&2; exit 1; }
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -c . | docker import \
        -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        -c 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
    rm -rf "$root"
fi

echo "$DOCKER_HOST"
