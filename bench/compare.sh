#!/usr/bin/env bash
# Runs one PerfTest workload against a private RabbitMQ node and then against Warren,
# and compares throughput, latency and CPU cost per message. See bench/README.md.
#
#   bench/compare.sh [--only rabbitmq|warren] [PERFTEST_ARGS...]
#
# PERFTEST_ARGS default to `-x 1 -y 1 -s 12 -a -z 30` and must contain -z/--time.
# Each broker runs alone: RabbitMQ is started, measured and stopped before Warren starts.
#
# RabbitMQ comes from Debian's rabbitmq-server package (installed when missing). Its node
# gets its own name, ports, config, mnesia and log directories under a temporary
# directory, and runs as the invoking user, so a node already running on this machine is
# not touched. Warren is target/release/warren (or WARREN_BROKER_BIN), built when missing;
# a Warren that cannot be built or started is reported as not measured.
#
# Per broker this prints PerfTest's sending and receiving averages and consumer latency
# percentiles, the broker's CPU (utime + stime from /proc/<pid>/stat, before and after;
# for RabbitMQ the beam.smp process) per message received, and PerfTest's own CPU share
# (its CPU seconds over its wall seconds). Messages received are PerfTest's receiving
# average times the -z duration. It also prints how many cores the rest of the machine kept
# busy meanwhile. Exits non-zero when a requested broker was not measured.
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)" || exit 1
readonly REPO_ROOT
readonly DEFAULT_ARGS=(-x 1 -y 1 -s 12 -a -z 30)
readonly BROKER_READY_TIMEOUT_S=60
readonly BROKER_STOP_TIMEOUT_S=30
readonly JAVA_HEAP="${PERFTEST_JAVA_HEAP:--Xmx1g}"
CLOCK_TICKS_PER_S="$(getconf CLK_TCK)"
readonly CLOCK_TICKS_PER_S

work_dir=""
rabbit_pid=""      # the rabbitmq-server script, which stops the node on SIGTERM
rabbit_beam_pid="" # the Erlang VM doing the work, whose CPU is measured
rabbit_node=""
rabbit_env=()
warren_pid=""
declare -A results=()

main() {
  local only=""
  if [[ "${1:-}" == "--only" ]]; then
    only="${2:-}"
    shift 2 || usage
    [[ "$only" == rabbitmq || "$only" == warren ]] || usage
  fi
  local args=("$@")
  if [[ ${#args[@]} -eq 0 ]]; then
    args=("${DEFAULT_ARGS[@]}")
  fi
  local duration_s
  duration_s="$(duration_of "${args[@]}")" || usage
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  work_dir="$(mktemp -d -t warren-bench.XXXXXX)"
  local jars
  jars="$(bash "$REPO_ROOT/tests/interop/perftest.sh" --install-only)" || exit 1
  echo "bench: PerfTest args: ${args[*]}"
  local status=0
  if [[ "$only" != warren ]]; then
    bench_rabbitmq "$jars" "$duration_s" "${args[@]}" || status=1
  fi
  if [[ "$only" != rabbitmq ]]; then
    bench_warren "$jars" "$duration_s" "${args[@]}" || status=1
  fi
  print_ratios
  return "$status"
}

usage() {
  echo "usage: $0 [--only rabbitmq|warren] [PERFTEST_ARGS... including -z SECONDS]" >&2
  exit 2
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
  echo "bench: PerfTest args need -z SECONDS (or --time SECONDS)" >&2
  return 1
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
  measure rabbitmq "$rabbit_beam_pid" "$jars" "$duration_s" \
    "amqp://guest:guest@127.0.0.1:$rabbit_port/%2f" "$@"
  local status=$?
  stop_rabbitmq
  return "$status"
}

bench_warren() {
  local jars="$1" duration_s="$2"
  shift 2
  echo
  echo "== warren"
  if ! start_warren; then
    echo "warren: NOT MEASURED (could not build or start target/release/warren; see above)"
    return 1
  fi
  measure warren "$warren_pid" "$jars" "$duration_s" \
    "amqp://guest:guest@127.0.0.1:$warren_port/%2f" "$@"
  local status=$?
  stop_warren
  return "$status"
}

# measure NAME BROKER_PID JARS DURATION_S URI ARGS...: one PerfTest run and its figures.
measure() {
  local name="$1" broker_pid="$2" jars="$3" duration_s="$4" uri="$5"
  shift 5
  local log="$work_dir/perftest-$name.log" times="$work_dir/perftest-$name.time"
  local ticks_before ticks_after
  ticks_before="$(cpu_ticks "$broker_pid")" || return 1
  local machine_before machine_after
  machine_before="$(machine_busy_ticks)"
  local status=0 TIMEFORMAT='%3U %3S %3R'
  { time timeout --kill-after=10 "$((duration_s + 120))" \
      java "$JAVA_HEAP" -cp "$jars/*" com.rabbitmq.perf.PerfTest --uri "$uri" "$@" \
      >"$log" 2>&1 </dev/null; } 2>"$times" || status=$?
  machine_after="$(machine_busy_ticks)"
  ticks_after="$(cpu_ticks "$broker_pid")" || {
    echo "$name: broker process $broker_pid died during the run"
    tail -n 20 "$log"
    return 1
  }
  local sent received latency
  sent="$(sed -n 's/.*sending rate avg: \([0-9][0-9]*\) msg\/s.*/\1/p' "$log" | tail -n 1)"
  received="$(sed -n 's/.*receiving rate avg: \([0-9][0-9]*\) msg\/s.*/\1/p' "$log" | tail -n 1)"
  latency="$(sed -n 's/.*consumer latency min\/median\/75th\/95th\/99th \([0-9\/]*\) .*/\1/p' \
    "$log" | tail -n 1)"
  if [[ $status -ne 0 || -z "$sent" || -z "$received" ]]; then
    echo "$name: PerfTest failed (status $status) or printed no summary; its output:"
    tail -n 30 "$log"
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
  local messages broker_cpu_s per_msg_us perftest_cpu_s perftest_share
  read -r messages broker_cpu_s per_msg_us perftest_cpu_s perftest_share <<<"$figures"
  results[$name.received]="$received"
  results[$name.per_msg_us]="$per_msg_us"
  local p=()
  IFS=/ read -ra p <<<"$latency"
  echo "$name: sending rate avg:   $sent msg/s"
  echo "$name: receiving rate avg: $received msg/s"
  echo "$name: consumer latency:   min ${p[0]:-?} median ${p[1]:-?} p75 ${p[2]:-?}" \
    "p95 ${p[3]:-?} p99 ${p[4]:-?} µs"
  echo "$name: broker CPU:         ${broker_cpu_s} s for ~$messages messages received" \
    "= ${per_msg_us} µs/msg (${per_msg_us} s per million)"
  echo "$name: PerfTest CPU:       ${perftest_cpu_s} s over ${wall_s} s wall" \
    "= ${perftest_share}% of one core"
}

print_ratios() {
  echo
  if [[ -z "${results[rabbitmq.received]:-}" || -z "${results[warren.received]:-}" ]]; then
    echo "ratio warren/rabbitmq: n/a (both brokers must be measured)"
    return 0
  fi
  awk -v wr="${results[warren.received]}" -v rr="${results[rabbitmq.received]}" \
    -v wc="${results[warren.per_msg_us]}" -v rc="${results[rabbitmq.per_msg_us]}" 'BEGIN {
      rate = rr > 0 ? sprintf("%.2f", wr / rr) : "n/a"
      cpu = rc > 0 ? sprintf("%.2f", wc / rc) : "n/a"
      printf "ratio warren/rabbitmq: receive rate %s, CPU per message %s\n", rate, cpu
    }'
}

# cpu_ticks PID: utime + stime of the process (all its threads), in clock ticks.
cpu_ticks() {
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  local fields
  read -ra fields <<<"${stat##*) }"  # after "pid (comm) ", the state is field 3
  echo $((fields[11] + fields[12]))  # fields 14 and 15: utime, stime
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# wait_for_tcp PID PORT SECONDS: polls until a connect succeeds or the process exits.
wait_for_tcp() {
  local pid="$1" port="$2" deadline=$((SECONDS + $3))
  while [[ $SECONDS -lt $deadline ]]; do
    kill -0 "$pid" 2>/dev/null || return 1
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    sleep 0.2
  done
  return 1
}

install_rabbitmq() {
  if [[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]]; then
    return 0
  fi
  echo "bench: installing Debian's rabbitmq-server"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server
}

# set_rabbitmq_env: the environment of the private node, for the server and rabbitmqctl.
set_rabbitmq_env() {
  local base="$work_dir/rabbitmq"
  rabbit_env=(HOME="$base/home"
    RABBITMQ_NODENAME="$rabbit_node" RABBITMQ_NODE_PORT="$rabbit_port"
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_DIST_PORT="$rabbit_dist_port"
    RABBITMQ_MNESIA_BASE="$base/mnesia" RABBITMQ_LOG_BASE="$base/log"
    RABBITMQ_CONFIG_FILE="$base/rabbitmq" RABBITMQ_ADVANCED_CONFIG_FILE="$base/advanced.config"
    RABBITMQ_CONF_ENV_FILE="$base/rabbitmq-env.conf"
    RABBITMQ_ENABLED_PLUGINS_FILE="$base/enabled_plugins"
    RABBITMQ_PID_FILE="$base/rabbitmq.pid")
}

rabbitmqctl_private() {
  env "${rabbit_env[@]}" timeout 60 /usr/lib/rabbitmq/bin/rabbitmqctl -n "$rabbit_node" "$@"
}

start_rabbitmq() {
  install_rabbitmq || return 1
  local base="$work_dir/rabbitmq"
  mkdir -p "$base/home" "$base/mnesia" "$base/log"
  : >"$base/rabbitmq.conf"
  : >"$base/rabbitmq-env.conf"
  echo "[]." >"$base/enabled_plugins"
  rabbit_port="$(free_port)" && rabbit_dist_port="$(free_port)" || return 1
  rabbit_node="warren-bench-$$@localhost"
  echo "rabbitmq: starting node $rabbit_node on 127.0.0.1:$rabbit_port in $base"
  set_rabbitmq_env
  env "${rabbit_env[@]}" /usr/lib/rabbitmq/bin/rabbitmq-server >"$base/server.log" 2>&1 \
    </dev/null &
  rabbit_pid=$!
  if ! wait_for_tcp "$rabbit_pid" "$rabbit_port" "$BROKER_READY_TIMEOUT_S" \
      || ! rabbitmqctl_private await_startup >/dev/null 2>&1; then
    echo "rabbitmq: node did not start; last lines of its logs:"
    tail -n 30 "$base/server.log" "$base"/log/*.log 2>/dev/null
    return 1
  fi
  rabbit_beam_pid="$(rabbitmqctl_private eval 'os:getpid().' 2>/dev/null | tr -dc '0-9')"
  if [[ -z "$rabbit_beam_pid" || ! -r "/proc/$rabbit_beam_pid/stat" ]]; then
    echo "rabbitmq: could not find the node's beam.smp pid"
    return 1
  fi
  local version
  version="$(rabbitmqctl_private eval 'rabbit_misc:version().' 2>/dev/null | tr -d '"')"
  echo "rabbitmq: version $version, beam.smp pid $rabbit_beam_pid"
}

stop_rabbitmq() {
  [[ -n "$rabbit_pid" ]] || return 0
  kill -TERM "$rabbit_pid" 2>/dev/null
  stop_wait "$rabbit_pid" rabbitmq
  if [[ -n "$rabbit_beam_pid" ]] && kill -0 "$rabbit_beam_pid" 2>/dev/null; then
    kill -KILL "$rabbit_beam_pid" 2>/dev/null
  fi
  rabbit_pid=""
  rabbit_beam_pid=""
}

start_warren() {
  local binary="${WARREN_BROKER_BIN:-$REPO_ROOT/target/release/warren}"
  if [[ ! -x "$binary" ]]; then
    echo "warren: $binary missing; cargo build --release"
    (cd "$REPO_ROOT" && cargo build --release) || return 1
  fi
  warren_port="$(free_port)" || return 1
  mkdir -p "$work_dir/warren/data"
  echo "warren: starting on 127.0.0.1:$warren_port in $work_dir/warren"
  "$binary" server --amqp-port "$warren_port" --data-dir "$work_dir/warren/data" \
    >"$work_dir/warren/broker.log" 2>&1 </dev/null &
  warren_pid=$!
  if ! wait_for_tcp "$warren_pid" "$warren_port" "$BROKER_READY_TIMEOUT_S"; then
    if kill -0 "$warren_pid" 2>/dev/null; then
      echo "warren: not accepting TCP on $warren_port after ${BROKER_READY_TIMEOUT_S}s"
    else
      local status=0
      wait "$warren_pid" || status=$?
      echo "warren: exited with status $status before accepting TCP on $warren_port"
      warren_pid=""
    fi
    echo "warren: last lines of its log:"
    tail -n 30 "$work_dir/warren/broker.log"
    return 1
  fi
  echo "warren: pid $warren_pid"
}

stop_warren() {
  [[ -n "$warren_pid" ]] || return 0
  kill -TERM "$warren_pid" 2>/dev/null
  stop_wait "$warren_pid" warren
  warren_pid=""
}

# stop_wait PID NAME: waits for a SIGTERMed child, then kills it if it lingers.
stop_wait() {
  local pid="$1" deadline=$((SECONDS + BROKER_STOP_TIMEOUT_S))
  while kill -0 "$pid" 2>/dev/null && [[ $SECONDS -lt $deadline ]]; do
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "$2: still running ${BROKER_STOP_TIMEOUT_S}s after SIGTERM; killing it"
    kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null
}

cleanup() {
  stop_warren
  stop_rabbitmq
  if [[ -n "$work_dir" ]]; then
    rm -rf "$work_dir"
  fi
}

main "$@"
