#!/usr/bin/env bash
# bench/tls.sh [DURATION_S] [rabbitmq|warren ...]: workload a (PerfTest -x 1 -y 1 -s 12 -a)
# over amqps://, RabbitMQ over TLS then Warren over TLS (default both), each started by
# tests/interop/tls/run.sh's start_tls_broker with the same rabbitmq.conf. Prints msg/s, the
# broker's CPU per message (utime + stime from /proc/PID/stat) and the ratio.
# PerfTest trusts any server certificate for an amqps:// URI (it calls useSslProtocol()
# without a trust manager), so no trust store is needed; the client sends no certificate and
# logs in with PLAIN as guest. `warren perf` takes no amqps:// URI, so PerfTest only.
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)" || exit 1
work_dir="$(mktemp -d /tmp/warren-bench-tls.XXXXXX)"
# shellcheck source=../tests/interop/tls/run.sh
source "$REPO_ROOT/tests/interop/tls/run.sh"
readonly DURATION_S="${1:-15}"
shift || true
brokers=("${@:-rabbitmq warren}")
read -ra brokers <<<"${brokers[*]}"
CLOCK_TICKS_PER_S="$(getconf CLK_TCK)"
results=()

# measure KIND PID JARS: one PerfTest run against the broker; appends "KIND RATE US_PER_MSG".
measure() {
  local kind="$1" pid="$2" jars="$3" log="$work_dir/perftest-$1.log"
  local before after
  before="$(cpu_ticks "$pid")" || return 1
  timeout --kill-after=10 "$((DURATION_S + 60))" java -Xmx1g -cp "$jars/*" \
    com.rabbitmq.perf.PerfTest --uri "amqps://guest:guest@localhost:$amqps_port" \
    -x 1 -y 1 -s 12 -a -z "$DURATION_S" >"$log" 2>&1 </dev/null
  after="$(cpu_ticks "$pid")" || { echo "$kind: broker died"; return 1; }
  local received
  received="$(sed -n 's/.*receiving rate avg: \([0-9][0-9]*\) msg\/s.*/\1/p' "$log" | tail -n 1)"
  [[ -n "$received" ]] || { echo "$kind: PerfTest printed no summary:"; tail -n 20 "$log"
    return 1; }
  local us
  us="$(awk -v t="$((after - before))" -v hz="$CLOCK_TICKS_PER_S" -v r="$received" \
    -v d="$DURATION_S" 'BEGIN { printf "%.2f", t / hz * 1e6 / (r * d) }')"
  grep 'sending rate avg\|receiving rate avg' "$log" | sed "s/^/$kind: /"
  echo "$kind: broker CPU per message: $us us"
  results+=("$kind $received $us")
}

run_one() {
  local kind="$1" pid
  start_tls_broker "$kind" || return 1
  if [[ "$kind" == rabbitmq ]]; then pid="$rabbit_beam_pid"; else pid="$warren_pid"; fi
  echo "$kind over TLS: amqps://localhost:$amqps_port, pid $pid, ${DURATION_S}s"
  measure "$kind" "$pid" "$jars"
  local status=$?
  stop_warren
  stop_rabbitmq
  return "$status"
}

main_bench() {
  trap cleanup EXIT
  jars="$(bash "$REPO_ROOT/tests/interop/perftest.sh" --install-only)" || exit 1
  local status=0 kind
  for kind in "${brokers[@]}"; do
    run_one "$kind" || status=1
  done
  printf '%s\n' "${results[@]}" | awk '
    { rate[$1] = $2; cpu[$1] = $3 }
    END {
      if (("warren" in rate) && ("rabbitmq" in rate) && rate["rabbitmq"] > 0 && cpu["rabbitmq"] > 0)
        printf "ratio warren/rabbitmq over TLS: receive rate %.2f, CPU per message %.2f\n",
          rate["warren"] / rate["rabbitmq"], cpu["warren"] / cpu["rabbitmq"]
    }'
  return "$status"
}

main_bench
