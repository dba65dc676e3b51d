#!/usr/bin/env bash
# Checks that `warren perf stream` measures what an independent load on RabbitMQ's own Java
# stream client measures (bench/stream-java): W5 of bench/seeds.sh (1 producer, 1 consumer,
# 12-byte messages, confirms) against one private RabbitMQ node with its rabbitmq_stream
# plugin, --rounds times, the two tools taking turns (the Java harness first in odd rounds),
# each run on a fresh stream that it deletes at its end. With --pin (the default on 2 cores
# or more) the broker runs on core 0 and the tool on core 1, so that neither tool's CPU use
# takes the broker's. It fails when the medians of the two tools' consumed averages differ by
# more than 15%.
#
#   bench/stream_agree.sh [--seconds N (20)] [--rounds R (3)] [--rate MSG/S] [--no-pin]
#                         [--log-dir DIR]
#
# --rate gives both tools the same publishing rate (W5 is otherwise unthrottled): the Java
# client spends about 1.5 µs of CPU per message published and consumed (its lines' tool_cpu_s),
# so at full speed on a 2-core machine it is the harness, not the broker, that sets the rate;
# below the harness's ceiling the two tools must read the same rates and comparable latency.
#
# Per run it prints the published, confirmed and consumed averages, the steady consumed rate
# and the consumer latency percentiles. The load tool is WARREN_PERF_BIN (a
# warren-perf binary) when set, else the Warren binary's `perf` (bench/brokers.sh).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
# shellcheck source=bench/brokers.sh
source "$REPO_ROOT/bench/brokers.sh"
readonly TOLERANCE_PERCENT=15
readonly W5_FLAGS=(-x 1 -y 1 -s 12 --delete-streams --max-length-bytes 2gb
  --stream-max-segment-size-bytes 100mb)

seconds=20
rounds=3
rate=""
pin=1
work_dir=""
log_dir=""

main() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --seconds) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || usage "--seconds needs a whole number"
        seconds="$2"; shift 2 ;;
      --rounds) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || usage "--rounds needs a whole number"
        rounds="$2"; shift 2 ;;
      --rate) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || usage "--rate needs a whole number"
        rate="$2"; shift 2 ;;
      --no-pin) pin=""; shift ;;
      --log-dir) [[ -n "${2:-}" ]] || usage "--log-dir needs a directory"
        log_dir="$2"; shift 2 ;;
      -h|--help) usage ;;
      *) usage "unknown option '$1'" ;;
    esac
  done
  [[ "$(nproc)" -ge 2 ]] || pin=""
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  work_dir="$(mktemp -d -t stream-agree.XXXXXX)"
  log_dir="${log_dir:-$work_dir/logs}"
  mkdir -p "$log_dir"
  bash "$REPO_ROOT/bench/stream-java/run.sh" --install-only >/dev/null
  RABBITMQ_BENCH_PLUGINS=rabbitmq_stream start_rabbitmq || exit 1
  [[ -z "$pin" ]] || taskset -a -p 0x1 "$rabbit_beam_pid" >/dev/null
  local uri="rabbitmq-stream://guest:guest@127.0.0.1:$rabbit_stream_port/%2f"
  echo "stream_agree: W5 (${W5_FLAGS[*]}${rate:+ --rate $rate})," \
    "$rounds round(s) of ${seconds}s per tool" \
    "${pin:+(RabbitMQ on core 0, the tool on core 1)}"
  local -a java=() warren=() java_steady=() warren_steady=()
  local round tool
  for ((round = 1; round <= rounds; round++)); do
    local order=(java warren)
    [[ $((round % 2)) -eq 1 ]] || order=(warren java)
    for tool in "${order[@]}"; do
      local figures consumed steady
      figures="$(run_one "$tool" "$round" "$uri")" || exit 1
      read -r consumed steady <<<"$figures"
      if [[ "$tool" == java ]]; then
        java+=("$consumed") java_steady+=("$steady")
      else
        warren+=("$consumed") warren_steady+=("$steady")
      fi
    done
  done
  verdict "$(median "${java[@]}")" "$(median "${warren[@]}")" \
    "$(median "${java_steady[@]}")" "$(median "${warren_steady[@]}")"
}

usage() {
  [[ $# -eq 0 ]] || echo "stream_agree: $1" >&2
  echo "usage: $0 [--seconds N (20)] [--rounds R (3)] [--rate MSG/S] [--no-pin]" \
    "[--log-dir DIR]" >&2
  exit 2
}

# run_one TOOL ROUND URI: one run on stream stream-agree-ROUND-TOOL; prints "CONSUMED STEADY".
run_one() {
  local tool="$1" round="$2" uri="$3" log="$log_dir/$1-$2.log" command=()
  if [[ "$tool" == java ]]; then
    command=(bash "$REPO_ROOT/bench/stream-java/run.sh")
  else
    mapfile -t command < <(perf_command)
    command+=(stream)
  fi
  [[ -z "$pin" ]] || command=(taskset -c 1 "${command[@]}")
  if ! timeout --kill-after=10 "$((seconds + 120))" "${command[@]}" --uris "$uri" \
      --streams "stream-agree-$round-$tool" "${W5_FLAGS[@]}" --time "$seconds" \
      ${rate:+--rate "$rate"} \
      >"$log" 2>&1 </dev/null; then
    echo "stream_agree: $tool failed in round $round; its output:" >&2
    tail -n 20 "$log" >&2
    return 1
  fi
  local summary steady
  summary="$(grep '^stream-summary ' "$log" | tail -n 1)"
  [[ -n "$summary" ]] || { echo "stream_agree: $tool printed no summary ($log)" >&2; return 1; }
  steady="$(sed -n 's/^\([0-9]*\), published .* consumed \([0-9,]*\) msg\/s.*/\1 \2/p' "$log" \
    | tr -d , | awk -v w="$((seconds / 2))" '$1 > w { print $2 }' | median_stdin)"
  printf 'stream_agree: round %d %-7s %s steady consumed %s msg/s\n' "$round" "$tool:" \
    "$(sed 's/^stream-summary //; s/ *elapsed_s=[^ ]*//' <<<"$summary")" "$steady" >&2
  echo "$(field consumed_rate "$summary") ${steady:-0}"
}

# field NAME LINE: the value of NAME=VALUE in a stream-summary line.
field() {
  sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$2"
}

# verdict JAVA WARREN JAVA_STEADY WARREN_STEADY: PASS when the steady consumed rates are
# within the tolerance.
verdict() {
  awk -v n="$rounds" -v ja="$1" -v wa="$2" -v js="$3" -v ws="$4" -v t="$TOLERANCE_PERCENT" \
    'BEGIN {
      d = ja > 0 ? 100 * (wa - ja) / ja : 1e9
      s = js > 0 ? 100 * (ws - js) / js : 1e9
      pass = (s <= t && s >= -t)
      printf "stream_agree: median of %d round(s): steady consumed rate: Java stream client", n
      printf " %d msg/s, warren perf stream %d msg/s, difference %+.1f%% (%s);", js, ws, s, \
        pass ? "PASS" : "FAIL"
      printf " whole-run averages %d and %d msg/s (%+.1f%%)\n", ja, wa, d
      exit pass ? 0 : 1
    }'
}

median() {
  printf '%s\n' "$@" | median_stdin
}

median_stdin() {
  sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) print 0
    else if (NR % 2) print v[(NR + 1) / 2]
    else printf "%.0f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2
  }'
}

cleanup() {
  stop_rabbitmq
  [[ -z "$work_dir" ]] || rm -rf "$work_dir"
}

main "$@"
