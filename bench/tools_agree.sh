#!/usr/bin/env bash
# Checks that `warren perf` measures what RabbitMQ PerfTest measures: runs each standard
# workload given (default: a b) against RabbitMQ twice, once with each tool, with the broker
# pinned to core 0 and the tool to core 1 (on 2 cores an unpinned PerfTest takes CPU the
# broker would use, which is exactly the difference being measured), and fails when the
# receiving averages differ by more than 15%.
#
#   bench/tools_agree.sh [--seconds N] [WORKLOAD...]
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly TOLERANCE_PERCENT=15

seconds=30
if [[ "${1:-}" == --seconds ]]; then
  seconds="${2:?--seconds needs a number}"
  shift 2
fi
workloads=("$@")
[[ ${#workloads[@]} -gt 0 ]] || workloads=(a b)
command -v taskset >/dev/null || { echo "tools_agree: taskset missing (apt-get install util-linux)" >&2; exit 2; }

status=0
for workload in "${workloads[@]}"; do
  declare -A rate=()
  for tool in perftest warren-perf; do
    log="$(mktemp -t tools-agree.XXXXXX)"
    "$REPO_ROOT/bench/compare.sh" --pin --tool "$tool" --only rabbitmq \
      --workload "$workload" --seconds "$seconds" >"$log" 2>&1 || {
      echo "tools_agree: compare.sh failed for $tool on workload $workload:" >&2
      tail -n 20 "$log" >&2
      exit 1
    }
    rate[$tool]="$(sed -n 's/^rabbitmq: receiving rate avg: *\([0-9]*\) msg\/s/\1/p' "$log")"
    grep -E "^rabbitmq: (receiving rate|broker CPU|load tool CPU)" "$log" | sed "s/^/$tool: /"
    rm -f "$log"
  done
  verdict="$(awk -v p="${rate[perftest]}" -v w="${rate[warren-perf]}" -v t="$TOLERANCE_PERCENT" 'BEGIN {
    d = p > 0 ? 100 * (w - p) / p : 1e9
    printf "%s %.1f", (d <= t && d >= -t) ? "PASS" : "FAIL", d }')"
  echo "tools_agree: workload $workload: PerfTest ${rate[perftest]} msg/s, warren perf ${rate[warren-perf]} msg/s, difference ${verdict#* }% (${verdict%% *})"
  [[ "${verdict%% *}" == PASS ]] || status=1
  unset rate
done
exit "$status"
