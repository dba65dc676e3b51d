#!/usr/bin/env bash
# Lazy-queue memory experiment: publish many persistent messages into one durable queue with
# no consumer, let it rest, then consume them all, first on a private RabbitMQ node (queue
# declared with x-queue-mode=lazy) and then on Warren, sampling the broker's resident memory
# every second. See bench/README.md.
#
#   bench/lazy_queue.sh [--messages N] [--size BYTES] [--rest SECONDS]
#                       [--phase-timeout SECONDS] [--only rabbitmq|warren] [--out-dir DIR]
#                       [--tool warren-perf|perftest]
#
# Per broker, the phases are: idle (5 s after start), publish (1 producer, no consumer,
# --pmessages N, persistent, confirms with up to 500 outstanding), rest, consume (1 consumer,
# prefetch 1000, until the queue's messages are all received) and drained (5 s). The load tool
# is `warren perf` (the default) or RabbitMQ PerfTest (--tool perftest, the reference); both
# take the same flags, and both brokers get the same ones, queue arguments included. Every
# load run is bounded by --phase-timeout; the brokers (bench/brokers.sh) and the sampler are
# stopped on every exit.
#
# Writes into --out-dir (default bench/results), with STAMP the start time:
#   lazy-queue-STAMP.csv        broker,second,phase,rss_mib,messages_ready (one row a second;
#                               second counts from the broker's start; rss_mib is VmRSS of
#                               the broker, for RabbitMQ its beam.smp; messages_ready from a
#                               passive queue.declare, empty when unknown)
#   lazy-queue-STAMP-rss.png    RSS over time, one line per broker, phases marked
#   lazy-queue-STAMP-ready.png  ready messages over time
#   lazy-queue-STAMP.txt        the parameters and the summary printed at the end
# Charts are drawn by warren-plot (bench/plot), built when missing.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
# shellcheck source=bench/brokers.sh
source "$REPO_ROOT/bench/brokers.sh"
readonly QUEUE=lazy-queue
readonly IDLE_S=5
readonly DRAINED_S=5
readonly CONFIRMS=500
readonly PREFETCH=1000
readonly JAVA_HEAP="${PERFTEST_JAVA_HEAP:--Xmx1g}"
readonly SAMPLER="$REPO_ROOT/bench/sample_broker.py"

messages=3000000
size=1024
rest_s=30
phase_timeout_s=""
only=""
out_dir="$REPO_ROOT/bench/results"
queue_args="x-queue-mode=lazy"
tool=warren-perf # the load tool: `warren perf`, or RabbitMQ PerfTest (the reference)
work_dir=""
sampler_pid=""
jars=""
csv=""
summary=""

main() {
  parse_args "$@"
  [[ -n "$phase_timeout_s" ]] || phase_timeout_s=$((120 + messages / 1000))
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  work_dir="$(mktemp -d -t warren-lazy-queue.XXXXXX)"
  check_disk
  mkdir -p "$out_dir"
  local stamp
  stamp="$(date +%Y-%m-%d-%H%M%S)"
  csv="$out_dir/lazy-queue-$stamp.csv"
  summary="$out_dir/lazy-queue-$stamp.txt"
  if [[ "$tool" == perftest ]]; then
    jars="$(bash "$REPO_ROOT/tests/interop/perftest.sh" --install-only)"
  elif [[ ! -x "$(warren_binary)" ]]; then
    (cd "$REPO_ROOT" && cargo build --release -p warren-server)
  fi
  echo "broker,second,phase,rss_mib,messages_ready" >"$csv"
  say "lazy-queue: $messages messages of $size bytes, rest ${rest_s}s, queue $QUEUE" \
    "with $queue_args, load tool $tool, each run limited to ${phase_timeout_s}s; $(date -Is)"
  local status=0
  if [[ "$only" != warren ]]; then
    run_broker rabbitmq || status=1
  fi
  if [[ "$only" != rabbitmq ]]; then
    run_broker warren || status=1
  fi
  draw_charts "${csv%.csv}" || status=1
  echo "lazy-queue: CSV $csv, summary $summary"
  return "$status"
}

usage() {
  [[ $# -eq 0 ]] || echo "lazy-queue: $1" >&2
  cat >&2 <<EOF
usage: $0 [--messages N] [--size BYTES] [--rest SECONDS] [--phase-timeout SECONDS]
          [--only rabbitmq|warren] [--out-dir DIR] [--queue-args ARGS] [--tool TOOL]
  --messages N         persistent messages to publish and then consume (default 3000000)
  --size BYTES         body size (default 1024)
  --rest SECONDS       pause between publishing and consuming (default 30)
  --phase-timeout S    limit of each load run (default 120 + N/1000)
  --only BROKER        run one broker only
  --out-dir DIR        where the CSV, charts and summary go (default bench/results)
  --queue-args ARGS    --queue-args for both brokers (default x-queue-mode=lazy)
  --tool TOOL          warren-perf (default) or perftest (RabbitMQ PerfTest, the reference)
Quick run: $0 --messages 200000 --rest 10
Environment: WARREN_BROKER_BIN, CARGO_TARGET_DIR, WARREN_PLOT_BIN, PERFTEST_JAVA_HEAP.
EOF
  exit 2
}

parse_args() {
  while [[ $# -gt 0 ]]; do
    local value="${2:-}"
    case "$1" in
      --messages) [[ "$value" =~ ^[1-9][0-9]*$ ]] || usage "--messages needs a count"
        messages="$value" ;;
      --size) [[ "$value" =~ ^[0-9]+$ ]] || usage "--size needs a byte count"
        size="$value" ;;
      --rest) [[ "$value" =~ ^[0-9]+$ ]] || usage "--rest needs seconds"
        rest_s="$value" ;;
      --phase-timeout) [[ "$value" =~ ^[1-9][0-9]*$ ]] || usage "--phase-timeout needs seconds"
        phase_timeout_s="$value" ;;
      --only) [[ "$value" == rabbitmq || "$value" == warren ]] \
          || usage "--only needs rabbitmq or warren"
        only="$value" ;;
      --out-dir) [[ -n "$value" ]] || usage "--out-dir needs a directory"
        out_dir="$value" ;;
      --queue-args) [[ -n "$value" ]] || usage "--queue-args needs key=value[,key=value]"
        queue_args="$value" ;;
      --tool) [[ "$value" == warren-perf || "$value" == perftest ]] \
          || usage "--tool needs warren-perf or perftest"
        tool="$value" ;;
      -h|--help) usage ;;
      *) usage "unknown argument '$1'" ;;
    esac
    shift 2
  done
}

# check_disk: RabbitMQ writes every message to the temporary directory; ask for twice the
# bodies' size free there.
check_disk() {
  require_free_mib lazy-queue $((2 * messages * (size + 200) / 1048576 + 1024))
}

# run_broker NAME: one broker from start to stop, its samples appended to the CSV.
run_broker() {
  local name="$1"
  echo
  echo "== $name"
  local pid port
  if [[ "$name" == rabbitmq ]]; then
    start_rabbitmq || { say "$name: NOT MEASURED (could not start; see above)"; return 1; }
    pid="$rabbit_beam_pid" port="$rabbit_port"
  else
    start_warren || { say "$name: NOT MEASURED (could not start; see above)"; return 1; }
    pid="$warren_pid" port="$warren_port"
  fi
  local phase_file="$work_dir/phase-$name"
  echo idle >"$phase_file"
  python3 "$SAMPLER" sample --pid "$pid" --broker "$name" --phase-file "$phase_file" \
    --csv "$csv" --port "$port" --queue "$QUEUE" \
    --max-seconds $((IDLE_S + rest_s + DRAINED_S + 2 * phase_timeout_s + 60)) &
  sampler_pid=$!
  local status=0
  phases "$name" "$port" "$phase_file" || status=1
  stop_sampler
  if [[ "$name" == rabbitmq ]]; then stop_rabbitmq; else stop_warren; fi
  summarise "$name"
  return "$status"
}

# phases NAME PORT PHASE_FILE: idle, publish, rest, consume, drained.
phases() {
  local name="$1" port="$2" phase_file="$3"
  local uri="amqp://guest:guest@127.0.0.1:$port/%2f"
  local queue=(-u "$QUEUE" --flag persistent --auto-delete false --queue-args "$queue_args")
  sleep "$IDLE_S"
  echo publish >"$phase_file"
  load "$name" publish "$uri" "${queue[@]}" -x 1 -y 0 --pmessages "$messages" \
    --size "$size" --confirm "$CONFIRMS" || return 1
  local ready
  ready="$(python3 "$SAMPLER" count --port "$port" --queue "$QUEUE")" || return 1
  say "$name: queue $QUEUE holds $ready ready messages after publishing"
  if [[ "$ready" -eq 0 ]]; then
    say "$name: nothing to consume"
    return 1
  fi
  echo rest >"$phase_file"
  sleep "$rest_s"
  echo consume >"$phase_file"
  load "$name" consume "$uri" "${queue[@]}" -x 0 -y 1 --cmessages "$ready" \
    --qos "$PREFETCH" || return 1
  ready="$(python3 "$SAMPLER" count --port "$port" --queue "$QUEUE")" || return 1
  say "$name: queue $QUEUE holds $ready ready messages after consuming"
  echo drained >"$phase_file"
  sleep "$DRAINED_S"
}

# load NAME PHASE URI ARGS...: one run of the load tool, bounded by the phase timeout;
# prints its duration and average rate. warren perf gets --max-seconds past the timeout, so
# that the timeout, not its own limit (which ends a run as if it were done), stops it.
load() {
  local name="$1" phase="$2" uri="$3"
  shift 3
  local log="$work_dir/$tool-$name-$phase.log" start=$SECONDS status=0
  local command=(java "$JAVA_HEAP" -cp "$jars/*" com.rabbitmq.perf.PerfTest)
  [[ "$tool" == perftest ]] \
    || command=("$(warren_binary)" perf --max-seconds $((phase_timeout_s + 60)))
  timeout --kill-after=10 "$phase_timeout_s" "${command[@]}" --uri "$uri" "$@" \
    >"$log" 2>&1 </dev/null || status=$?
  local took=$((SECONDS - start)) rate
  rate="$(sed -n 's/.*\(sending\|receiving\) rate avg: \([1-9][0-9]*\) msg\/s.*/\2/p' "$log" \
    | tail -n 1)"
  if [[ $status -eq 124 || $status -eq 137 ]]; then
    say "$name: $phase: $tool stopped after the ${phase_timeout_s}s phase timeout" \
      "(raise --phase-timeout); its last lines:"
    tail -n 5 "$log" || true
    return 1
  elif [[ $status -ne 0 || -z "$rate" ]]; then
    say "$name: $phase: $tool failed (status $status); its last lines:"
    tail -n 20 "$log" || true
    return 1
  fi
  say "$name: $phase: ${took}s, average $rate msg/s"
}

# summarise NAME: RSS at the end of each phase and its peak, from the CSV.
summarise() {
  awk -F , -v name="$1" '$1 == name {
      if (!($3 in peak)) order[++phases] = $3
      last[$3] = $4; if ($4 > peak[$3]) peak[$3] = $4
    } END {
      if (phases == 0) { print name ": no samples"; exit }
      line = name ": RSS MiB at end of phase (peak):"
      for (i = 1; i <= phases; i++) {
        p = order[i]; line = line sprintf(" %s %.0f (%.0f)", p, last[p], peak[p])
      }
      print line
    }' "$csv" | while IFS= read -r line; do say "$line"; done
}

# draw_charts PREFIX: PREFIX-rss.png and PREFIX-ready.png from the CSV.
draw_charts() {
  local prefix="$1" plot
  chart_tools lazy-queue "$csv" || return 1
  local title="$messages persistent messages of $size B into one durable queue, rest" \
    title_end="${rest_s}s, consume"
  "$plot" --csv "$csv" --x second --y rss_mib --series broker --marks phase \
    --title "Broker RSS: $title $title_end" --x-label "seconds since broker start" \
    --y-label "RSS (MiB)" --out "$prefix-rss.png" || return 1
  "$plot" --csv "$csv" --x second --y messages_ready --series broker --marks phase \
    --title "Ready messages: $title $title_end" --x-label "seconds since broker start" \
    --y-label "messages ready" --out "$prefix-ready.png" || return 1
  say "lazy-queue: charts ${prefix##*/}-rss.png ${prefix##*/}-ready.png"
}

cleanup() {
  stop_sampler
  stop_warren
  stop_rabbitmq
  if [[ -n "$work_dir" ]]; then
    rm -rf "$work_dir"
  fi
}

main "$@"
