#!/usr/bin/env bash
# Make this machine ready for envfarm; idempotent, and fast when everything is already there.
#
#   scripts/setup.sh              system packages, docker daemon, .venv, images   (what `make setup` runs)
#   scripts/setup.sh --venv-only  only the virtual environment                     (what `make lint` runs)
#
# Runs as root on a fresh Debian bookworm machine. Installs docker.io, bubblewrap, debootstrap and chromium
# (+ chromium-driver) only when a binary is missing, starts dockerd without a bridge or iptables rules when
# `docker info` fails, creates .venv (Python >= 3.11) with `pip install -e '.[dev,train,hf,ray,dashboard]'`
# (torch pinned to the CPU wheel on this disk), then builds the images (`envfarm images build`).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
STAMP="$VENV/.stamp"
DOCKERD_PID=/var/run/envfarm-dockerd.pid
DOCKERD_LOG=/var/log/envfarm-dockerd.log
DOCKERD_WAIT_S=60

if [ -t 1 ]; then BOLD=$'\033[1m' RED=$'\033[31m' PLAIN=$'\033[0m'; else BOLD='' RED='' PLAIN=''; fi
say() { printf '%s==> %s%s\n' "$BOLD" "$*" "$PLAIN"; }
die() { printf '%ssetup: %s%s\n' "$RED" "$*" "$PLAIN" >&2; exit 1; }

need_root() {
    [ "$(id -u)" -eq 0 ] || die "$1 needs root: run \`sudo make setup\`"
}

apt_install() {
    need_root "installing $*"
    say "apt-get install $*"
    export DEBIAN_FRONTEND=noninteractive
    # keep apt from starting services (a stock dockerd would create a bridge); we start dockerd ourselves
    local policy=/usr/sbin/policy-rc.d own_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && own_policy=1
    fi
    local rc=0
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@"; } || rc=$?
    if [ "$own_policy" -eq 1 ]; then rm -f "$policy"; fi
    [ "$rc" -eq 0 ] || die "apt-get install $* failed (exit $rc)"
}

system_packages() {
    local missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    command -v bwrap >/dev/null || missing+=(bubblewrap)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    command -v chromium >/dev/null || missing+=(chromium)            # dashboard tests: a real headless browser
    command -v chromedriver >/dev/null || missing+=(chromium-driver)
    if [ "${#missing[@]}" -gt 0 ]; then
        apt_install "${missing[@]}"
    fi
}

docker_daemon() {
    if docker info >/dev/null 2>&1; then
        return
    fi
    need_root "starting dockerd"
    say "starting dockerd (no bridge, no iptables; log: $DOCKERD_LOG)"
    setsid dockerd --bridge=none --iptables=false --ip-masq=false --pidfile "$DOCKERD_PID" \
        >"$DOCKERD_LOG" 2>&1 </dev/null &
    local pid=$! waited=0
    until docker info >/dev/null 2>&1; do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 30 "$DOCKERD_LOG" >&2 || true
            die "dockerd exited; its log is above (full log: $DOCKERD_LOG)"
        fi
        if [ "$waited" -ge "$DOCKERD_WAIT_S" ]; then
            tail -n 30 "$DOCKERD_LOG" >&2 || true
            die "dockerd did not answer \`docker info\` within ${DOCKERD_WAIT_S}s; its log is above"
        fi
        sleep 1
        waited=$((waited + 1))
    done
    say "dockerd answers after ${waited}s"
}

pick_python() {
    local candidate
    for candidate in "${PYTHON:-}" python3 /usr/bin/python3 python3.11; do
        if [ -z "$candidate" ] || ! command -v "$candidate" >/dev/null; then continue; fi
        if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            command -v "$candidate"
            return
        fi
    done
    die "no python3 >= 3.11 found (set PYTHON=/path/to/python3.11)"
}

virtualenv() {
    if [ ! -x "$VENV/bin/python" ]; then
        local py
        py=$(pick_python)
        say "creating $VENV with $py ($("$py" --version 2>&1))"
        if ! "$py" -m venv "$VENV" 2>/dev/null; then
            rm -rf "$VENV"
            apt_install python3-venv  # Debian ships ensurepip separately
            "$py" -m venv "$VENV"
        fi
    fi
    if ! [ -f "$STAMP" ] || ! [ "$STAMP" -nt pyproject.toml ]; then
        say "pip install -e '.[dev,train,hf,ray,dashboard]'"
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[dev,train,hf,ray,dashboard]'
        touch "$STAMP"
    fi
    swebench
}

swebench() {
    # The harness grades with swebench's own modules. Its declared dependencies (datasets, modal, ...) are
    # not needed for that, so it is installed without them; unidiff, the one its parsers import, is an
    # envfarm dependency. envfarm.harness._swebench imports the modules without swebench/harness/__init__.py.
    if "$VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("swebench") != "5.0.2")' \
        2>/dev/null; then
        return
    fi
    say "pip install --no-deps swebench==5.0.2"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps 'swebench==5.0.2'
}

rootfs_reachable() {
    # The bwrap backend runs sandboxes as an unprivileged host uid, which must be able to traverse every
    # folder above the rootfs folders (a default ENVFARM_HOME under /root is not: /root is 0700).
    # o+x lets it pass through a folder without listing it.
    local dir
    dir=$("$VENV/bin/python" -c 'from envfarm import config; print(config.home() / "rootfs")')
    while [ "$dir" != / ]; do
        if [ -d "$dir" ] && [ $(( 0$(stat -c %a "$dir") & 1 )) -eq 0 ]; then
            if [ "$(id -u)" -ne 0 ]; then
                echo "setup: warning: $dir is not traversable by others; bwrap sandboxes cannot reach" \
                    "their rootfs (run \`chmod o+x $dir\` as root, or set ENVFARM_HOME elsewhere)" >&2
            else
                say "chmod o+x $dir (so bwrap sandboxes can reach the rootfs folders below it)"
                chmod o+x "$dir"
            fi
        fi
        dir=$(dirname "$dir")
    done
}

main() {
    if [ "${1:-}" = "--venv-only" ]; then
        virtualenv
        return
    fi
    local start=$SECONDS
    system_packages
    docker_daemon
    virtualenv
    say "envfarm images build"
    "$VENV/bin/envfarm" images build
    rootfs_reachable
    say "setup done in $((SECONDS - start))s"
}

main "$@"
