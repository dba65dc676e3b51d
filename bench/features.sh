#!/usr/bin/env bash
# Routing features against RabbitMQ, in one run (issue 6, point 5; the seed "Feature
# complete" benchmarks): for each broker, RabbitMQ first,
#   types     1 publisher -> 1 queue -> 1 autoack consumer through each exchange type:
#             default, direct, fanout, topic, headers (as fast as the publisher goes)
#   fanout    1 publisher at 1,000 msg/s into a fanout exchange with 10, 50, 100 and 200
#             queues, a consumer on each: the receive rate should be 1,000 x queues
#   hash      a consistent-hash exchange (-t x-consistent-hash, each queue bound with
#             weight 1, a random routing key per message: warren perf -K) over 1, 2, 4, 8
#             and 16 queues with a consumer each, 1 and 10 publishers with confirms (-c 100).
#             The consumers and the publishers are two `warren perf` processes, pinned to
#             cores 0 and 1 (the broker is not pinned): the seed's load ran apart from its
#             broker, and here the tool's 16 consumer connections would otherwise take the
#             publisher's core (see bench/README.md). --hash-layout shared runs them in one
#             unpinned process instead.
#
#   bench/features.sh [--seconds N] [--rounds N] [--only types|fanout|hash]
#                     [--hash-layout split|shared] [--out-dir DIR]
#
# --rounds N (default 1) runs every scenario N times in turn on each broker; the tables and
# charts then give each figure's median over the rounds, so that a slow minute of a shared
# host lands on one round of a point instead of being the point.
#
# The load generator is `warren perf` (PerfTest's flags). RabbitMQ is Debian's
# rabbitmq-server with rabbitmq_consistent_hash_exchange enabled, a private node on a free
# port (bench/brokers.sh); Warren is the release build. Per run it records the sending and
# receiving averages, consumer latency p50/p99 and the broker's CPU per received message.
#
# Writes into --out-dir (default bench/results), with STAMP the start time:
#   features-STAMP.txt     every run's figures, then the tables with Warren/RabbitMQ ratios
#   features-STAMP.csv     broker,scenario,queues,publishers,sent_rate,recv_rate,p50_us,
#                          p99_us,cpu_us_per_msg
#   features-STAMP-fanout.png  receive rate against queues, one line per broker
#   features-STAMP-hash.png    publish rate against queues, one line per broker and
#                              publisher count
# Every process it starts is stopped on every exit path; each run is bounded by -z.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
# shellcheck source=bench/brokers.sh
source "$REPO_ROOT/bench/brokers.sh"
readonly FANOUT_QUEUES=(10 50 100 200)
readonly HASH_QUEUES=(1 2 4 8 16)
readonly HASH_PUBLISHERS=(1 10)
readonly FANOUT_RATE=1000
readonly RUN_GRACE_S=60 # a run may take this long beyond its -z before it is killed

seconds=15
rounds=1
only=""
hash_layout=split
out_dir="$REPO_ROOT/bench/results"
work_dir=""
summary=""
csv=""
perf=""

main() {
  parse_args "$@"
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  work_dir="$(mktemp -d -t warren-features.XXXXXX)"
  mkdir -p "$out_dir"
  local stamp
  stamp="$(date +%Y-%m-%d-%H%M%S)"
  summary="$out_dir/features-$stamp.txt"
  csv="$out_dir/features-$stamp.csv"
  say "features: ${seconds}s per run, $rounds round(s), hash layout $hash_layout; $(date -Is);" \
    "$(nproc) cores"
  perf="$(warren_binary)"
  if [[ ! -x "$perf" ]]; then
    (cd "$REPO_ROOT" && cargo build --release) || exit 1
  fi
  echo "broker,scenario,queues,publishers,sent_rate,recv_rate,p50_us,p99_us,cpu_us_per_msg" \
    >"$csv"
  export RABBITMQ_BENCH_PLUGINS=rabbitmq_consistent_hash_exchange
  start_rabbitmq || exit 1
  say "rabbitmq $rabbit_version"
  local round
  for ((round = 1; round <= rounds; round++)); do
    scenarios rabbitmq "amqp://guest:guest@127.0.0.1:$rabbit_port/%2f" "$rabbit_beam_pid"
  done
  stop_rabbitmq
  start_warren || exit 1
  for ((round = 1; round <= rounds; round++)); do
    scenarios warren "amqp://guest:guest@127.0.0.1:$warren_port/%2f" "$warren_pid"
  done
  stop_warren
  python3 "$REPO_ROOT/bench/features_report.py" "$csv" | tee -a "$summary"
  charts "$stamp"
  say "features: figures in $summary, rows in $csv"
}

parse_args() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --seconds) seconds="$2"; shift 2 ;;
      --rounds) rounds="$2"; shift 2 ;;
      --only) only="$2"; shift 2 ;;
      --hash-layout) hash_layout="$2"; shift 2 ;;
      --out-dir) out_dir="$2"; shift 2 ;;
      -h|--help) sed -n '2,30p' "${BASH_SOURCE[0]}"; exit 0 ;;
      *) echo "features: unknown argument $1 (see --help)"; exit 2 ;;
    esac
  done
  if [[ "$hash_layout" != split && "$hash_layout" != shared ]]; then
    echo "features: --hash-layout takes split or shared, not '$hash_layout'"
    exit 2
  fi
  if [[ ! "$rounds" =~ ^[1-9][0-9]*$ ]]; then
    echo "features: --rounds takes a whole number of at least 1, not '$rounds'"
    exit 2
  fi
}

# scenarios BROKER URI PID
scenarios() {
  local broker="$1" uri="$2" pid="$3" type queues publishers
  if [[ -z "$only" || "$only" == types ]]; then
    for type in default direct fanout topic headers; do
      # through the default exchange the routing key is the queue's name
      local exchange=(-e "features-$type" -t "$type" -k "features.$type")
      [[ "$type" != default ]] || exchange=(-e "")
      run "$broker" "$pid" "type-$type" 1 1 -h "$uri" -x 1 -y 1 "${exchange[@]}" \
        -u "features-$type-q" -a
    done
  fi
  if [[ -z "$only" || "$only" == fanout ]]; then
    for queues in "${FANOUT_QUEUES[@]}"; do
      run "$broker" "$pid" fanout "$queues" 1 -h "$uri" -x 1 -y "$queues" \
        -e "features-fanout-$queues" -t fanout -r "$FANOUT_RATE" -a
    done
  fi
  if [[ -z "$only" || "$only" == hash ]]; then
    for publishers in "${HASH_PUBLISHERS[@]}"; do
      for queues in "${HASH_QUEUES[@]}"; do
        local name="features-hash-$queues-$publishers"
        local shape=(-h "$uri" -e "$name" -t x-consistent-hash -k 1 --queue-pattern "$name-%d"
          --queue-pattern-from 1 --queue-pattern-to "$queues")
        if [[ "$hash_layout" == split ]]; then
          run_split "$broker" "$pid" hash "$queues" "$publishers" "${shape[@]}" -- \
            -x "$publishers" -K -c 100
        else
          run "$broker" "$pid" hash "$queues" "$publishers" "${shape[@]}" -x "$publishers" \
            -y "$queues" -K -c 100 -a
        fi
      done
    done
  fi
}

# run BROKER PID SCENARIO QUEUES PUBLISHERS PERF_ARGS...: one bounded warren perf run; its
# summary, with the broker's CPU per received message, becomes a CSV row.
run() {
  local broker="$1" pid="$2" scenario="$3" queues="$4" publishers="$5"
  shift 5
  local json="$work_dir/run.json" before after
  say "== $broker $scenario queues=$queues publishers=$publishers: warren perf $*"
  before="$(cpu_ticks "$pid")"
  if ! timeout --kill-after=5 $((seconds + RUN_GRACE_S)) "$perf" perf "$@" -z "$seconds" \
      --json "$json" >"$work_dir/run.log" 2>&1; then
    failed_row "$broker" "$scenario" "$queues" "$publishers" "$work_dir/run.log"
    return 0
  fi
  after="$(cpu_ticks "$pid")"
  csv_row "$json" "$json" "" "$broker" "$scenario" "$queues" "$publishers" \
    "$((after - before))"
}

# failed_row BROKER SCENARIO QUEUES PUBLISHERS LOG...: reports a failed run with the last lines
# of its logs, and gives it an empty CSV row.
failed_row() {
  local broker="$1" scenario="$2" queues="$3" publishers="$4"
  shift 4
  say "   run failed; last lines:"
  tail -n 5 "$@" | tee -a "$summary"
  echo "$broker,$scenario,$queues,$publishers,,,,," >>"$csv"
}

# csv_row CONSUMERS_JSON PUBLISHERS_JSON RECV_SECONDS BROKER SCENARIO QUEUES PUBLISHERS TICKS:
# one CSV row from warren perf's --json summaries (the same file when one process did both):
# the publishers' sending average; the consumers' receiving average, or with RECV_SECONDS
# their messages over those seconds; their latency; the broker's CPU per received message.
csv_row() {
  python3 - "$@" "$(getconf CLK_TCK)" >>"$csv" <<'PY'
import json, sys
consumers, publishers, seconds, broker, scenario, queues, pubs, ticks, hz = sys.argv[1:]
c = json.load(open(consumers))["summary"]
p = json.load(open(publishers))["summary"]
received = c["totals"]["received"]
recv_rate = round(received / int(seconds)) if seconds else c["receiving_rate_avg"]
cpu_us = int(ticks) / int(hz) * 1e6 / received if received else 0
lat = c["consumer_latency_us"]
print(f"{broker},{scenario},{queues},{pubs},{p['sending_rate_avg']},"
      f"{recv_rate},{lat['median']},{lat['p99']},{cpu_us:.2f}")
PY
  say "   $(tail -n 1 "$csv")"
}

# run_split BROKER PID SCENARIO QUEUES PUBLISHERS SHAPE_ARGS... -- PUBLISHER_ARGS...: the
# consumers (one per queue, autoack) in one bounded warren perf process on core 0, started a
# second before the publishers and left running two seconds past them; the publishers run for
# --seconds in a second process on core 1. Rates are over the publishers' seconds; latency is the consumers'.
run_split() {
  local broker="$1" pid="$2" scenario="$3" queues="$4" publishers="$5"
  shift 5
  local shape=() consumer_pin=() publisher_pin=()
  while [[ $# -gt 0 && "$1" != -- ]]; do shape+=("$1"); shift; done
  shift
  if (($(nproc) >= 2)); then
    consumer_pin=(taskset -c 0)
    publisher_pin=(taskset -c 1)
  fi
  local consumers_json="$work_dir/consumers.json" publishers_json="$work_dir/publishers.json"
  local before after consumer_pid ok=1
  say "== $broker $scenario queues=$queues publishers=$publishers:" \
    "warren perf ${shape[*]} -x 0 -y $queues -a (core 0) | -y 0 $* (core 1)"
  rm -f "$consumers_json" "$publishers_json"
  before="$(cpu_ticks "$pid")"
  timeout --kill-after=5 $((seconds + 3 + RUN_GRACE_S)) "${consumer_pin[@]}" "$perf" perf \
    "${shape[@]}" -x 0 -y "$queues" -a -z $((seconds + 3)) --json "$consumers_json" \
    >"$work_dir/consumers.log" 2>&1 &
  consumer_pid=$!
  sleep 1 # the consumers' queues are declared and bound
  if ! timeout --kill-after=5 $((seconds + RUN_GRACE_S)) "${publisher_pin[@]}" "$perf" perf \
      "${shape[@]}" -y 0 "$@" -z "$seconds" --json "$publishers_json" \
      >"$work_dir/publishers.log" 2>&1; then
    ok=""
  fi
  wait "$consumer_pid" || ok=""
  after="$(cpu_ticks "$pid")"
  if [[ -z "$ok" ]]; then
    failed_row "$broker" "$scenario" "$queues" "$publishers" "$work_dir/consumers.log" \
      "$work_dir/publishers.log"
    return 0
  fi
  csv_row "$consumers_json" "$publishers_json" "$seconds" "$broker" "$scenario" "$queues" \
    "$publishers" "$((after - before))"
}

charts() {
  local stamp="$1"
  chart_tools features "$csv" || return 0
  local fanout="$work_dir/fanout.csv" hash="$work_dir/hash.csv"
  python3 - "$csv" "$fanout" "$hash" "$REPO_ROOT/bench" <<'PY'
import sys
sys.path.insert(0, sys.argv[4])
from features_report import median_rows, read_rows
rows = median_rows(read_rows(sys.argv[1]))
with open(sys.argv[2], "w") as f:
    f.write("queues,recv_rate,broker\n")
    for r in rows:
        if r["scenario"] == "fanout" and r["recv_rate"]:
            f.write(f"{r['queues']},{r['recv_rate']},{r['broker']}\n")
with open(sys.argv[3], "w") as f:
    f.write("queues,sent_rate,series\n")
    for r in rows:
        if r["scenario"] == "hash" and r["sent_rate"]:
            f.write(f"{r['queues']},{r['sent_rate']},{r['broker']} {r['publishers']} pub\n")
PY
  "$plot" --csv "$fanout" --x queues --y recv_rate --series broker \
    --title "Fanout at $FANOUT_RATE msg/s: messages received per second" \
    --x-label "queues (a consumer each)" --y-label "msg/s received" \
    --out "$out_dir/features-$stamp-fanout.png" || true
  "$plot" --csv "$hash" --x queues --y sent_rate --series series \
    --title "Consistent-hash exchange, confirms: messages published per second" \
    --x-label "queues" --y-label "msg/s published" \
    --out "$out_dir/features-$stamp-hash.png" || true
}

cleanup() {
  stop_warren || true
  stop_rabbitmq || true
  [[ -z "$work_dir" ]] || rm -rf "$work_dir"
}

main "$@"
