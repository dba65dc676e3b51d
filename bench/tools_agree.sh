#!/usr/bin/env bash
# Checks that `warren perf` measures what RabbitMQ PerfTest measures: runs each standard
# workload given (default: a b) against RabbitMQ with each tool, --rounds times, the two tools
# taking turns (PerfTest first in odd rounds, warren perf first in even ones) so that a change
# in the machine's load falls on both; the broker is pinned to core 0 and the tool to core 1
# (on 2 cores an unpinned PerfTest takes CPU the broker would use, which is exactly the
# difference being measured). It fails when the medians of the two tools' receiving averages
# differ by more than 15%.
#
#   bench/tools_agree.sh [--seconds N] [--rounds R] [--log-dir DIR] [WORKLOAD...]
#
# Per run it prints the receiving average, the steady rate (the median of the per-interval
# receiving rates after the first WARM_UP_S seconds, where PerfTest's JVM is still compiling)
# and the other processes' load from compare.sh (above 0.2 cores the machine was not quiet).
# Each compare.sh run's output and logs go to a temporary directory that is removed at the
# end, or to --log-dir DIR (kept: WORKLOAD-TOOL-ROUND.out and WORKLOAD-TOOL-ROUND/).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly TOLERANCE_PERCENT=15
readonly WARM_UP_S=5

seconds=30
rounds=3
work=""
keep="" # set: work is the --log-dir, kept

main() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --seconds) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || usage "--seconds needs a whole number"
        seconds="$2"; shift 2 ;;
      --rounds) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || usage "--rounds needs a whole number"
        rounds="$2"; shift 2 ;;
      --log-dir) [[ -n "${2:-}" ]] || usage "--log-dir needs a directory"
        keep="$2"; shift 2 ;;
      -h|--help) usage ;;
      -*) usage "unknown option '$1'" ;;
      *) break ;;
    esac
  done
  local workloads=("$@")
  [[ ${#workloads[@]} -gt 0 ]] || workloads=(a b)
  command -v taskset >/dev/null \
    || { echo "tools_agree: taskset missing (apt-get install util-linux)" >&2; exit 2; }
  if [[ -n "$keep" ]]; then
    work="$keep"
    mkdir -p "$work"
  else
    work="$(mktemp -d -t tools-agree.XXXXXX)"
    trap 'rm -rf "$work"' EXIT
  fi
  echo "tools_agree: workloads ${workloads[*]}, $rounds round(s) of ${seconds}s per tool," \
    "RabbitMQ pinned to core 0, the tool to core 1"
  local status=0 workload
  for workload in "${workloads[@]}"; do
    agree "$workload" || status=1
  done
  return "$status"
}

usage() {
  [[ $# -eq 0 ]] || echo "tools_agree: $1" >&2
  echo "usage: $0 [--seconds N (30)] [--rounds R (3)] [--log-dir DIR] [WORKLOAD... (a b)]" >&2
  exit 2
}

# agree WORKLOAD: the rounds of one workload and its verdict.
agree() {
  local workload="$1" round tool figures
  local -a perftest_avg=() perftest_steady=() warren_avg=() warren_steady=()
  for ((round = 1; round <= rounds; round++)); do
    local order=(perftest warren-perf)
    [[ $((round % 2)) -eq 1 ]] || order=(warren-perf perftest)
    for tool in "${order[@]}"; do
      figures="$(run_one "$workload" "$tool" "$round")" || return 1
      local avg steady other
      read -r avg steady other <<<"$figures"
      printf 'tools_agree: workload %s round %d %-12s receiving avg %7s msg/s, steady %7s' \
        "$workload" "$round" "$tool:" "$avg" "$steady"
      printf ' msg/s, other processes %s cores%s\n' "$other" \
        "$(awk -v o="$other" 'BEGIN { if (o > 0.2) printf " (not quiet)" }')"
      if [[ "$tool" == perftest ]]; then
        perftest_avg+=("$avg") perftest_steady+=("$steady")
      else
        warren_avg+=("$avg") warren_steady+=("$steady")
      fi
    done
  done
  verdict "$workload" "$(median "${perftest_avg[@]}")" "$(median "${warren_avg[@]}")" \
    "$(median "${perftest_steady[@]}")" "$(median "${warren_steady[@]}")"
}

# run_one WORKLOAD TOOL ROUND: one pinned compare.sh run on RabbitMQ; prints "AVG STEADY
# OTHER": the receiving average, the steady rate and the other processes' cores.
run_one() {
  local workload="$1" tool="$2" dir="$work/$1-$2-$3"
  if ! WARREN_BENCH_LOG_DIR="$dir" "$REPO_ROOT/bench/compare.sh" --pin --tool "$tool" \
      --only rabbitmq --workload "$workload" --seconds "$seconds" >"$dir.out" 2>&1; then
    echo "tools_agree: compare.sh failed for $tool on workload $workload:" >&2
    tail -n 20 "$dir.out" >&2
    return 1
  fi
  local avg other steady
  avg="$(sed -n 's/^rabbitmq: receiving rate avg: *\([0-9]*\) msg\/s/\1/p' "$dir.out")"
  other="$(sed -n 's/^rabbitmq: other processes: *\([0-9.]*\) cores.*/\1/p' "$dir.out")"
  steady="$(sed -n 's/.*, time \([0-9.]*\) s, .*received: \([0-9]*\) msg\/s.*/\1 \2/p' \
    "$dir/$tool-rabbitmq.log" | awk -v w="$WARM_UP_S" '$1 > w { print $2 }' | median_stdin)"
  echo "${avg:-0} ${steady:-0} ${other:-?}"
}

# verdict WORKLOAD PERFTEST_AVG WARREN_AVG PERFTEST_STEADY WARREN_STEADY: PASS when the
# medians of the receiving averages are within the tolerance.
verdict() {
  local workload="$1"
  awk -v n="$rounds" -v w="$workload" -v pa="$2" -v wa="$3" -v ps="$4" -v ws="$5" \
    -v t="$TOLERANCE_PERCENT" 'BEGIN {
      d = pa > 0 ? 100 * (wa - pa) / pa : 1e9
      s = ps > 0 ? 100 * (ws - ps) / ps : 1e9
      pass = (d <= t && d >= -t)
      printf "tools_agree: workload %s, median of %d round(s): PerfTest %d msg/s,", w, n, pa
      printf " warren perf"
      printf " %d msg/s, difference %+.1f%% (%s); steady rates %d and %d msg/s (%+.1f%%)\n", \
        wa, d, pass ? "PASS" : "FAIL", ps, ws, s
      exit pass ? 0 : 1
    }'
}

# median NUMBERS...: their median (the mean of the middle two for an even count).
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

main "$@"
