#!/usr/bin/env bash
# Runs one load workload (PerfTest's flags) against a private RabbitMQ node and then against
# Warren, and compares throughput, latency and CPU cost per message. See bench/README.md.
#
#   bench/compare.sh [--tool warren-perf|perftest] [--only rabbitmq|warren] --workload NAME
#                    [--seconds N]
#   bench/compare.sh [--tool warren-perf|perftest] [--only rabbitmq|warren] [LOAD_ARGS...]
#
# --pin runs the broker on core 0 and the load tool on core 1, so that two load tools can
# be compared against one broker (bench/tools_agree.sh).
# --tool picks the load generator: `warren perf` (the default), which takes PerfTest's flags,
# prints PerfTest's summary lines and uses far less CPU, so that on a 2-core machine the
# broker rather than the tool sets the rate; or RabbitMQ PerfTest, the reference.
#
# --workload runs one of the standard workloads of bench/README.md (a, b, w1, w1x10) for
# --seconds (default 30). Otherwise LOAD_ARGS (PerfTest's flags) go to the tool
# unchanged; they default to workload a and must contain -z/--time. Each broker runs alone:
# RabbitMQ is started, measured and stopped before Warren starts. bench/brokers.sh starts
# and stops them: RabbitMQ from Debian's rabbitmq-server package (installed when missing) as
# a private node; Warren from WARREN_BROKER_BIN, else the release build in CARGO_TARGET_DIR
# or target/, built when missing. A broker that cannot be started is reported as not
# measured. `warren perf` is the Warren binary's `perf` subcommand.
#
# Per broker this prints the tool's sending and receiving averages and consumer latency
# percentiles, the broker's CPU (utime + stime from /proc/<pid>/stat, before and after;
# for RabbitMQ the beam.smp process) per message received, and the tool's own CPU share
# (its CPU seconds over its wall seconds). Messages received are the receiving average times
# the -z duration. It also prints how many cores the rest of the machine kept busy
# meanwhile. When the tool declares durable queues (--flag persistent) with names given
# (-u, or --queue-pattern with its range), it checks after the run that each of them is
# durable on the broker. For Warren it prints the medians of the message store's figures
# that the broker logged at INFO during the run ("message store: F fsyncs/s, M messages per
# fsync, W MiB/s written"). The tool's output (TOOL-BROKER.log) and the brokers' logs are
# kept in WARREN_BENCH_LOG_DIR (default /tmp/warren-bench-logs/<time>). Exits non-zero when a
# requested broker was not measured or a queue meant to be durable was not.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
# shellcheck source=bench/brokers.sh
source "$REPO_ROOT/bench/brokers.sh"
readonly DEFAULT_ARGS=(-x 1 -y 1 -s 12 -a -z 30)
readonly DEFAULT_WORKLOAD_SECONDS=30
readonly JAVA_HEAP="${PERFTEST_JAVA_HEAP:--Xmx1g}"
CLOCK_TICKS_PER_S="$(getconf CLK_TCK)"
readonly CLOCK_TICKS_PER_S
LOG_DIR="${WARREN_BENCH_LOG_DIR:-/tmp/warren-bench-logs/$(date +%Y%m%d-%H%M%S)}"
readonly LOG_DIR

work_dir=""
tool=warren-perf # the load generator: `warren perf`, or RabbitMQ PerfTest (the reference)
pin=""        # set: the broker runs on core 0 and the load tool on core 1
declare -A results=()

main() {
  local only="" workload="" seconds=""
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --pin)
        pin=1
        shift ;;
      --tool)
        tool="${2:-}"
        [[ "$tool" == perftest || "$tool" == warren-perf ]] \
          || usage "--tool needs perftest or warren-perf"
        shift 2 ;;
      --only)
        only="${2:-}"
        [[ "$only" == rabbitmq || "$only" == warren ]] || usage "--only needs rabbitmq or warren"
        shift 2 ;;
      --workload)
        workload="${2:-}"
        [[ -n "$workload" ]] || usage "--workload needs a name"
        shift 2 ;;
      --seconds)
        seconds="${2:-}"
        [[ "$seconds" =~ ^[1-9][0-9]*$ ]] || usage "--seconds needs a whole number above 0"
        shift 2 ;;
      -h|--help) usage ;;
      *) break ;;
    esac
  done
  local args=("$@")
  if [[ -n "$workload" ]]; then
    [[ ${#args[@]} -eq 0 ]] || usage "--workload takes no load arguments (got: ${args[*]})"
    local workload_args
    workload_args="$(workload_args "$workload")" \
      || usage "no workload named '$workload' (a, b, w1, w1x10)"
    read -ra args <<<"$workload_args"
    args+=(-z "${seconds:-$DEFAULT_WORKLOAD_SECONDS}")
  elif [[ -n "$seconds" ]]; then
    usage "--seconds goes with --workload; give -z SECONDS instead"
  elif [[ ${#args[@]} -eq 0 ]]; then
    args=("${DEFAULT_ARGS[@]}")
  fi
  local duration_s
  duration_s="$(duration_of "${args[@]}")" || usage "load arguments need -z SECONDS"
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  work_dir="$(mktemp -d -t warren-bench.XXXXXX)"
  mkdir -p "$LOG_DIR"
  local jars=""
  if [[ "$tool" == perftest ]]; then
    jars="$(bash "$REPO_ROOT/tests/interop/perftest.sh" --install-only)"
  else
    [[ -x "$(warren_binary)" ]] || (cd "$REPO_ROOT" && cargo build --release -p warren-server)
  fi
  echo "bench: ${workload:+workload $workload, }load tool $tool, args: ${args[*]}"
  local status=0
  if [[ "$only" != warren ]]; then
    bench_rabbitmq "$jars" "$duration_s" "${args[@]}" || status=1
  fi
  if [[ "$only" != rabbitmq ]]; then
    bench_warren "$jars" "$duration_s" "${args[@]}" || status=1
  fi
  print_ratios
  echo "bench: $tool's output and the brokers' logs kept in $LOG_DIR"
  return "$status"
}

usage() {
  [[ $# -eq 0 ]] || echo "bench: $1" >&2
  cat >&2 <<EOF
usage: $0 [--pin] [--tool warren-perf|perftest] [--only rabbitmq|warren]
          --workload a|b|w1|w1x10 [--seconds N]
       $0 [--pin] [--tool warren-perf|perftest] [--only rabbitmq|warren]
          [LOAD_ARGS... including -z SECONDS]
LOAD_ARGS are PerfTest's flags; warren perf (the default tool) takes the same.
Standard workloads (bench/README.md), $DEFAULT_WORKLOAD_SECONDS s unless --seconds:
  a      autoack, 1 producer 1 consumer, 12-byte bodies
  b      confirms 192, prefetch 200, multi-ack every 200
  w1     b with persistent messages, mandatory, one durable queue perf-test-1
  w1x10  w1 with 10 producers and 10 consumers on durable queues perf-test-1..10
Environment: WARREN_BROKER_BIN (broker binary), CARGO_TARGET_DIR, WARREN_BENCH_LOG_DIR,
PERFTEST_JAVA_HEAP, WARREN_BENCH_RUST_LOG (Warren's log filter, default info).
EOF
  exit 2
}

# workload_args NAME: the load arguments (PerfTest's flags) of a standard workload, without -z.
workload_args() {
  local confirms="--confirm 192 --qos 200 --multi-ack-every 200"
  local durable="--flag persistent --flag mandatory --auto-delete false"
  case "$1" in
    a) echo "-x 1 -y 1 -s 12 -a" ;;
    b) echo "-x 1 -y 1 -s 12 $confirms" ;;
    w1) echo "-x 1 -y 1 -u perf-test-1 -s 12 $durable $confirms" ;;
    w1x10) echo "-x 10 -y 10 --queue-pattern perf-test-%d --queue-pattern-from 1" \
      "--queue-pattern-to 10 -s 12 $durable $confirms" ;;
    *) return 1 ;;
  esac
}

# duration_of ARGS...: the value of -z/--time; fails when absent, so every run is bounded.
duration_of() {
  while [[ $# -gt 0 ]]; do
    if [[ "$1" == -z || "$1" == --time ]] && [[ "${2:-}" =~ ^[0-9]+$ ]]; then
      echo "$2"
      return 0
    fi
    shift
  done
  return 1
}

# durable_queues_expected ARGS...: the queue names the tool declares durable, one a line:
# none unless --flag persistent is given (both tools declare queues durable exactly then) and
# the names are known (-u NAME, or --queue-pattern with --queue-pattern-from/-to).
durable_queues_expected() {
  local persistent=0 queue="" pattern="" from="" to=""
  while [[ $# -gt 0 ]]; do
    case "$1" in
      -f|--flag) [[ "${2:-}" != persistent ]] || persistent=1; shift ;;
      -u|--queue) queue="${2:-}"; shift ;;
      -qp|--queue-pattern) pattern="${2:-}"; shift ;;
      -qpf|--queue-pattern-from) from="${2:-}"; shift ;;
      -qpt|--queue-pattern-to) to="${2:-}"; shift ;;
    esac
    shift
  done
  [[ $persistent -eq 1 ]] || return 0
  if [[ -n "$pattern" && "$from" =~ ^[0-9]+$ && "$to" =~ ^[0-9]+$ ]]; then
    local i
    for ((i = from; i <= to; i++)); do
      # shellcheck disable=SC2059 # the pattern is PerfTest's, with %d for the number
      printf "$pattern\n" "$i"
    done
  elif [[ -n "$queue" ]]; then
    echo "$queue"
  fi
}

bench_rabbitmq() {
  local jars="$1" duration_s="$2"
  shift 2
  echo
  echo "== rabbitmq"
  if ! start_rabbitmq; then
    echo "rabbitmq: NOT MEASURED (could not start a node; see above)"
    return 1
  fi
  local status=0
  measure rabbitmq "$rabbit_beam_pid" "$jars" "$duration_s" \
    "amqp://guest:guest@127.0.0.1:$rabbit_port/%2f" "$@" || status=$?
  check_durable rabbitmq "$@" || status=1
  cp -r "$work_dir/rabbitmq/log" "$LOG_DIR/rabbitmq-log" 2>/dev/null || true
  stop_rabbitmq
  return "$status"
}

bench_warren() {
  local jars="$1" duration_s="$2"
  shift 2
  echo
  echo "== warren"
  if ! start_warren; then
    echo "warren: NOT MEASURED (could not build or start $(warren_binary); see above)"
    return 1
  fi
  local status=0
  measure warren "$warren_pid" "$jars" "$duration_s" \
    "amqp://guest:guest@127.0.0.1:$warren_port/%2f" "$@" || status=$?
  check_durable warren "$@" || status=1
  stop_warren
  cp "$warren_log" "$LOG_DIR/warren.log"
  report_store_figures "$LOG_DIR/warren.log"
  return "$status"
}

# measure NAME BROKER_PID JARS DURATION_S URI ARGS...: one run of the load tool and its
# figures.
measure() {
  local name="$1" broker_pid="$2" jars="$3" duration_s="$4" uri="$5"
  shift 5
  local log="$LOG_DIR/$tool-$name.log" times="$work_dir/$tool-$name.time"
  local ticks_before ticks_after
  ticks_before="$(cpu_ticks "$broker_pid")" || return 1
  local machine_before machine_after
  machine_before="$(machine_busy_ticks)"
  local status=0 TIMEFORMAT='%3U %3S %3R'
  local command=(java "$JAVA_HEAP" -cp "$jars/*" com.rabbitmq.perf.PerfTest) uri_flag=--uri
  if [[ "$tool" != perftest ]]; then
    mapfile -t command < <(perf_command)
  fi
  if [[ "$tool" == warren-perf-stream ]]; then
    # stream-perf-test's flags: the URI is rabbitmq-stream://... and goes to --uris
    command+=(stream)
    uri_flag=--uris
  fi
  if [[ -n "$pin" ]]; then
    # Each on its own core: the tool's CPU use cannot take the broker's (compares tools).
    taskset -a -p 0x1 "$broker_pid" >/dev/null
    command=(taskset -c 1 "${command[@]}")
  fi
  { time timeout --kill-after=10 "$((duration_s + 120))" \
      "${command[@]}" "$uri_flag" "$uri" "$@" \
      >"$log" 2>&1 </dev/null; } 2>"$times" || status=$?
  machine_after="$(machine_busy_ticks)"
  ticks_after="$(cpu_ticks "$broker_pid")" || {
    echo "$name: broker process $broker_pid died during the run"
    tail -n 20 "$log" || true
    return 1
  }
  local sent received latency
  sent="$(sed -n 's/.*sending rate avg: \([0-9][0-9]*\) msg\/s.*/\1/p' "$log" | tail -n 1)"
  received="$(sed -n 's/.*receiving rate avg: \([0-9][0-9]*\) msg\/s.*/\1/p' "$log" | tail -n 1)"
  latency="$(sed -n 's/.*consumer latency min\/median\/75th\/95th\/99th \([0-9\/]*\) .*/\1/p' \
    "$log" | tail -n 1)"
  if [[ $status -ne 0 || -z "$sent" || -z "$received" ]]; then
    echo "$name: $tool failed (status $status) or printed no summary; its output:"
    tail -n 30 "$log" || true
    return 1
  fi
  report "$name" "$sent" "$received" "$latency" "$duration_s" \
    "$((ticks_after - ticks_before))" "$(cat "$times")"
  report_other_load "$name" "$((machine_after - machine_before))" \
    "$((ticks_after - ticks_before))" "$(cat "$times")"
}

# report_other_load NAME MACHINE_TICKS BROKER_TICKS "USER SYS REAL": how much CPU the rest
# of the machine used during the run; other load makes the figures above unreliable.
report_other_load() {
  local user_s sys_s wall_s
  read -r user_s sys_s wall_s <<<"$4"
  awk -v machine="$2" -v broker="$3" -v hz="$CLOCK_TICKS_PER_S" -v u="$user_s" \
    -v s="$sys_s" -v w="$wall_s" -v name="$1" -v cores="$(nproc)" 'BEGIN {
      other = (machine - broker) / hz - (u + s); if (other < 0) other = 0
      printf "%s: other processes:    %.2f cores on average of %d", name, other / w, cores
      print (other / w > 0.2 ? " (WARNING: machine not quiet; rerun)" : "")
    }'
}

# machine_busy_ticks: non-idle CPU time of the whole machine, from the "cpu" line of
# /proc/stat (user nice system idle iowait irq softirq steal), in clock ticks.
machine_busy_ticks() {
  local fields
  read -ra fields </proc/stat  # fields[0] is "cpu"; idle and iowait are fields 4 and 5
  echo $((fields[1] + fields[2] + fields[3] + fields[6] + fields[7] + fields[8]))
}

# report NAME SENT RECEIVED LATENCY DURATION_S BROKER_TICKS "USER SYS REAL": prints and
# records the figures for print_ratios.
report() {
  local name="$1" sent="$2" received="$3" latency="$4" duration_s="$5" ticks="$6"
  local user_s sys_s wall_s
  read -r user_s sys_s wall_s <<<"$7"
  local figures
  figures="$(awk -v recv="$received" -v dur="$duration_s" -v ticks="$ticks" \
    -v hz="$CLOCK_TICKS_PER_S" -v u="$user_s" -v s="$sys_s" -v w="$wall_s" 'BEGIN {
      messages = recv * dur; cpu = ticks / hz
      per_msg_us = messages > 0 ? cpu * 1e6 / messages : 0
      printf "%.0f %.2f %.2f %.2f %.1f\n", messages, cpu, per_msg_us, u + s, 100 * (u + s) / w
    }')"
  local messages broker_cpu_s per_msg_us tool_cpu_s tool_share
  read -r messages broker_cpu_s per_msg_us tool_cpu_s tool_share <<<"$figures"
  results[$name.received]="$received"
  results[$name.per_msg_us]="$per_msg_us"
  local p=()
  IFS=/ read -ra p <<<"$latency"
  results[$name.p99_us]="${p[4]:-}"
  echo "$name: sending rate avg:   $sent msg/s"
  echo "$name: receiving rate avg: $received msg/s"
  echo "$name: consumer latency:   min ${p[0]:-?} median ${p[1]:-?} p75 ${p[2]:-?}" \
    "p95 ${p[3]:-?} p99 ${p[4]:-?} µs"
  echo "$name: broker CPU:         ${broker_cpu_s} s for ~$messages messages received" \
    "= ${per_msg_us} µs/msg (${per_msg_us} s per million)"
  echo "$name: load tool CPU:      ${tool_cpu_s} s over ${wall_s} s wall ($tool)" \
    "= ${tool_share}% of one core"
}

print_ratios() {
  echo
  if [[ -z "${results[rabbitmq.received]:-}" || -z "${results[warren.received]:-}" ]]; then
    echo "ratio warren/rabbitmq: n/a (both brokers must be measured)"
    return 0
  fi
  awk -v wr="${results[warren.received]}" -v rr="${results[rabbitmq.received]}" \
    -v wc="${results[warren.per_msg_us]}" -v rc="${results[rabbitmq.per_msg_us]}" \
    -v wl="${results[warren.p99_us]}" -v rl="${results[rabbitmq.p99_us]}" 'BEGIN {
      rate = rr > 0 ? sprintf("%.2f", wr / rr) : "n/a"
      cpu = rc > 0 ? sprintf("%.2f", wc / rc) : "n/a"
      p99 = (wl != "" && rl > 0) ? sprintf("%.2f", wl / rl) : "n/a"
      printf "ratio warren/rabbitmq: receive rate %s, CPU per message %s, " \
        "consumer latency p99 %s\n", rate, cpu, p99
    }'
}

# check_durable NAME LOAD_ARGS...: after the run, with the broker still up, checks
# that every queue the tool was asked to declare durable (durable_queues_expected) is
# durable there. RabbitMQ: rabbitmqctl list_queues name durable. Warren: the queue is in
# its durable definitions for vhost "/": <data-dir>/definitions/vhost-2f.json and the
# changes journalled after it in vhost-2f.journal (Warren writes only durable,
# non-exclusive queues there).
check_durable() {
  local name="$1"
  shift
  local expected=()
  mapfile -t expected < <(durable_queues_expected "$@")
  [[ ${#expected[@]} -gt 0 ]] || return 0
  local durable
  if [[ "$name" == rabbitmq ]]; then
    durable="$(rabbitmqctl_private list_queues -q --no-table-headers name durable 2>&1 \
      | awk -F '\t' '$2 == "true" { print $1 }')" || {
      echo "rabbitmq: rabbitmqctl list_queues failed: $durable"
      return 1
    }
  else
    local dir="$warren_data_dir/definitions"
    durable="$(python3 - "$dir" <<'PY' 2>&1
import json, os, struct, sys
# vhost "/": the snapshot vhost-2f.json, then the changes its journal vhost-2f.journal holds
# ("WMDJ", u32 version, then records of [u32 length][u32 crc32c][JSON change]).
snapshot = os.path.join(sys.argv[1], "vhost-2f.json")
journal = os.path.join(sys.argv[1], "vhost-2f.journal")
if not (os.path.exists(snapshot) or os.path.exists(journal)):
    sys.exit(f"neither {snapshot} nor {journal} exists")
names = set()
if os.path.exists(snapshot):
    names = {q["name"] for q in json.load(open(snapshot))["queues"]}
if os.path.exists(journal):
    data = open(journal, "rb").read()
    offset = 8
    while offset + 8 <= len(data):
        length, _crc = struct.unpack_from("<II", data, offset)
        payload = data[offset + 8:offset + 8 + length]
        if len(payload) < length:
            break  # a torn tail: never acknowledged
        change = json.loads(payload)
        if change["op"] == "put_queue":
            names.add(change["queue"]["name"])
        elif change["op"] == "delete_queue":
            names.discard(change["name"])
        offset += 8 + length
print("\n".join(sorted(names)))
PY
)" || {
      echo "warren: cannot read durable queues from $dir: $durable"
      return 1
    }
  fi
  local queue missing=()
  for queue in "${expected[@]}"; do
    grep -qxF -- "$queue" <<<"$durable" || missing+=("$queue")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    echo "$name: durable queues:     NOT DURABLE (or missing): ${missing[*]}"
    return 1
  fi
  echo "$name: durable queues:     ${#expected[@]} of ${#expected[@]} checked durable" \
    "(${expected[0]}${expected[1]:+ .. ${expected[-1]}})"
}

# report_store_figures LOG: the medians of the figures in Warren's periodic INFO line
# "message store: F fsyncs/s, M messages per fsync, W MiB/s written" over the run.
report_store_figures() {
  local figures
  local n='\([0-9][0-9.]*\)'
  local line="message store: $n fsyncs\/s, $n messages per fsync, $n MiB\/s written"
  figures="$(sed -n "s/.*$line.*/\1 \2 \3/p" "$1")"
  if [[ -z "$figures" ]]; then
    echo "warren: message store:      no store figures logged"
    return 0
  fi
  local count fsyncs per_fsync written
  count="$(wc -l <<<"$figures")"
  fsyncs="$(cut -d ' ' -f 1 <<<"$figures" | median)"
  per_fsync="$(cut -d ' ' -f 2 <<<"$figures" | median)"
  written="$(cut -d ' ' -f 3 <<<"$figures" | median)"
  echo "warren: message store:      median $fsyncs fsyncs/s, $per_fsync messages per fsync," \
    "$written MiB/s written (over $count reports)"
}

# median: the median of the numbers on stdin, one a line.
median() {
  sort -g | awk '{ v[NR] = $1 } END {
    if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2
  }'
}

cleanup() {
  stop_warren
  stop_rabbitmq
  if [[ -n "$work_dir" ]]; then
    rm -rf "$work_dir"
  fi
}

# Run as a script; bench/seeds.sh sources this file for measure and check_durable instead.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
