#!/usr/bin/env bash
# The seed benchmark suite (issue 30, point 9): every seed workload against a private
# RabbitMQ node and then against Warren, one broker at a time on this machine, summed up in
# ONE table (rate, latency p50/p95/p99, broker CPU per message, Warren/RabbitMQ ratios) and a
# PNG chart of the ratios. See bench/README.md.
#
#   bench/seeds.sh [--seconds N] [--only ID,ID...] [--only-broker warren|rabbitmq]
#                  [--warren BIN] [--label TEXT] [--connections N] [--out-dir DIR]
#
# Workloads (ids for --only; a prefix such as X or F selects a family; PerfTest's flags):
#   W1         durable queue, persistent, confirms 192 in flight, qos 200, multi-ack 200
#   W2         transient, autoack, 1 producer 1 consumer, 12-byte bodies
#   X-default X-direct X-fanout X-topic X-headers
#              1 producer -> 1 queue -> 1 autoack consumer through each exchange type (the
#              five of bench/features.sh --only types)
#   F50 F100 F200  fanout at 1,000 msg/s to 50/100/200 queues, an autoack consumer on each
#   L1k L10k   latency at 1,000 and 10,000 msg/s with confirms 192, qos 200, multi-ack 200
#   W9t W9p    1 MiB bodies, 1 -> 1 autoack, transient; persistent into a durable queue
#   W4         a stream queue over AMQP 0.9.1: confirms 192 in flight, a consumer with qos
#              5000 and x-stream-offset=first, 12-byte bodies
#   W5         the stream protocol: `warren perf stream`, 1 producer, 1 consumer, 12-byte
#              messages, confirms (stream-perf-test's default window of 10,000)
#   C10k       10,000 idle connections with 2 channels each: RSS per connection
#
# RabbitMQ is started once and runs every selected load workload in turn, then stops; then
# Warren does the same (bench/brokers.sh starts them; RabbitMQ is Debian's rabbitmq-server
# as a private node). Each run is `warren perf FLAGS -z SECONDS`, measured by compare.sh's
# measure (sourced): the tool's summary, the broker's CPU (utime + stime from /proc) per
# message received, the other processes' load; W1 and W9p also check that their queue is
# durable. W5 is `warren perf stream` (stream-perf-test's flags) on the broker's stream port:
# RabbitMQ's rabbitmq_stream plugin on a private port; Warren's --stream-port, when the binary
# has it (else W5 on Warren is NOT MEASURED, with that reason). WARREN_PERF_BIN (a warren-perf
# binary) replaces the Warren binary as the load tool. C10k is `bench/connections.sh --connections N --hold 15` (its own brokers). Each
# run prints its block as it ends, after a `seeds: BROKER [step/total] ID` line. --seconds
# (default 20) is each load run's -z. --warren BIN (or WARREN_BROKER_BIN) is the Warren
# binary, which is also the `warren perf` load tool; --label says in the table's header what
# that binary is (say, "main before #30, b86f0f5").
#
# Writes into --out-dir (default bench/results), with STAMP the start time:
#   seeds-STAMP.txt   a header (date, machine, binaries, label), then the table
#   seeds-STAMP.csv   workload,broker,rate_msg_s,rate_mib_s,p50_us,p95_us,p99_us,cpu_us_per_msg,
#                     cpu_ms_per_mib,kib_per_connection
#   seeds-STAMP.png   Warren/RabbitMQ ratios per workload (rate; CPU per message or per
#                     connection), drawn by warren-plot
# The logs of every run stay in WARREN_BENCH_LOG_DIR (default /tmp/warren-seeds-STAMP).
# Exits 1 when a selected run was not measured (its row is then empty).
set -euo pipefail

STAMP="$(date +%Y-%m-%d-%H%M%S)"
readonly STAMP
export WARREN_BENCH_LOG_DIR="${WARREN_BENCH_LOG_DIR:-/tmp/warren-seeds-$STAMP}"
# compare.sh (sourced, not run) gives measure and check_durable, and brokers.sh with them;
# it sets REPO_ROOT and LOG_DIR (= WARREN_BENCH_LOG_DIR).
# shellcheck source=bench/compare.sh
source "$(dirname "${BASH_SOURCE[0]}")/compare.sh"
readonly ALL_WORKLOADS=(W1 W2 X-default X-direct X-fanout X-topic X-headers F50 F100 F200
  L1k L10k W9t W9p W4 W5 C10k)
readonly MIB=1048576
readonly C10K_HOLD_S=15 # connections.sh takes the RSS 5 s in; it wants at least 15
readonly BETWEEN_RUNS_S=2 # the broker settles (consumers gone, queues deleted) between runs

seconds=20
only=""
only_broker=""
label=""
connections=10000
out_dir="$REPO_ROOT/bench/results"
work_dir=""
summary=""
csv=""
failed=0
rabbitmq_version=""

main() {
  parse_args "$@"
  local selected=()
  mapfile -t selected < <(select_workloads)
  [[ ${#selected[@]} -gt 0 ]] || usage "--only '$only' selects no workload"
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  work_dir="$(mktemp -d -t warren-seeds.XXXXXX)"
  mkdir -p "$out_dir" "$LOG_DIR"
  summary="$out_dir/seeds-$STAMP.txt"
  csv="$out_dir/seeds-$STAMP.csv"
  ensure_warren
  echo "workload,broker,rate_msg_s,rate_mib_s,p50_us,p95_us,p99_us,cpu_us_per_msg,"`
    `"cpu_ms_per_mib,kib_per_connection" >"$csv"
  local loads=() id
  for id in "${selected[@]}"; do
    [[ "$id" == C10k ]] || loads+=("$id")
  done
  if [[ ${#loads[@]} -gt 0 ]]; then
    [[ "$only_broker" == warren ]] || run_loads rabbitmq "${loads[@]}" || failed=1
    [[ "$only_broker" == rabbitmq ]] || run_loads warren "${loads[@]}" || failed=1
  fi
  if [[ " ${selected[*]} " == *" C10k "* ]]; then
    run_connections || failed=1
  fi
  header >"$summary"
  python3 "$REPO_ROOT/bench/seeds_report.py" table "$csv" >>"$summary"
  cat "$summary"
  chart
  echo "seeds: table $summary, rows $csv, logs $LOG_DIR"
  return "$failed"
}

usage() {
  [[ $# -eq 0 ]] || echo "seeds: $1" >&2
  echo "usage: $0 [--seconds N] [--only ID,ID...] [--only-broker warren|rabbitmq]" \
    "[--warren BIN] [--label TEXT] [--connections N] [--out-dir DIR]" >&2
  echo "workloads: ${ALL_WORKLOADS[*]} (see the head of $0)" >&2
  exit 2
}

parse_args() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --seconds) seconds="${2:-}"; shift 2 ;;
      --only) only="${2:-}"; shift 2 ;;
      --only-broker) only_broker="${2:-}"; shift 2 ;;
      --warren) export WARREN_BROKER_BIN="${2:-}"; shift 2 ;;
      --label) label="${2:-}"; shift 2 ;;
      --connections) connections="${2:-}"; shift 2 ;;
      --out-dir) out_dir="${2:-}"; shift 2 ;;
      -h|--help) sed -n '2,46p' "${BASH_SOURCE[0]}"; exit 0 ;;
      *) usage "unknown argument '$1'" ;;
    esac
  done
  [[ "$seconds" =~ ^[1-9][0-9]*$ ]] || usage "--seconds needs a whole number above 0"
  [[ "$connections" =~ ^[1-9][0-9]*$ ]] || usage "--connections needs a whole number above 0"
  [[ -z "$only_broker" || "$only_broker" == warren || "$only_broker" == rabbitmq ]] \
    || usage "--only-broker needs warren or rabbitmq, not '$only_broker'"
  if [[ -n "${WARREN_BROKER_BIN:-}" && ! -x "$WARREN_BROKER_BIN" ]]; then
    usage "Warren binary '$WARREN_BROKER_BIN' is not an executable file"
  fi
}

# select_workloads: the ids --only selects, in the suite's order, one a line. An --only entry
# selects the ids equal to it or starting with it followed by nothing, a dash or a digit
# (X: every X-*, F: F50 F100 F200, W9: W9t W9p); a misspelt entry is an error.
select_workloads() {
  local id want
  local wanted=()
  IFS=, read -ra wanted <<<"$only"
  for want in "${wanted[@]}"; do
    local hit=""
    for id in "${ALL_WORKLOADS[@]}"; do
      if matches "$id" "$want"; then hit=1; fi
    done
    [[ -n "$hit" ]] || { echo "seeds: no workload '$want' (${ALL_WORKLOADS[*]})" >&2; exit 2; }
  done
  for id in "${ALL_WORKLOADS[@]}"; do
    if [[ ${#wanted[@]} -eq 0 ]]; then
      echo "$id"
      continue
    fi
    for want in "${wanted[@]}"; do
      if matches "$id" "$want"; then echo "$id"; break; fi
    done
  done
}

# matches ID ENTRY: case-insensitive; ENTRY is ID or a family prefix of it.
matches() {
  local id="${1,,}" want="${2,,}"
  [[ -n "$want" ]] || return 1
  [[ "$id" == "$want" || "$id" == "$want"-* || "$id" =~ ^"$want"[0-9tp] ]]
}

# load_args ID: the PerfTest flags of a load workload, one a line (so that the default
# exchange's empty name survives), without -z.
load_args() {
  local confirms=(--confirm 192 --qos 200 --multi-ack-every 200)
  local id="$1"
  case "$id" in
    W1) printf '%s\n' -x 1 -y 1 -u seeds-w1 -s 12 --flag persistent --flag mandatory \
      --auto-delete false "${confirms[@]}" ;;
    W2) printf '%s\n' -x 1 -y 1 -s 12 -a ;;
    X-default) printf '%s\n' -x 1 -y 1 -s 12 -e "" -u seeds-default -a ;;
    X-*) local type="${id#X-}"
      printf '%s\n' -x 1 -y 1 -s 12 -e "seeds-$type" -t "$type" -k "seeds.$type" \
        -u "seeds-$type-q" -a ;;
    F*) local queues="${id#F}"
      printf '%s\n' -x 1 -y "$queues" -s 12 -e "seeds-fanout-$queues" -t fanout -r 1000 -a ;;
    L1k) printf '%s\n' -x 1 -y 1 -s 12 -r 1000 "${confirms[@]}" ;;
    L10k) printf '%s\n' -x 1 -y 1 -s 12 -r 10000 "${confirms[@]}" ;;
    W9t) printf '%s\n' -x 1 -y 1 -s "$MIB" -a ;;
    W9p) printf '%s\n' -x 1 -y 1 -u seeds-w9p -s "$MIB" --flag persistent \
      --auto-delete false -a ;;
    W4) printf '%s\n' -x 1 -y 1 -u seeds-w4 -s 12 --flag persistent --auto-delete false \
      --queue-args x-queue-type=stream --consumer-args x-stream-offset=first --qos 5000 \
      --confirm 192 ;;
    # stream-perf-test's flags (warren perf stream); retention keeps the disk bounded
    W5) printf '%s\n' -x 1 -y 1 -s 12 --streams seeds-w5 --delete-streams \
      --max-length-bytes 2gb --stream-max-segment-size-bytes 100mb ;;
    *) echo "seeds: no load arguments for '$id'" >&2; return 1 ;;
  esac
}

ensure_warren() {
  local binary
  binary="$(warren_binary)"
  if [[ ! -x "$binary" ]]; then
    echo "seeds: $binary missing; cargo build --release -p warren-server"
    (cd "$REPO_ROOT" && cargo build --release -p warren-server) || exit 1
  fi
}

# run_loads BROKER ID...: starts BROKER once and runs each load workload against it in turn
# (compare.sh's measure: the tool's summary, the broker's CPU, the machine's other load);
# each run's figures become a CSV row. A broker that does not start leaves its rows empty.
run_loads() {
  local broker="$1" status=0
  shift
  echo
  echo "== $broker"
  local pid port
  if [[ "$broker" == rabbitmq ]]; then
    # W5 needs the stream protocol; brokers.sh then gives it a private port
    [[ " $* " != *" W5 "* ]] || export RABBITMQ_BENCH_PLUGINS=rabbitmq_stream
    start_rabbitmq || { echo "rabbitmq: NOT MEASURED (could not start a node)"; return 1; }
    pid="$rabbit_beam_pid" port="$rabbit_port"
    rabbitmq_version="$rabbit_version"
  else
    start_warren || { echo "warren: NOT MEASURED (could not start $(warren_binary))"; return 1; }
    pid="$warren_pid" port="$warren_port"
  fi
  local id step=0
  for id in "$@"; do
    step=$((step + 1))
    echo "seeds: $broker [$step/$#] $id ($(date +%H:%M:%S))"
    run_load "$broker" "$pid" "$port" "$id" || status=1
    sleep "$BETWEEN_RUNS_S"
  done
  if [[ "$broker" == rabbitmq ]]; then
    cp -r "$work_dir/rabbitmq/log" "$LOG_DIR/rabbitmq-log" 2>/dev/null || true
    stop_rabbitmq
  else
    stop_warren
    cp "$warren_log" "$LOG_DIR/warren.log" 2>/dev/null || true
  fi
  return "$status"
}

# run_load BROKER PID PORT ID: one bounded `warren perf` run of workload ID (W5: `warren
# perf stream` on the broker's stream port).
run_load() {
  local broker="$1" pid="$2" port="$3" id="$4" args=() status=0
  mapfile -t args < <(load_args "$id")
  local log="$LOG_DIR/$id-$broker.log" uri="amqp://guest:guest@127.0.0.1:$port/%2f"
  local tool="$tool" command="warren perf"
  if [[ "$id" == W5 ]]; then
    tool=warren-perf-stream command="warren perf stream"
    local stream_port="$rabbit_stream_port"
    [[ "$broker" == rabbitmq ]] || stream_port="$warren_stream_port"
    if [[ -z "$stream_port" ]]; then
      echo "seeds: W5 on $broker: NOT MEASURED: $(warren_binary) has no --stream-port" \
        "(no stream protocol listener in this build)" | tee "$log"
      return 1
    fi
    uri="rabbitmq-stream://guest:guest@127.0.0.1:$stream_port/%2f"
  fi
  echo "seeds: $id on $broker: $command ${args[*]} -z $seconds"
  { measure "$broker" "$pid" "" "$seconds" "$uri" \
      "${args[@]}" -z "$seconds" && check_durable "$broker" "${args[@]}"; } 2>&1 \
    | tee "$log" || status=1
  mv "$LOG_DIR/$tool-$broker.log" "$LOG_DIR/$id-$broker-perf.log" 2>/dev/null || true
  python3 "$REPO_ROOT/bench/seeds_report.py" compare "$id" "$log" "$MIB" >>"$csv" || status=1
  note_rows "$id" "$broker"
  return "$status"
}

# run_connections: bench/connections.sh at --connections; RSS per connection per broker.
run_connections() {
  local log="$LOG_DIR/C10k.log" status=0
  local only_flag=()
  [[ -z "$only_broker" ]] || only_flag=(--only "$only_broker")
  echo "seeds: C10k: bench/connections.sh --connections $connections --hold $C10K_HOLD_S" \
    "${only_flag[*]}"
  bash "$REPO_ROOT/bench/connections.sh" --connections "$connections" --hold "$C10K_HOLD_S" \
    --out-dir "$LOG_DIR/connections" ${only_flag[@]+"${only_flag[@]}"} 2>&1 | tee "$log" \
    || status=$?
  python3 "$REPO_ROOT/bench/seeds_report.py" connections C10k "$log" >>"$csv" || status=1
  note_rows C10k rabbitmq
  note_rows C10k warren
  return "$status"
}

# note_rows ID BROKER: prints the CSV row the run gave, or says that it gave none.
note_rows() {
  [[ -z "$only_broker" || "$only_broker" == "$2" ]] || return 0
  if grep -q "^$1,$2," "$csv"; then
    grep "^$1,$2," "$csv" | sed "s/^/seeds: row: /"
  else
    local why
    why="$(grep -h -m 1 -E '^warren perf: |NOT MEASURED: ' "$LOG_DIR/$1-$2-perf.log" \
      "$LOG_DIR/$1-$2.log" 2>/dev/null | head -n 1)" || true
    echo "seeds: $1 on $2: NOT MEASURED${why:+: $why} (see $LOG_DIR/$1*.log)"
  fi
}

# header: what was measured, on what, with which binaries.
header() {
  local binary
  binary="$(warren_binary)"
  echo "Warren seed benchmarks (bench/seeds.sh), started $STAMP, --seconds $seconds"
  [[ -z "$label" ]] || echo "label: $label"
  echo "warren: $binary ($("$binary" --version 2>/dev/null || echo 'no --version')," \
    "sha256 $(sha256sum "$binary" | cut -c 1-12), built $(date -r "$binary" -Is))"
  echo "load tool: $(perf_command | tr '\n' ' ')(sha256 $(sha256sum "$(perf_command | head -n 1)" \
    | cut -c 1-12)); suite from $(git -C "$REPO_ROOT" rev-parse --short HEAD)" \
    "($(git -C "$REPO_ROOT" rev-parse --abbrev-ref HEAD))"
  echo "rabbitmq: ${rabbitmq_version:-not started by the load runs} (Debian's" \
    "rabbitmq-server, a private node)"
  echo "machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' \
    /proc/meminfo), load average at the end $(cut -d ' ' -f 1-3 /proc/loadavg)"
  local noisy
  noisy="$(grep -l "WARNING: machine not quiet" "$LOG_DIR"/*.log 2>/dev/null \
    | xargs -r -n 1 basename | sed 's/\.log$//' | tr '\n' ' ')" || true
  [[ -z "$noisy" ]] || echo "not quiet (other processes above 0.2 cores): $noisy"
  echo
}

chart() {
  local ratios="$work_dir/ratios.csv"
  chart_tools seeds "$csv" || return 0
  python3 "$REPO_ROOT/bench/seeds_report.py" ratios "$csv" >"$ratios"
  if [[ "$(wc -l <"$ratios")" -lt 2 ]]; then
    echo "seeds: no ratios to chart (both brokers must be measured)"
    return 0
  fi
  "$plot" --csv "$ratios" --x index --y ratio --series figure --marks workload --log-y \
    --title "Warren / RabbitMQ per seed workload (rate: above 1 favours Warren; cost: below 1)" \
    --x-label "workload (labelled at each point)" --y-label "Warren / RabbitMQ" \
    --out "$out_dir/seeds-$STAMP.png" || echo "seeds: chart not drawn; the CSV is $csv"
}

cleanup() {
  stop_warren
  stop_rabbitmq
  [[ -z "$work_dir" ]] || rm -rf "$work_dir"
}

main "$@"
