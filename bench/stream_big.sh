#!/usr/bin/env bash
# Large streams on Warren alone (issue 31's absolute targets): reading a long stream from
# `first`, and restarting a broker that holds a 10 GB stream. See bench/README.md.
#
#   bench/stream_big.sh [--messages N] [--gigabytes G] [--only read|restart] [--out-dir DIR]
#
# read     warren perf stream, 1 producer, no consumer, 12 B messages into the stream
#          "big-read" until N (default 10,000,000) are confirmed; then one consumer from
#          `first` with --cmessages N: the time from its subscribe to its N-th message.
#          Target: at least 5,000,000 msg/s.
# restart  1 producer, no consumer, 1,000 B messages in batches of 100 into "big-restart"
#          (segments of 500 MB) until the broker's streams directory holds G (default 10)
#          GB (10^9 bytes); then kill -9, and the broker is started again on the same data
#          directory and ports. Timed from the launch of the process: the stream port and
#          the AMQP port accepting TCP, and a consumer from `last` getting its first message
#          (--cmessages 1). Target: the stream port accepts within 2 s.
#
# Warren is the release build (bench/brokers.sh: WARREN_BROKER_BIN or target/release). A line
# a second while filling. Outputs in --out-dir (default bench/results): stream-big-STAMP.txt
# (parameters, figures, PASS/FAIL lines, also printed). The data directory (G GB) is removed
# at the end. Exit status: 0 all PASS, 1 a FAIL or an error, 2 bad usage.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
# shellcheck source=bench/brokers.sh
source "$REPO_ROOT/bench/brokers.sh"
readonly READ_TARGET_MSG_S=5000000
readonly RESTART_TARGET_S=2
readonly RESTART_TIMEOUT_S=120
readonly FILL_ROUND_S=10
readonly FILL_ROUNDS_MAX=60 # a fill that needs more rounds than this fails

messages=10000000
gigabytes=10
only=""
out_dir="$REPO_ROOT/bench/results"
work_dir=""
failed=0
summary=""

main() {
  parse_args "$@"
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  work_dir="$(mktemp -d -t warren-stream-big.XXXXXX)"
  mkdir -p "$out_dir"
  summary="$out_dir/stream-big-$(date -u +%Y-%m-%d-%H%M%S).txt"
  local binary
  binary="$(warren_binary)"
  say "stream_big: $binary ($("$binary" --version 2>/dev/null || echo '?')), $(nproc) cores," \
    "work dir $work_dir"
  start_warren
  [[ -n "$warren_stream_port" ]] || { say "FAIL: $binary has no --stream-port"; exit 1; }
  [[ "$only" == restart ]] || read_phase || failed=1
  [[ "$only" == read ]] || restart_phase || failed=1
  stop_warren
  say "stream_big: summary in $summary"
  return "$failed"
}

usage() {
  [[ $# -eq 0 ]] || echo "stream_big: $1" >&2
  echo "usage: $0 [--messages N] [--gigabytes G] [--only read|restart] [--out-dir DIR]" >&2
  exit 2
}

parse_args() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --messages) messages="${2:-}"; shift 2 ;;
      --gigabytes) gigabytes="${2:-}"; shift 2 ;;
      --only) only="${2:-}"; shift 2 ;;
      --out-dir) out_dir="${2:-}"; shift 2 ;;
      -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}"; exit 0 ;;
      *) usage "unknown argument '$1'" ;;
    esac
  done
  [[ "$messages" =~ ^[1-9][0-9]*$ ]] || usage "--messages needs a whole number above 0"
  [[ "$gigabytes" =~ ^[1-9][0-9]*$ ]] || usage "--gigabytes needs a whole number above 0"
  [[ -z "$only" || "$only" == read || "$only" == restart ]] \
    || usage "--only needs read or restart, not '$only'"
}

say() {
  echo "$*"
  [[ -z "$summary" ]] || echo "$*" >>"$summary"
}

# check TEXT OK: a PASS or FAIL line.
check() {
  if [[ "$2" == 1 ]]; then say "PASS $1"; else say "FAIL $1"; failed=1; fi
}

# perf ARGS...: warren perf stream against this Warren; its output goes to stdout.
perf() {
  local command
  mapfile -t command < <(perf_command)
  "${command[@]}" stream \
    --uris "rabbitmq-stream://guest:guest@127.0.0.1:$warren_stream_port/%2f" "$@"
}

# summary_field LOG NAME: a field of the last `stream-summary` line of a perf run.
summary_field() {
  sed -n "s/.*stream-summary.* $2=\([0-9.]*\).*/\1/p" "$1" | tail -n 1
}

# fill STREAM UNTIL_CMD ARGS...: producer rounds of FILL_ROUND_S until UNTIL_CMD succeeds.
fill() {
  local stream="$1" until_cmd="$2" round=0 log
  shift 2
  confirmed_total=0
  while ! "$until_cmd"; do
    round=$((round + 1))
    if [[ $round -gt $FILL_ROUNDS_MAX ]]; then
      say "FAIL fill $stream: not done after $FILL_ROUNDS_MAX rounds of ${FILL_ROUND_S}s"
      return 1
    fi
    log="$work_dir/fill-$stream-$round.log"
    perf -x 1 -y 0 --streams "$stream" -z "$FILL_ROUND_S" "$@" | tee "$log" \
      | grep --line-buffered -E '^[0-9]+, published|Summary' || true
    local confirmed
    confirmed="$(summary_field "$log" confirmed)"
    [[ -n "$confirmed" ]] || { say "FAIL fill $stream: no summary (see $log)"; return 1; }
    confirmed_total=$((confirmed_total + confirmed))
  done
}

read_done() {
  [[ $confirmed_total -ge $messages ]]
}

read_phase() {
  say "read: filling 'big-read' with at least $messages confirmed 12 B messages"
  fill big-read read_done -s 12 || return 1
  say "read: $confirmed_total messages confirmed; one consumer from first, --cmessages $messages"
  local log="$work_dir/read.log" line rate
  perf -x 0 -y 1 --streams big-read -o first -C "$messages" -z 120 | tee "$log" || true
  line="$(grep -m 1 '^consumer 0: ' "$log")" || {
    say "FAIL read: the consumer did not get $messages messages within 120 s (see $log)"
    return 1
  }
  say "read: $line"
  rate="$(sed -n 's/.*, \([0-9]*\) msg\/s$/\1/p' <<<"$line")"
  check "read $messages messages from first at $rate msg/s (target $READ_TARGET_MSG_S)" \
    "$(( rate >= READ_TARGET_MSG_S ? 1 : 0 ))"
}

streams_bytes() {
  du -sb "$warren_data_dir/streams" 2>/dev/null | cut -f1
}

restart_done() {
  local bytes
  bytes="$(streams_bytes)"
  say "restart: streams directory $((${bytes:-0} / 1000000)) MB"
  [[ ${bytes:-0} -ge $((gigabytes * 1000000000)) ]]
}

restart_phase() {
  say "restart: filling 'big-restart' to $gigabytes GB with 1,000 B messages"
  fill big-restart restart_done -s 1000 -bs 100 || return 1
  local segments
  segments="$(find "$warren_data_dir/streams" -name '*.segment' | wc -l)"
  say "restart: $(($(streams_bytes) / 1000000)) MB in $segments segments," \
    "$confirmed_total messages confirmed; kill -9 of pid $warren_pid"
  kill -KILL "$warren_pid"
  wait "$warren_pid" 2>/dev/null || true
  relaunch
}

# relaunch: the broker again on the same data dir and ports, timed from its launch.
relaunch() {
  local log="$work_dir/warren/broker-restart.log"
  local launched="$EPOCHREALTIME"
  launch_warren "$log"
  local stream_at="" amqp_at="" deadline=$((SECONDS + RESTART_TIMEOUT_S))
  while [[ -z "$stream_at" || -z "$amqp_at" ]]; do
    if ! kill -0 "$warren_pid" 2>/dev/null || [[ $SECONDS -ge $deadline ]]; then
      say "FAIL restart: no TCP within ${RESTART_TIMEOUT_S}s (or it exited); its log ends:"
      tail -n 20 "$log" | while IFS= read -r line; do say "  $line"; done
      return 1
    fi
    if [[ -z "$stream_at" ]] && (exec 3<>"/dev/tcp/127.0.0.1/$warren_stream_port") 2>/dev/null
    then
      stream_at="$EPOCHREALTIME"
    fi
    if [[ -z "$amqp_at" ]] && (exec 3<>"/dev/tcp/127.0.0.1/$warren_port") 2>/dev/null; then
      amqp_at="$EPOCHREALTIME"
    fi
    [[ -n "$stream_at" && -n "$amqp_at" ]] || sleep 0.01
  done
  local first_log="$work_dir/restart-first.log" first_at=""
  if perf -x 0 -y 1 --streams big-restart -o last -C 1 -z 30 >"$first_log" 2>&1 \
    && grep -q '^consumer 0: ' "$first_log"; then
    first_at="$EPOCHREALTIME"
  fi
  local stream_s amqp_s first_s rss
  stream_s="$(elapsed "$launched" "$stream_at")"
  amqp_s="$(elapsed "$launched" "$amqp_at")"
  first_s="$([[ -n "$first_at" ]] && elapsed "$launched" "$first_at" || echo never)"
  rss="$(awk '/^VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$warren_pid/status")"
  say "restart after kill -9 with $gigabytes GB: stream port accepted TCP after ${stream_s}s," \
    "AMQP port after ${amqp_s}s, a consumer from last had its first message after" \
    "${first_s}s; RSS ${rss} MiB"
  grep -i 'stream' "$log" | grep -iE 'recover|open' | head -n 5 | sed 's/^/  /' \
    | while IFS= read -r line; do say "$line"; done
  check "restart: stream port within ${RESTART_TARGET_S}s (${stream_s}s)" \
    "$(awk -v s="$stream_s" -v l="$RESTART_TARGET_S" 'BEGIN { print (s < l) ? 1 : 0 }')"
  check "restart: the stream serves its last message (${first_s}s)" \
    "$([[ -n "$first_at" ]] && echo 1 || echo 0)"
}

elapsed() {
  awk -v a="${1/,/.}" -v b="${2/,/.}" 'BEGIN { printf "%.3f", b - a }'
}

cleanup() {
  stop_warren || true
  if [[ -n "$work_dir" ]]; then
    rm -rf "$work_dir"
  fi
}

main "$@"
