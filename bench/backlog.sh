#!/usr/bin/env bash
# Large persistent backlogs on Warren: memory while publishing, restart after a crash, and
# disk use under churn. See bench/README.md ("backlog.sh").
#
#   bench/backlog.sh [--messages N] [--size BYTES] [options]          the backlog run
#   bench/backlog.sh --churn [--total N] [--max-backlog M] [options]   the churn run
#
# Backlog run, on a fresh Warren (release build, bench/brokers.sh), phases in this order:
#   idle     2 s
#   publish  warren perf, 1 producer, no consumer: N persistent, mandatory messages of BYTES
#            (each numbered in its body, 0..N-1) into the durable queue "backlog", publisher
#            confirms with up to 1000 outstanding; all N must be confirmed, none nacked or
#            returned
#   crash    kill -9 of the broker
#   restart  the broker started again on the same data directory and port; the restart time
#            is from the launch of the process to its "listening on" log line (TCP accepted
#            is measured too); its "message store: recover..." lines are kept
#   consume  the queue must hold N ready messages; warren perf, 1 consumer, --verify-order:
#            all N, checked in order (0, 1, 2, ... no gap, no repeat)
#   drained  2 s, then SIGTERM (clean stop, timed)
# It passes when the broker's RSS stayed under 1024 MiB throughout (every sample and the
# kernel's high-water mark VmHWM of both broker processes), the restart took under 10 s and
# all N came back in order.
#
# Churn run (--churn): a fresh Warren, warren-backlog churn --keep-full (publisher and
# consumer at once through the durable queue "churn", the backlog never above M; the consumer
# trails the publisher so that the backlog stays near M all along), then 5 s to settle.
# warren-backlog does this run because no PerfTest flag paces a publisher by what a consumer
# has acknowledged, which is what holds the backlog at M.
# It passes when the churn ends in order and the store directory at the end is no larger
# than 2 x M x BYTES + 2 segments; the peak is reported against the same figure.
#
# A sampler writes one row a second: the broker's VmRSS and the disk use (du -sb) of the
# data directory (backlog run) or of <data dir>/store (churn run). Outputs, in --out-dir
# (default bench/results), with STAMP the start time and KIND backlog or churn:
#   KIND-STAMP.csv        second,phase,rss_mib,disk_mib (second counts from the first start;
#                         rss_mib is empty while no broker runs)
#   KIND-STAMP.png        RSS and disk use over time, phases marked (warren-plot)
#   KIND-STAMP-rss.png    RSS alone, so that the 1 GiB line can be read
#   KIND-STAMP.txt        parameters, figures, PASS/FAIL lines (also printed)
#   KIND-STAMP-broker.log the broker's log (both runs of it in the backlog run)
# Exit status: 0 all PASS, 1 a FAIL or an error, 2 bad usage.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
# shellcheck source=bench/brokers.sh
source "$REPO_ROOT/bench/brokers.sh"
readonly RSS_LIMIT_MIB=1024
readonly RESTART_LIMIT_S=10
readonly RESTART_TIMEOUT_S=300 # a restart slower than this is a failure, and is stopped
readonly IDLE_S=2
readonly SETTLE_S=5

mode=backlog
messages=10000000
total=20000000
max_backlog=100000
size=1024
segment_size=67108864 # Warren's default store_segment_size, written to its config file
memory_budget=""      # queue_memory_budget; Warren's default (64 MiB) when empty
timeout_s=""
out_dir="$REPO_ROOT/bench/results"
work_dir=""
sampler_pid=""
pid_file=""
phase_file=""
csv=""
summary=""
prefix=""
failures=0
backlog_tool="" # warren-backlog, for the churn run
uri=""

main() {
  parse_args "$@"
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  work_dir="$(mktemp -d -t warren-backlog.XXXXXX)"
  check_disk
  find_tools
  mkdir -p "$out_dir"
  prefix="$out_dir/$mode-$(date +%Y-%m-%d-%H%M%S)"
  csv="$prefix.csv" summary="$prefix.txt"
  pid_file="$work_dir/broker.pid" phase_file="$work_dir/phase"
  echo "second,phase,rss_mib,disk_mib" >"$csv"
  write_config
  if [[ "$mode" == backlog ]]; then
    say "backlog: $messages persistent messages of $size B into durable queue backlog," \
      "then kill -9, restart, consume; client timeout ${timeout_s}s; $(date -Is)"
    backlog_run || failures=$((failures + 1))
  else
    say "churn: $total persistent messages of $size B through durable queue churn, backlog" \
      "at most $max_backlog; client timeout ${timeout_s}s; $(date -Is)"
    churn_run || failures=$((failures + 1))
  fi
  stop_sampler
  keep_logs
  draw_charts || failures=$((failures + 1))
  say "$mode: CSV $csv, summary $summary"
  if [[ $failures -gt 0 ]]; then
    say "$mode: FAILED ($failures of the checks above)"
    return 1
  fi
  say "$mode: all checks PASS"
}

usage() {
  [[ $# -eq 0 ]] || echo "backlog: $1" >&2
  cat >&2 <<EOF
usage: $0 [--messages N] [--size BYTES] [common options]
       $0 --churn [--total N] [--max-backlog M] [--size BYTES] [common options]
  --messages N        backlog run: messages to publish, then consume (default 10000000)
  --churn             the churn run instead of the backlog run
  --total N           churn run: messages through the queue (default 20000000)
  --max-backlog M     churn run: most messages published and not yet acked (default 100000)
  --size BYTES        body size, at least 12 (default 1024)
common options:
  --segment-size B    Warren's store_segment_size (default 67108864, Warren's default)
  --memory-budget B   Warren's queue_memory_budget (default: Warren's, 64 MiB)
  --timeout S         limit of each client run (default 300 + 1 s per 2000 messages)
  --out-dir DIR       where the CSV, charts and summary go (default bench/results)
Quick runs: $0 --messages 200000
            $0 --churn --total 500000 --max-backlog 20000
Environment: WARREN_BROKER_BIN, WARREN_BACKLOG_BIN, WARREN_PLOT_BIN, CARGO_TARGET_DIR,
WARREN_BENCH_RUST_LOG (broker log filter, default info), TMPDIR (where the data dir goes).
EOF
  exit 2
}

parse_args() {
  while [[ $# -gt 0 ]]; do
    local value="${2:-}" count='^[1-9][0-9]*$'
    case "$1" in
      --churn) mode=churn; shift; continue ;;
      --messages) [[ "$value" =~ $count ]] || usage "--messages needs a count"
        messages="$value" ;;
      --total) [[ "$value" =~ $count ]] || usage "--total needs a count"
        total="$value" ;;
      --max-backlog) [[ "$value" =~ $count ]] || usage "--max-backlog needs a count"
        max_backlog="$value" ;;
      --size) [[ "$value" =~ $count && "$value" -ge 12 ]] \
          || usage "--size needs a byte count of at least 12 (sequence number and time stamp)"
        size="$value" ;;
      --segment-size) [[ "$value" =~ $count ]] || usage "--segment-size needs bytes"
        segment_size="$value" ;;
      --memory-budget) [[ "$value" =~ $count ]] || usage "--memory-budget needs bytes"
        memory_budget="$value" ;;
      --timeout) [[ "$value" =~ $count ]] || usage "--timeout needs seconds"
        timeout_s="$value" ;;
      --out-dir) [[ -n "$value" ]] || usage "--out-dir needs a directory"
        out_dir="$value" ;;
      -h|--help) usage ;;
      *) usage "unknown argument '$1'" ;;
    esac
    shift 2
  done
  local count_of_run="$messages"
  [[ "$mode" == backlog ]] || count_of_run="$total"
  [[ -n "$timeout_s" ]] || timeout_s=$((300 + count_of_run / 2000))
}

# check WHAT OK: a PASS or FAIL line; a FAIL is counted.
check() {
  if [[ "$2" == 1 ]]; then
    say "PASS $1"
  else
    say "FAIL $1"
    failures=$((failures + 1))
  fi
}

# check_disk: the store keeps every message of the backlog run on disk (body + about 60
# bytes of record and headers); the churn run needs its bound and some room.
check_disk() {
  local need_mib
  if [[ "$mode" == backlog ]]; then
    need_mib=$((messages * (size + 100) / 1048576 + 1024))
  else
    need_mib=$((2 * max_backlog * (size + 100) / 1048576 + 4 * segment_size / 1048576 + 1024))
  fi
  require_free_mib backlog "$need_mib"
}

# find_tools: warren-backlog for the churn run, built when missing. The backlog run's client
# is `warren perf`, the broker's own binary (start_warren builds it when missing).
find_tools() {
  [[ "$mode" == churn ]] || return 0
  local target="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release"
  backlog_tool="${WARREN_BACKLOG_BIN:-$target/warren-backlog}"
  if [[ ! -x "$backlog_tool" ]]; then
    echo "backlog: building warren-backlog: cargo build --release -p warren-backlog"
    (cd "$REPO_ROOT" && cargo build --release -p warren-backlog) || true
    if [[ ! -x "$backlog_tool" ]]; then
      echo "backlog: no $backlog_tool; build it (cargo build --release -p warren-backlog)" \
        "or set WARREN_BACKLOG_BIN" >&2
      exit 1
    fi
  fi
}

# write_config: Warren's config file for both starts: the segment size always (the churn
# bound depends on it), the memory budget when given.
write_config() {
  warren_config="$work_dir/warren.toml"
  echo "store_segment_size = $segment_size" >"$warren_config"
  if [[ -n "$memory_budget" ]]; then
    echo "queue_memory_budget = $memory_budget" >>"$warren_config"
  fi
  say "warren config: $(awk 'NR > 1 { printf "; " } { printf "%s", $0 }' "$warren_config")"
}

# start_broker: a fresh Warren, the sampler on it (its data directory, or the store).
start_broker() {
  start_warren || { say "warren: NOT MEASURED (could not start; see above)"; return 1; }
  echo "$warren_pid" >"$pid_file"
  uri="amqp://guest:guest@127.0.0.1:$warren_port/%2f"
  local watched="$warren_data_dir"
  [[ "$mode" == backlog ]] || watched="$warren_data_dir/store"
  echo idle >"$phase_file"
  sample "$watched" $((2 * timeout_s + RESTART_TIMEOUT_S + 600)) >>"$csv" &
  sampler_pid=$!
}

backlog_run() {
  start_broker || return 1
  sleep "$IDLE_S"
  phase publish
  perf_client publish -x 1 -y 0 --pmessages "$messages" --size "$size" --confirm 1000 \
    --flag mandatory || return 1
  perf_check publish "confirmed $messages, nacked 0, returned 0" \
    "totals['confirmed'] == $messages and totals['nacked'] == 0 and totals['returned'] == 0" \
    || return 1
  local publish_hwm
  publish_hwm="$(status_mib "$warren_pid" VmHWM)"
  say "publish: peak RSS $(peak_mib publish 3) MiB sampled, VmHWM $publish_hwm MiB;" \
    "data dir $(last_mib publish 4) MiB at the end"
  phase crash
  kill -KILL "$warren_pid"
  wait "$warren_pid" 2>/dev/null || true
  warren_pid="" && : >"$pid_file"
  phase restart
  restart_broker || return 1
  phase consume
  local consumed=1
  ready_check "$messages" || consumed=0
  if [[ $consumed -eq 1 ]]; then
    perf_client consume -x 0 -y 1 --cmessages "$messages" --qos 1000 --multi-ack-every 500 \
      --verify-order || consumed=0
  fi
  if [[ $consumed -eq 1 ]]; then
    perf_check consume "received $messages" "totals['received'] == $messages" || consumed=0
  fi
  say "consume: peak RSS $(peak_mib consume 3) MiB sampled"
  phase drained
  sleep "$IDLE_S"
  local consume_hwm
  consume_hwm="$(status_mib "$warren_pid" VmHWM)"
  say "restarted broker: VmHWM $consume_hwm MiB (restart, recovery and consume)"
  clean_stop
  local peak
  peak="$(max_of "$(peak_mib '' 3)" "$publish_hwm" "$consume_hwm")"
  check "RSS under $RSS_LIMIT_MIB MiB throughout: peak $peak MiB" \
    "$(awk -v p="$peak" -v l="$RSS_LIMIT_MIB" 'BEGIN { print (p < l) ? 1 : 0 }')"
  check "all $messages messages consumed back in order after the restart" "$consumed"
}

churn_run() {
  start_broker || return 1
  sleep "$IDLE_S"
  phase churn
  backlog_client churn --queue churn --total "$total" --max-backlog "$max_backlog" \
    --size "$size" --keep-full || return 1
  phase settle
  sleep "$SETTLE_S"
  local final_bytes bound_bytes
  final_bytes="$(du -sb "$warren_data_dir/store" 2>/dev/null | cut -f1)" || true
  bound_bytes=$((2 * max_backlog * size + 2 * segment_size))
  local final_mib bound_mib peak_disk
  final_mib="$(mib "$final_bytes")" bound_mib="$(mib "$bound_bytes")"
  peak_disk="$(peak_mib '' 4)"
  say "churn: store peak $peak_disk MiB (bound $bound_mib MiB = 2 x $max_backlog x $size B" \
    "+ 2 x $segment_size B segments), $final_mib MiB at the end;" \
    "peak RSS $(peak_mib '' 3) MiB sampled, VmHWM $(status_mib "$warren_pid" VmHWM) MiB"
  if awk -v p="$peak_disk" -v b="$bound_mib" 'BEGIN { exit !(p > b) }'; then
    say "note: the store's peak was above the bound during the run (checked: the end)"
  fi
  clean_stop
  check "store at the end $final_mib MiB <= $bound_mib MiB" \
    "$([[ -n "$final_bytes" && "$final_bytes" -le "$bound_bytes" ]] && echo 1 || echo 0)"
  check "all $total messages churned through in order" 1
}

# perf_client PHASE ARGS...: one `warren perf` run on the queue "backlog" (durable, persistent
# messages), bounded by --timeout (its --max-seconds, and `timeout` a minute later in case it
# hangs); its report goes to PHASE.json, and its duration and rate are said.
perf_client() {
  local phase="$1" log="$work_dir/perf-$1.log" json="$work_dir/perf-$1.json" status=0
  shift
  local args=(-u backlog --flag persistent --auto-delete false "$@" --max-seconds "$timeout_s"
    --json "$json")
  echo "$phase: warren perf ${args[*]} (progress in $log)"
  timeout --kill-after=10 $((timeout_s + 60)) "$(warren_binary)" perf --uri "$uri" \
    "${args[@]}" >"$log" 2>&1 </dev/null || status=$?
  if [[ $status -ne 0 ]]; then
    say "FAIL $phase: warren perf exited with status $status; its last lines:"
    tail -n 5 "$log" | while IFS= read -r line; do say "  $line"; done
    return 1
  fi
  tail -n 2 "$log" | sed 's/^/  /'
  say "$phase: $(json "$json" summary duration_s) s, sending $(json "$json" summary \
    sending_rate_avg) msg/s, receiving $(json "$json" summary receiving_rate_avg) msg/s" \
    "(totals $(json "$json" summary totals))"
}

# perf_check PHASE WHAT CONDITION: a Python CONDITION on the run's totals (a dict), read from
# PHASE.json; WHAT says what it wants. A run that reached --timeout ends as if done (exit 0)
# and fails here.
perf_check() {
  local phase="$1" what="$2" condition="$3"
  if ! python3 -c "import json, sys
totals = json.load(open(sys.argv[1]))['summary']['totals']
sys.exit(0 if ($condition) else 1)" "$work_dir/perf-$phase.json"; then
    say "FAIL $phase: wanted $what, got $(json "$work_dir/perf-$phase.json" summary totals)"
    return 1
  fi
}

# ready_check N: the queue "backlog" must hold N ready messages before they are consumed.
ready_check() {
  local ready
  ready="$(python3 "$REPO_ROOT/bench/sample_broker.py" count --port "$warren_port" \
    --queue backlog)" || ready=""
  if [[ "$ready" != "$1" ]]; then
    say "FAIL consume: queue backlog holds ${ready:-an unknown number of} ready messages" \
      "after the restart, $1 wanted"
    return 1
  fi
  say "consume: queue backlog holds $ready ready messages after the restart"
}

# backlog_client COMMAND ARGS...: one warren-backlog run on the broker, bounded by --timeout
# (its own limit, and `timeout` a minute later in case it hangs); says its JSON summary.
backlog_client() {
  local command="$1" log="$work_dir/client-$1.log" out="$work_dir/client-$1.json" status=0
  shift
  echo "$command: warren-backlog $command $* (progress in $log)"
  timeout --kill-after=10 $((timeout_s + 60)) "$backlog_tool" "$command" --uri "$uri" \
    --timeout "$timeout_s" "$@" >"$out" 2>"$log" </dev/null || status=$?
  if [[ $status -ne 0 ]]; then
    say "FAIL $command: warren-backlog exited with status $status; its last lines:"
    tail -n 5 "$log" | while IFS= read -r line; do say "  $line"; done
    return 1
  fi
  tail -n 2 "$log" | sed 's/^/  /'
  say "$command: $(json "$out" seconds) s, $(json "$out" rate) msg/s ($(tail -n 1 "$out"))"
}

# restart_broker: Warren again on the same data directory and port, as a crashed broker is
# restarted; times the launch to the "listening on" line (from the log's own timestamp) and
# to the first TCP connection accepted.
restart_broker() {
  local log="$work_dir/warren/broker-restart.log"
  local launched="$EPOCHREALTIME"
  launch_warren "$log"
  echo "$warren_pid" >"$pid_file"
  local tcp_at="" deadline=$((SECONDS + RESTART_TIMEOUT_S))
  while [[ -z "$tcp_at" ]]; do
    if ! kill -0 "$warren_pid" 2>/dev/null || [[ $SECONDS -ge $deadline ]]; then
      say "FAIL restart: the broker did not accept TCP within ${RESTART_TIMEOUT_S}s" \
        "(or exited); the end of its log:"
      tail -n 20 "$log" | while IFS= read -r line; do say "  $line"; done
      return 1
    fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$warren_port") 2>/dev/null; then
      tcp_at="$EPOCHREALTIME"
    else
      sleep 0.05
    fi
  done
  restart_report "$log" "$launched" "$tcp_at"
}

# restart_report LOG LAUNCHED TCP_AT: the restart time, the recovery lines, the check.
restart_report() {
  local log="$1" launched="${2/,/.}" tcp_at="${3/,/.}" ready_line ready_at restart_s tcp_s
  ready_line="$(grep -m 1 'listening on' "$log")" || {
    say "FAIL restart: TCP accepted but no 'listening on' line in $log"
    return 1
  }
  ready_at="$(date -d "${ready_line%% *}" +%s.%N)"
  restart_s="$(awk -v a="$launched" -v b="$ready_at" 'BEGIN { printf "%.2f", b - a }')"
  tcp_s="$(awk -v a="$launched" -v b="$tcp_at" 'BEGIN { printf "%.2f", b - a }')"
  say "restart after kill -9: 'listening on' logged ${restart_s}s after launch, first TCP" \
    "connection accepted after ${tcp_s}s; recovery lines:"
  grep 'message store: recover' "$log" | sed 's/ *INFO [^ ]* / /' \
    | while IFS= read -r line; do say "  $line"; done
  check "restart with a backlog of $messages messages under ${RESTART_LIMIT_S}s: ${restart_s}s" \
    "$(awk -v s="$restart_s" -v l="$RESTART_LIMIT_S" 'BEGIN { print (s < l) ? 1 : 0 }')"
}

# clean_stop: SIGTERM, timed (stop_wait kills the broker after 30 s).
clean_stop() {
  phase stop
  local started="$EPOCHREALTIME" pid="$warren_pid"
  stop_warren
  : >"$pid_file"
  say "clean stop (SIGTERM): $(awk -v a="${started/,/.}" -v b="${EPOCHREALTIME/,/.}" \
    'BEGIN { printf "%.2f", b - a }')s (pid $pid)"
}

phase() {
  echo "$1" >"$phase_file"
}

# sample DIR MAX_SECONDS: one CSV row a second on stdout until SIGTERM or MAX_SECONDS:
# second,phase,rss_mib,disk_mib. A late sample skips the seconds it missed, so `second`
# stays true. The broker is the pid in the pid file (empty while none runs).
sample() {
  local dir="$1" max_s="$2" start tick=0 now pid rss disk
  trap 'exit 0' TERM
  start="${EPOCHREALTIME/[.,]/}"
  while [[ $tick -le $max_s ]]; do
    pid="$(cat "$pid_file" 2>/dev/null)" || pid=""
    rss=""
    [[ -z "$pid" ]] || rss="$(status_mib "$pid" VmRSS)"
    disk="$(du -sb "$dir" 2>/dev/null | cut -f1)" || true
    echo "$tick,$(cat "$phase_file"),$rss,$(mib "$disk")"
    now="${EPOCHREALTIME/[.,]/}"
    tick=$(((now - start) / 1000000 + 1))
    sleep "$(awk -v us=$((start + tick * 1000000 - now)) 'BEGIN { printf "%.3f", us / 1e6 }')"
  done
}

# status_mib PID FIELD: a /proc/PID/status figure (VmRSS, VmHWM) in MiB, empty if gone.
status_mib() {
  awk -v f="$2:" '$1 == f { printf "%.1f", $2 / 1024 }' "/proc/$1/status" 2>/dev/null || true
}

# mib BYTES: in MiB with one decimal, empty for empty.
mib() {
  [[ -n "$1" ]] || return 0
  awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'
}

# peak_mib PHASE COLUMN: the highest value of a CSV column (3 RSS, 4 disk) in the rows of
# PHASE, or of all rows for an empty PHASE.
peak_mib() {
  awk -F , -v p="$1" -v c="$2" 'NR > 1 && (p == "" || $2 == p) && $c != "" \
    { if (!seen || $c + 0 > max) max = $c + 0; seen = 1 }
    END { if (seen) printf "%.1f", max; else printf "?" }' "$csv"
}

# last_mib PHASE COLUMN: the last value of a CSV column in the rows of PHASE.
last_mib() {
  awk -F , -v p="$1" -v c="$2" 'NR > 1 && $2 == p && $c != "" { v = $c }
    END { printf "%s", (v == "" ? "?" : v) }' "$csv"
}

# max_of NUMBERS...: the largest of the numeric arguments (others are skipped).
max_of() {
  printf '%s\n' "$@" | awk '/^[0-9.]+$/ { if (!seen || $1 + 0 > m) m = $1 + 0; seen = 1 }
    END { printf "%.1f", m }'
}

# json FILE KEY...: a field of a JSON file (warren-backlog's one-line summary, warren perf's
# --json report), nested keys in order; objects are printed as JSON.
json() {
  python3 -c 'import json, sys
value = json.load(open(sys.argv[1]))
for key in sys.argv[2:]: value = value[key]
print(json.dumps(value, separators=(",", ":")) if isinstance(value, dict) else value)' "$@"
}

# keep_logs: the broker's log (both runs of it) next to the results.
keep_logs() {
  local log
  for log in "$work_dir/warren/broker.log" "$work_dir/warren/broker-restart.log"; do
    [[ -f "$log" ]] || continue
    echo "== ${log##*/}"
    cat "$log"
  done >"$prefix-broker.log"
}

# draw_charts: PREFIX.png (RSS and disk, from a long-format copy of the CSV) and
# PREFIX-rss.png.
draw_charts() {
  local plot
  chart_tools backlog "$csv" || return 1
  local disk_name="disk (data dir)" title
  [[ "$mode" == backlog ]] || disk_name="disk (store)"
  awk -F , -v d="$disk_name" 'NR == 1 { print "second,phase,what,mib"; next }
    { print $1 "," $2 ",RSS," $3; print $1 "," $2 "," d "," $4 }' "$csv" >"$work_dir/long.csv"
  if [[ "$mode" == backlog ]]; then
    title="Warren: $messages persistent messages of $size B, kill -9, restart, consume"
  else
    title="Warren: churn of $total messages of $size B, backlog at most $max_backlog"
  fi
  "$plot" --csv "$work_dir/long.csv" --x second --y mib --series what --marks phase \
    --title "$title" --x-label "seconds since the broker started" --y-label "MiB" \
    --out "$prefix.png" || return 1
  "$plot" --csv "$csv" --x second --y rss_mib --marks phase --title "Broker RSS: $title" \
    --x-label "seconds since the broker started" --y-label "RSS (MiB)" --out "$prefix-rss.png" \
    || return 1
  say "$mode: charts ${prefix##*/}.png ${prefix##*/}-rss.png"
}

cleanup() {
  stop_sampler
  stop_warren
  if [[ -n "$work_dir" ]]; then
    rm -rf "$work_dir"
  fi
}

main "$@"
