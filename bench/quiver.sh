#!/usr/bin/env bash
# quiver's AMQP 1.0 benchmark (the "AMQP 1.0 Benchmarks" seed): COUNT durable 12-byte messages
# sent and received over AMQP 1.0, the receiver granting 200 link credits, in one run of
# three lines:
#   (i)   RabbitMQ 3.10 from Debian over AMQP 1.0. RabbitMQ 3.10 has only the rabbitmq_amqp1_0
#         plugin (AMQP 1.0 translated onto its AMQP 0.9.1 channels), not RabbitMQ 4's native
#         AMQP 1.0; the plugin takes address format v1 (/amq/queue/NAME).
#   (ii)  Warren over AMQP 1.0 (native, address /queues/NAME), the same command.
#   (iii) Warren over AMQP 0.9.1 on the same workload (`warren perf`, PerfTest's flags).
# The load tool is `warren perf amqp10` (quiver's flags and RESULTS block) for (i) and (ii).
# A durable classic queue `quiver` is declared first over AMQP 0.9.1.
#
#   bench/quiver.sh [--count N] [--only rabbitmq|warren]
#
# Prints each line's sender and receiver rates, end-to-end latency p50/p99 and the broker's
# CPU per message (utime + stime of the broker process, before and after the run), then the
# ratios Warren-1.0 / RabbitMQ-1.0 and Warren-1.0 / Warren-0.9.1, and writes it all to
# bench/results/quiver-STAMP.txt. Each run is bounded by a timeout. Brokers: bench/brokers.sh.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
# shellcheck source=bench/brokers.sh
source "$REPO_ROOT/bench/brokers.sh"
CLOCK_TICKS_PER_S="$(getconf CLK_TCK)"
readonly CLOCK_TICKS_PER_S
readonly QUEUE=quiver
readonly CREDIT=200
readonly BODY=12

count=1000000
only=""
work_dir=""
declare -A cpu_us=()

cleanup() {
  stop_rabbitmq || true
  stop_warren || true
  [[ -z "$work_dir" ]] || rm -rf "$work_dir"
}

usage() {
  echo "usage: bench/quiver.sh [--count N] [--only rabbitmq|warren]" >&2
  exit 2
}

# run_timeout COUNT: seconds a run of COUNT messages may take (at least 120; 1,000 msg/s).
run_timeout() {
  local t=$(($1 / 1000))
  [[ $t -ge 120 ]] || t=120
  echo "$t"
}

# declare_queue URI: a durable classic queue named $QUEUE, over AMQP 0.9.1.
declare_queue() {
  timeout 60 "$warren" perf -h "$1" -u "$QUEUE" -x 1 -y 1 -f persistent --auto-delete false \
    -s "$BODY" -C 1 -D 1 >"$work_dir/declare.log" 2>&1 || {
    echo "quiver: declaring queue $QUEUE at $1 failed:"
    cat "$work_dir/declare.log"
    return 1
  }
}

# measure NAME PID CMD...: runs CMD (bounded), its output in $work_dir/NAME.log and on stdout,
# and the broker's CPU µs per message into cpu_us[NAME].
measure() {
  local name="$1" pid="$2" before after
  shift 2
  before="$(cpu_ticks "$pid")"
  echo "quiver: $name: $*"
  timeout "$(($(run_timeout "$count") + 30))" "$@" 2>&1 | tee "$work_dir/$name.log" \
    | grep -v -E '^ +[0-9]+\.[0-9] ' || true
  after="$(cpu_ticks "$pid")"
  cpu_us[$name]="$(python3 -c "print(f'{($after - $before) / $CLOCK_TICKS_PER_S * 1e6 / $count:.1f}')")"
  echo "quiver: $name: broker CPU ${cpu_us[$name]} µs/message"
  return 0
}

amqp10_run() {
  local name="$1" pid="$2" url="$3"
  shift 3
  measure "$name" "$pid" "$warren" perf amqp10 "$url" --durable --count "$count" \
    --body-size "$BODY" --credit "$CREDIT" --timeout "$(run_timeout "$count")" \
    --json "$work_dir/$name.json" "$@"
}

main() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --count) count="${2:?--count needs N}"; shift 2 ;;
      --only) only="${2:?--only needs rabbitmq or warren}"; shift 2 ;;
      *) usage ;;
    esac
  done
  [[ "$count" =~ ^[0-9]+$ && "$count" -gt 0 ]] || usage
  work_dir="$(mktemp -d "${TMPDIR:-/tmp}/warren-quiver.XXXXXX")"
  trap cleanup EXIT
  warren="$(warren_binary)"
  [[ -x "$warren" ]] || { echo "quiver: no $warren; cargo build --release" >&2; exit 1; }
  local stamp results
  stamp="$(date -u +%Y-%m-%d-%H%M%S)"
  results="$REPO_ROOT/bench/results/quiver-$stamp.txt"
  mkdir -p "$REPO_ROOT/bench/results"
  {
    trap cleanup EXIT
    echo "quiver.sh $(date -u +%FT%TZ): $count durable ${BODY}-byte messages, credit $CREDIT," \
      "$(nproc) cores, $(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
    if [[ "$only" != warren ]]; then
      RABBITMQ_BENCH_PLUGINS=rabbitmq_amqp1_0 start_rabbitmq
      echo "quiver: RabbitMQ $rabbit_version has only the rabbitmq_amqp1_0 plugin (not" \
        "RabbitMQ 4's native AMQP 1.0); its address for queue $QUEUE is /amq/queue/$QUEUE"
      declare_queue "amqp://guest:guest@127.0.0.1:$rabbit_port/%2f"
      amqp10_run rabbitmq-amqp10 "$rabbit_beam_pid" "//127.0.0.1:$rabbit_port//queues/$QUEUE" \
        --address-v1
      stop_rabbitmq
    fi
    if [[ "$only" != rabbitmq ]]; then
      warren_management=off start_warren
      declare_queue "amqp://guest:guest@127.0.0.1:$warren_port/%2f"
      amqp10_run warren-amqp10 "$warren_pid" "//127.0.0.1:$warren_port//queues/$QUEUE"
      measure warren-amqp091 "$warren_pid" "$warren" perf \
        -h "amqp://guest:guest@127.0.0.1:$warren_port/%2f" -x 1 -y 1 -u "$QUEUE" \
        --flag persistent --auto-delete false -s "$BODY" -C "$count" -D "$count" \
        --confirm "$CREDIT" --qos "$CREDIT" --json "$work_dir/warren-amqp091.json"
      stop_warren
    fi
    echo
    table
  } 2>&1 | tee "$results"
  echo "quiver: results in $results"
}

# table: one line per run from the tools' JSON, then the ratios.
table() {
  python3 - "$work_dir" "$count" \
    "${cpu_us[rabbitmq-amqp10]:-}" "${cpu_us[warren-amqp10]:-}" "${cpu_us[warren-amqp091]:-}" <<'EOF'
import json, os, sys
work, count = sys.argv[1], int(sys.argv[2])
cpu = dict(zip(["rabbitmq-amqp10", "warren-amqp10", "warren-amqp091"], sys.argv[3:6]))
rows = {}
for name in cpu:
    path = os.path.join(work, name + ".json")
    if not os.path.exists(path):
        continue
    j = json.load(open(path))
    if "summary" in j:  # warren perf, AMQP 0.9.1
        s = j["summary"]
        lat = s["consumer_latency_us"]
        rows[name] = dict(send=s["sending_rate_avg"], recv=s["receiving_rate_avg"],
                          p50=lat["median"] / 1000, p99=lat["p99"] / 1000,
                          received=s["totals"]["received"], ok=True)
    else:
        rows[name] = dict(send=j["sender_rate"], recv=j["receiver_rate"],
                          p50=j["latency_ms"]["p50"], p99=j["latency_ms"]["p99"],
                          received=j["received"], ok=j["complete"])
labels = {"rabbitmq-amqp10": "RabbitMQ 3.10 AMQP 1.0 (plugin)",
          "warren-amqp10": "Warren AMQP 1.0 (native)",
          "warren-amqp091": "Warren AMQP 0.9.1"}
print(f"{'run':34} {'sender msg/s':>13} {'receiver msg/s':>15} {'p50 ms':>8} {'p99 ms':>8}"
      f" {'broker CPU µs/msg':>18} {'received':>10}")
for name, r in rows.items():
    note = "" if r["ok"] else "  (incomplete)"
    print(f"{labels[name]:34} {r['send']:>13,.0f} {r['recv']:>15,.0f} {r['p50']:>8.2f}"
          f" {r['p99']:>8.2f} {cpu[name] or '?':>18} {r['received']:>10,}{note}")
def ratio(a, b):
    if a in rows and b in rows and rows[b]["recv"] > 0:
        ra = rows[a]["recv"] / rows[b]["recv"]
        sa = rows[a]["send"] / rows[b]["send"] if rows[b]["send"] > 0 else float("nan")
        print(f"{labels[a]} / {labels[b]}: receiver rate x{ra:.2f}, sender rate x{sa:.2f}")
print()
ratio("warren-amqp10", "rabbitmq-amqp10")
ratio("warren-amqp10", "warren-amqp091")
EOF
}

main "$@"
