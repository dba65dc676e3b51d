#!/usr/bin/env bash
# Metadata operations side by side (issue 30, point 6): a private RabbitMQ node (Debian's
# rabbitmq-server, with its management plugin) and Warren, one after the other on fresh
# brokers, each driven by the same client (bench/metadata_load.py, raw AMQP sockets and
# urllib, so no client library favours either):
#   (a) 1,000 durable queue declares: 10 connections at once, 100 declares each
#   (b) 30,000 binds from one client: one durable queue, amq.direct, 30,000 routing keys
#   (c) POST /api/definitions with 3,000 durable queues and 3,000 bindings
# Every declare and bind waits for its -ok, which for a durable definition means "on disk".
# Prints the seconds of each and the ratio Warren / RabbitMQ (below 1: Warren is faster).
# Targets: (a) <= 1.5, (b) and (c) <= 1.0.
#
#   bench/metadata.sh [--rounds N] [--only a,b,c] [--binds N] [--brokers rabbitmq,warren]
#                     [--out-dir DIR]
#
# With --rounds N each broker runs N times (fresh each time) and the table shows medians.
# The machine may be shared: re-run when the figures are noisy. Writes
# metadata-STAMP.txt (every run and the table) into --out-dir (default bench/results).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
# shellcheck source=bench/brokers.sh
source "$REPO_ROOT/bench/brokers.sh"
readonly LOAD="$REPO_ROOT/bench/metadata_load.py"
readonly RUN_TIMEOUT_S=900

rounds=1
only="a,b,c"
binds=30000
brokers="rabbitmq,warren"
out_dir="$REPO_ROOT/bench/results"
work_dir=""
summary=""
declare -A seconds_of=()

main() {
  parse_args "$@"
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  work_dir="$(mktemp -d -t warren-metadata.XXXXXX)"
  mkdir -p "$out_dir"
  summary="$out_dir/metadata-$(date +%Y-%m-%d-%H%M%S).txt"
  say "metadata: workloads $only, $rounds round(s), $binds binds; $(date -Is)"
  local round
  for round in $(seq 1 "$rounds"); do
    [[ ",$brokers," != *",rabbitmq,"* ]] || run_rabbitmq "$round"
    [[ ",$brokers," != *",warren,"* ]] || run_warren "$round"
  done
  report
}

parse_args() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --rounds) rounds="$2"; shift 2 ;;
      --only) only="$2"; shift 2 ;;
      --binds) binds="$2"; shift 2 ;;
      --brokers) brokers="$2"; shift 2 ;;
      --out-dir) out_dir="$2"; shift 2 ;;
      *) echo "usage: $0 [--rounds N] [--only a,b,c] [--binds N]" \
           "[--brokers rabbitmq,warren] [--out-dir DIR]" >&2
         exit 2 ;;
    esac
  done
}

cleanup() {
  stop_warren
  stop_rabbitmq
  [[ -z "$work_dir" ]] || rm -rf "$work_dir"
}

run_rabbitmq() {
  rm -rf "$work_dir/rabbitmq"
  rabbit_management=1
  start_rabbitmq
  run_workloads rabbitmq "$1" "$rabbit_port" "$rabbit_http_port"
  stop_rabbitmq
}

run_warren() {
  rm -rf "$work_dir/warren"
  start_warren
  run_workloads warren "$1" "$warren_port" "$warren_http_port"
  stop_warren
}

# run_workloads BROKER ROUND AMQP_PORT HTTP_PORT: runs the selected workloads, in order.
run_workloads() {
  local broker="$1" round="$2" port="$3" http_port="$4" workload line
  for workload in a b c; do
    [[ ",$only," == *",$workload,"* ]] || continue
    case "$workload" in
      a) line="$(timeout "$RUN_TIMEOUT_S" python3 "$LOAD" declares 127.0.0.1 "$port" \
           --connections 10 --queues-each 100)" ;;
      b) line="$(timeout "$RUN_TIMEOUT_S" python3 "$LOAD" binds 127.0.0.1 "$port" \
           --binds "$binds")" ;;
      c) line="$(timeout "$RUN_TIMEOUT_S" python3 "$LOAD" import 127.0.0.1 "$http_port" \
           --queues 3000)" ;;
    esac
    local s="${line#seconds=}"
    say "round $round $broker ($workload): $s s"
    seconds_of[$broker,$workload]="${seconds_of[$broker,$workload]:-} $s"
  done
}

report() {
  [[ ",$brokers," == *",rabbitmq,"* && ",$brokers," == *",warren,"* ]] || return 0
  say ""
  say "workload                                   RabbitMQ s   Warren s   Warren/RabbitMQ  target"
  local workload title target
  for workload in a b c; do
    [[ ",$only," == *",$workload,"* ]] || continue
    case "$workload" in
      a) title="(a) 1,000 durable declares, 10 conns"; target="<= 1.5" ;;
      b) title="(b) $binds binds, one client"; target="<= 1.0" ;;
      c) title="(c) import 3,000 queues + bindings"; target="<= 1.0" ;;
    esac
    say "$(python3 - "$title" "$target" "${seconds_of[rabbitmq,$workload]}" \
      "${seconds_of[warren,$workload]}" <<'PY'
import statistics, sys
title, target = sys.argv[1], sys.argv[2]
rabbit = statistics.median(float(s) for s in sys.argv[3].split())
warren = statistics.median(float(s) for s in sys.argv[4].split())
print(f"{title:<42} {rabbit:>10.2f} {warren:>10.2f} {warren / rabbit:>17.2f}  {target}")
PY
)"
  done
  say "rabbitmq version: ${rabbit_version:-unknown}; summary in $summary"
}

main "$@"
