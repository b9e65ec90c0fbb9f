#!/usr/bin/env bash
# Format, start, stop and look at the local cluster of deploy/local/: three controllers and three
# brokers on 127.0.0.1, each its own process, run from the properties files beside this script.
#
#   deploy/local/cluster.sh format    # one new cluster id for all six nodes (formatted ones are skipped)
#   deploy/local/cluster.sh start     # in the background; returns once every broker is Running
#                                     # (fails, naming it, if a node exits meanwhile)
#   deploy/local/cluster.sh status    # pids, and the quorum as its leader sees it
#   deploy/local/cluster.sh stop      # SIGTERM, brokers first (controlled shutdown), then controllers
#
# Environment (all optional):
#   KRAFTPY            the kraftpy command (default: kraftpy on PATH)
#   KRAFTPY_DATA_DIR   where data, logs and pid files go (default /tmp/kraftpy, as in the files)
#   KRAFTPY_BASE_PORT  moves the ports: brokers BASE, BASE+100, BASE+200, controllers BASE+1..BASE+3
#                      (default: the files' ports, 9092/9192/9292 and 9093-9095)
#   KRAFTPY_START_TIMEOUT, KRAFTPY_STOP_TIMEOUT   seconds to wait (default 60 and 120)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KRAFTPY="${KRAFTPY:-kraftpy}"
DATA_DIR="${KRAFTPY_DATA_DIR:-/tmp/kraftpy}"
RUN_DIR="$DATA_DIR/run"
LOG_DIR="$DATA_DIR/logs"
START_TIMEOUT="${KRAFTPY_START_TIMEOUT:-60}"
STOP_TIMEOUT="${KRAFTPY_STOP_TIMEOUT:-120}"
CONTROLLERS=(controller-1 controller-2 controller-3)
BROKERS=(broker-1 broker-2 broker-3)

die() { echo "cluster.sh: $*" >&2; exit 1; }

controller_port() { echo $((KRAFTPY_BASE_PORT + $1)); }          # controller-N
broker_port() { echo $((KRAFTPY_BASE_PORT + 100 * ($1 - 1))); }  # broker-N

# Sets OVERRIDES to the --override arguments of one node: its directory always, its ports when
# KRAFTPY_BASE_PORT is set.
overrides() {
    local name="$1" n="${1##*-}"
    OVERRIDES=(--override "log.dirs=$DATA_DIR/$name")
    [ -n "${KRAFTPY_BASE_PORT:-}" ] || return 0
    local voters="1@127.0.0.1:$(controller_port 1),2@127.0.0.1:$(controller_port 2),3@127.0.0.1:$(controller_port 3)"
    OVERRIDES+=(--override "controller.quorum.voters=$voters")
    case "$name" in
        controller-*) OVERRIDES+=(--override "listeners=CONTROLLER://127.0.0.1:$(controller_port "$n")") ;;
        broker-*)
            OVERRIDES+=(--override "listeners=PLAINTEXT://127.0.0.1:$(broker_port "$n")"
                        --override "advertised.listeners=PLAINTEXT://127.0.0.1:$(broker_port "$n")") ;;
    esac
}

bootstrap_controllers() {
    if [ -n "${KRAFTPY_BASE_PORT:-}" ]; then
        echo "127.0.0.1:$(controller_port 1),127.0.0.1:$(controller_port 2),127.0.0.1:$(controller_port 3)"
    else
        echo "127.0.0.1:9093,127.0.0.1:9094,127.0.0.1:9095"
    fi
}

pid_of() { [ -f "$RUN_DIR/$1.pid" ] && cat "$RUN_DIR/$1.pid"; }
# A process that has exited is not alive even before its parent reaps it (a zombie still answers kill -0,
# and a node that exited just now may not be reaped yet when `start` runs).
pid_alive() {
    kill -0 "$1" 2>/dev/null || return 1
    [ -r "/proc/$1/stat" ] || return 0
    [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" != "Z" ]
}
alive() { local pid; pid="$(pid_of "$1")" && pid_alive "$pid"; }

cmd_format() {
    local cluster_id name
    cluster_id="${KRAFTPY_CLUSTER_ID:-$("$KRAFTPY" storage random-uuid)}"
    for name in "${CONTROLLERS[@]}" "${BROKERS[@]}"; do
        overrides "$name"
        "$KRAFTPY" storage format --config "$HERE/$name.properties" --cluster-id "$cluster_id" \
            --ignore-formatted "${OVERRIDES[@]}"
    done
    echo "formatted with cluster id $cluster_id"
}

start_node() {
    local name="$1" role="${1%%-*}"
    if alive "$name"; then echo "$name is already running (pid $(pid_of "$name"))"; return; fi
    overrides "$name"
    nohup "$KRAFTPY" "$role" --config "$HERE/$name.properties" "${OVERRIDES[@]}" --log-format json \
        >>"$LOG_DIR/$name.log" 2>&1 </dev/null &
    echo $! >"$RUN_DIR/$name.pid"
}

cmd_start() {
    mkdir -p "$RUN_DIR" "$LOG_DIR"
    local name waited=0 running
    for name in "${CONTROLLERS[@]}" "${BROKERS[@]}"; do start_node "$name"; done
    # A broker is Running once the controller unfenced it; each logs it once per start. A node that
    # exited meanwhile (a port taken, a bad file) fails the start, a controller too: the brokers run
    # with two controllers of three, and the cluster would look started without the third.
    while :; do
        running=0
        for name in "${CONTROLLERS[@]}"; do
            alive "$name" || die "$name exited; see $LOG_DIR/$name.log"
        done
        for name in "${BROKERS[@]}"; do
            alive "$name" || die "$name exited; see $LOG_DIR/$name.log"
            if tail -n 200 "$LOG_DIR/$name.log" | grep -q '"broker running"'; then
                running=$((running + 1))
            fi
        done
        [ "$running" -eq "${#BROKERS[@]}" ] && break
        [ "$waited" -ge $((START_TIMEOUT * 10)) ] && die "brokers not running after ${START_TIMEOUT}s; see $LOG_DIR"
        sleep 0.1
        waited=$((waited + 1))
    done
    echo "cluster running: bootstrap.servers=$(bootstrap_servers); logs in $LOG_DIR"
}

bootstrap_servers() {
    if [ -n "${KRAFTPY_BASE_PORT:-}" ]; then
        echo "127.0.0.1:$(broker_port 1),127.0.0.1:$(broker_port 2),127.0.0.1:$(broker_port 3)"
    else
        echo "127.0.0.1:9092,127.0.0.1:9192,127.0.0.1:9292"
    fi
}

# SIGTERM to a group of nodes at once, then wait for each: a broker's controlled shutdown moves its
# leaderships away first, a controller hands the quorum over.
stop_group() {
    local name pid waited
    for name in "$@"; do
        alive "$name" && kill -TERM "$(pid_of "$name")"
    done
    for name in "$@"; do
        pid="$(pid_of "$name")" || continue
        waited=0
        while pid_alive "$pid"; do
            [ "$waited" -ge $((STOP_TIMEOUT * 10)) ] && die "$name (pid $pid) still running after ${STOP_TIMEOUT}s"
            sleep 0.1
            waited=$((waited + 1))
        done
        rm -f "$RUN_DIR/$name.pid"
        echo "$name stopped"
    done
}

cmd_stop() {
    stop_group "${BROKERS[@]}"
    stop_group "${CONTROLLERS[@]}"
}

cmd_status() {
    local name
    for name in "${CONTROLLERS[@]}" "${BROKERS[@]}"; do
        if alive "$name"; then echo "$name running (pid $(pid_of "$name"))"; else echo "$name stopped"; fi
    done
    "$KRAFTPY" quorum status --bootstrap-controller "$(bootstrap_controllers)"
}

case "${1:-}" in
    format) cmd_format ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *) echo "usage: $0 format|start|stop|status" >&2; exit 2 ;;
esac
