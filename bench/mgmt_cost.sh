#!/usr/bin/env bash
# What the management plugin costs (issue 7, point 5): workload (a) of the core issue
# (1 producer, 1 autoack consumer, 12-byte bodies, as fast as they go) against Warren with
# its HTTP API and Prometheus listeners off, then on while they are watched as an operator
# watches them: Prometheus scraped every second (/metrics and /metrics/per-object) and the
# web UI's overview open (it asks /api/overview, /api/nodes and
# /api/health/checks/alarms every 3 s; here /api/queues too, as the queues page does).
# The two take turns for --rounds rounds, each run on a fresh broker; the verdict compares
# the medians of the receive rates: "on" must stay within 5% of "off".
#
#   bench/mgmt_cost.sh [--seconds N] [--rounds N] [--out-dir DIR]
#
# Writes into --out-dir (default bench/results), with STAMP the start time:
#   mgmt-cost-STAMP.txt  every run (sending and receiving averages, scrapes answered), the
#                        medians and the verdict
#   mgmt-cost-STAMP.csv  round,management,sent_rate,recv_rate,scrapes
# Every process it starts (broker, load tool, poller) is stopped on every exit path.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
# shellcheck source=bench/brokers.sh
source "$REPO_ROOT/bench/brokers.sh"
readonly RUN_GRACE_S=60
readonly ALLOWED_LOSS_PERCENT=5

seconds=30
rounds=3
out_dir="$REPO_ROOT/bench/results"
work_dir=""
summary=""
csv=""
poller_pid=""

main() {
  parse_args "$@"
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  work_dir="$(mktemp -d -t warren-mgmt-cost.XXXXXX)"
  mkdir -p "$out_dir"
  local stamp round
  stamp="$(date +%Y-%m-%d-%H%M%S)"
  summary="$out_dir/mgmt-cost-$stamp.txt"
  csv="$out_dir/mgmt-cost-$stamp.csv"
  say "mgmt-cost: workload (a), ${seconds}s per run, $rounds rounds; $(date -Is)"
  echo "round,management,sent_rate,recv_rate,scrapes" >"$csv"
  for round in $(seq 1 "$rounds"); do
    run_once "$round" off
    run_once "$round" on
  done
  python3 - "$csv" "$ALLOWED_LOSS_PERCENT" <<'PY' | tee -a "$summary"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
allowed = float(sys.argv[2])
med = {}
for mode in ("off", "on"):
    rates = [float(r["recv_rate"]) for r in rows if r["management"] == mode and r["recv_rate"]]
    med[mode] = statistics.median(rates) if rates else 0.0
    print(f"management {mode}: median receive rate {med[mode]:,.0f} msg/s over {len(rates)} runs")
scrapes = [int(r["scrapes"]) for r in rows if r["management"] == "on" and r["scrapes"]]
print(f"scrapes and UI polls answered per 'on' run: {scrapes}")
if med["off"] <= 0:
    print("verdict: no figure with management off")
    sys.exit(1)
change = (med["on"] - med["off"]) / med["off"] * 100
verdict = "PASS" if change >= -allowed else "FAIL"
print(f"verdict: {verdict}: with management watched the rate is {change:+.1f}% "
      f"(allowed: -{allowed:.0f}%)")
PY
  say "mgmt-cost: figures in $summary, rows in $csv"
}

parse_args() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --seconds) seconds="$2"; shift 2 ;;
      --rounds) rounds="$2"; shift 2 ;;
      --out-dir) out_dir="$2"; shift 2 ;;
      -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}"; exit 0 ;;
      *) echo "mgmt-cost: unknown argument $1 (see --help)"; exit 2 ;;
    esac
  done
}

# run_once ROUND on|off: a fresh broker, workload (a), and with management on the poller.
run_once() {
  local round="$1" mode="$2" json="$work_dir/run.json" scrapes=""
  warren_management="$mode"
  rm -rf "$work_dir/warren"
  start_warren || exit 1
  if [[ "$mode" == on ]]; then
    poll "$((seconds + 5))" >"$work_dir/poll.log" 2>&1 &
    poller_pid=$!
  fi
  if ! timeout --kill-after=5 $((seconds + RUN_GRACE_S)) "$(warren_binary)" perf \
      -h "amqp://guest:guest@127.0.0.1:$warren_port/%2f" -x 1 -y 1 -s 12 -a -z "$seconds" \
      --json "$json" >"$work_dir/perf.log" 2>&1; then
    say "   round $round, management $mode: the run failed; last lines:"
    tail -n 5 "$work_dir/perf.log" | tee -a "$summary"
    echo "$round,$mode,,," >>"$csv"
  else
    if [[ -n "$poller_pid" ]]; then
      kill "$poller_pid" 2>/dev/null || true
      wait "$poller_pid" 2>/dev/null || true
      poller_pid=""
      scrapes="$(grep -c '^ok' "$work_dir/poll.log" || true)"
      if grep -q '^error' "$work_dir/poll.log"; then
        say "   poller errors: $(grep '^error' "$work_dir/poll.log" | sort | uniq -c | head -3)"
      fi
    fi
    python3 - "$json" "$round" "$mode" "$scrapes" >>"$csv" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
print(f"{sys.argv[2]},{sys.argv[3]},{s['sending_rate_avg']},{s['receiving_rate_avg']},{sys.argv[4]}")
PY
    say "   round $round, management $mode: $(tail -n 1 "$csv")"
  fi
  stop_warren
}

# poll SECONDS: Prometheus every second, the UI's requests every 3 s; one line a request.
poll() {
  python3 - "$1" "$warren_http_port" "$warren_prometheus_port" <<'PY'
import base64, sys, time, urllib.request
duration, http_port, prom_port = float(sys.argv[1]), sys.argv[2], sys.argv[3]
auth = "Basic " + base64.b64encode(b"guest:guest").decode()
def get(url, authorize):
    request = urllib.request.Request(url)
    if authorize:
        request.add_header("Authorization", auth)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            response.read()
            print("ok", url, flush=True)
    except Exception as error:  # report and go on: the run measures the broker
        print("error", url, error, flush=True)
api = f"http://127.0.0.1:{http_port}"
prom = f"http://127.0.0.1:{prom_port}"
start = time.monotonic()
tick = 0
while time.monotonic() - start < duration:
    get(prom + "/metrics", False)
    get(prom + "/metrics/per-object", False)
    if tick % 3 == 0:
        for path in ("/api/overview", "/api/nodes", "/api/health/checks/alarms", "/api/queues"):
            get(api + path, True)
    tick += 1
    time.sleep(max(0.0, start + tick - time.monotonic()))
PY
}

cleanup() {
  if [[ -n "$poller_pid" ]]; then
    kill "$poller_pid" 2>/dev/null || true
  fi
  stop_warren || true
  [[ -z "$work_dir" ]] || rm -rf "$work_dir"
}

main "$@"
