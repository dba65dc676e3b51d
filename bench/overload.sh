#!/usr/bin/env bash
# Overload: what each broker does when pushed past its limit (the seed "RabbitMQ Performance
# Measurements, part 1"), and its rate-versus-latency curve ("part 2"). RabbitMQ first, then
# Warren, in one run, with the same `warren perf` load. See bench/README.md.
#
#   bench/overload.sh [--seconds N] [--backlog-rate MSG_S] [--memory-budget-mib MIB]
#                     [--only rabbitmq|warren] [--skip-sweep] [--skip-host-probe]
#                     [--out-dir DIR]
#
# First, with no broker running, the host probe (bench/hostprobe): one thread walks a 16 MiB
# buffer for --seconds and counts its walks per second. Its work never changes, so its
# seconds outside ±15% of their median are the machine's own unsteadiness, the reference for
# the calm verdicts below (skipped with --skip-host-probe).
#
# Per broker, each phase on a freshly started broker:
#   calm     1 producer publishing as fast as it can, 1 autoack consumer, 12-byte bodies, for
#            --seconds (default 180). After the first 10 s every per-second send and receive
#            rate should stay within 15% of its median, the broker's RSS should show no upward
#            trend beyond 10%, and consumer latency should stay bounded (p50/p99 per second).
#   backlog  10 producers into one durable queue (persistent messages, together
#            --backlog-rate msg/s, default 50000) and 1 consumer limited with -R to a tenth of
#            that (prefetch 200), for --seconds: the queue grows on disk; the broker's RSS
#            should stay within --memory-budget-mib (default 1024), which both brokers get as
#            their memory high watermark.
#   sweep    `warren perf --sweep`: 1 producer, 1 autoack consumer, 12-byte bodies, the publish
#            rate stepped from 10% to 110% of the measured maximum, latency percentiles per step.
# The broker's RSS (for RabbitMQ its beam.smp) and the queue's ready count are sampled once a
# second throughout. Every load run is bounded in time; brokers and samplers are stopped on
# every exit path.
#
# Writes into --out-dir (default bench/results), with STAMP the start time:
#   overload-STAMP.txt               parameters, per-phase verdicts and figures
#   overload-STAMP-rss.csv           broker,second,phase,rss_mib,messages_ready (second
#                                    from each phase's start)
#   overload-STAMP-rss-run.csv       the same, second counted across a broker's phases
#   overload-STAMP-rss.png           RSS over time, one line per broker, phases marked
#   overload-STAMP-ready.png         ready messages over time
#   overload-STAMP-calm.png          calm: send/receive rates and latency percentiles over
#                                    time, RabbitMQ and Warren side by side (warren perf chart)
#   overload-STAMP-backlog.png       the same for the backlog phase
#   overload-STAMP-sweep.png         latency (p50, p99) against attempted rate, both brokers
#   overload-STAMP-sweep.csv         broker,attempted_rate,sent_rate,received_rate,p50_ms,p99_ms
#   overload-STAMP-<broker>-<phase>.json  the warren perf reports
#   overload-STAMP-host.json         the host probe's walks per second
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
# shellcheck source=bench/brokers.sh
source "$REPO_ROOT/bench/brokers.sh"
readonly SAMPLER="$REPO_ROOT/bench/sample_broker.py"
readonly REPORT="$REPO_ROOT/bench/overload_report.py"
readonly CALM_QUEUE=overload-calm
readonly BACKLOG_QUEUE=overload-backlog
readonly BACKLOG_PRODUCERS=10
readonly BACKLOG_PREFETCH=200
# Slack on top of a phase's own length before its load run is stopped.
readonly PHASE_SLACK_S=60
# The sweep measures the maximum (about 10 s) and runs 11 steps of 5 s.
readonly SWEEP_TIMEOUT_S=240

seconds=180
backlog_rate=50000
memory_budget_mib=1024
only=""
skip_sweep=""
skip_host_probe=""
out_dir="$REPO_ROOT/bench/results"
work_dir=""
warren_config=""
stamp=""
csv=""
summary=""

main() {
  parse_args "$@"
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  work_dir="$(mktemp -d -t warren-overload.XXXXXX)"
  # The backlog phase writes at most --backlog-rate messages of ~100 bytes on disk a second.
  require_free_mib overload $((backlog_rate * seconds / 10000 + 2048))
  mkdir -p "$out_dir"
  stamp="$(date +%Y-%m-%d-%H%M%S)"
  csv="$out_dir/overload-$stamp-rss.csv"
  summary="$out_dir/overload-$stamp.txt"
  echo "broker,second,phase,rss_mib,messages_ready" >"$csv"
  : >"$summary"
  say "overload: phases of ${seconds}s; backlog: $BACKLOG_PRODUCERS producers at" \
    "$backlog_rate msg/s together, consumer at $((backlog_rate / 10)) msg/s;" \
    "memory budget ${memory_budget_mib} MiB"
  perf_binary
  local status=0 broker
  [[ -n "$skip_host_probe" ]] || host_probe || status=1
  for broker in rabbitmq warren; do
    [[ -z "$only" || "$only" == "$broker" ]] || continue
    run_phase "$broker" calm || status=1
    run_phase "$broker" backlog || status=1
    [[ -n "$skip_sweep" ]] || run_phase "$broker" sweep || status=1
  done
  python3 "$REPORT" --prefix "$out_dir/overload-$stamp" --rss-csv "$csv" \
    --memory-budget-mib "$memory_budget_mib" | tee -a "$summary" || status=1
  draw_charts || status=1
  say "overload: results in $out_dir/overload-$stamp*"
  return "$status"
}

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  [[ $# -eq 0 ]] || echo "overload: $*" >&2
  exit 2
}

parse_args() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --seconds) seconds="$(positive "$1" "${2:-}")"; shift 2 ;;
      --backlog-rate) backlog_rate="$(positive "$1" "${2:-}")"; shift 2 ;;
      --memory-budget-mib) memory_budget_mib="$(positive "$1" "${2:-}")"; shift 2 ;;
      --only)
        only="${2:-}"
        [[ "$only" == rabbitmq || "$only" == warren ]] || usage "--only needs rabbitmq or warren"
        shift 2 ;;
      --skip-sweep) skip_sweep=1; shift ;;
      --skip-host-probe) skip_host_probe=1; shift ;;
      --out-dir) out_dir="${2:-}"; [[ -n "$out_dir" ]] || usage "--out-dir needs a directory"; shift 2 ;;
      -h|--help) usage ;;
      *) usage "unknown argument '$1'" ;;
    esac
  done
  [[ $seconds -gt 20 ]] || usage "--seconds must be above 20 (the first 10 s are warm-up)"
  [[ $backlog_rate -ge $((BACKLOG_PRODUCERS * 10)) ]] \
    || usage "--backlog-rate must be at least $((BACKLOG_PRODUCERS * 10))"
}

# positive FLAG VALUE: prints VALUE when it is a whole number above 0.
positive() {
  [[ "$2" =~ ^[1-9][0-9]*$ ]] || usage "$1 needs a whole number above 0"
  echo "$2"
}

# perf_binary: `warren perf` is part of the broker binary.
perf_binary() {
  perf_bin="$(warren_binary)"
  if [[ ! -x "$perf_bin" ]]; then
    echo "overload: building $perf_bin: cargo build --release"
    (cd "$REPO_ROOT" && cargo build --release)
  fi
}

# host_probe: the machine's own steadiness over a phase's length, with no broker running.
host_probe() {
  local probe="$REPO_ROOT/target/release/warren-hostprobe"
  if [[ ! -x "$probe" ]]; then
    echo "overload: building $probe: cargo build --release -p warren-hostprobe"
    (cd "$REPO_ROOT" && cargo build --release -p warren-hostprobe) || return 1
  fi
  say "== host probe: a 16 MiB memory walk for ${seconds}s, no broker running"
  "$probe" --seconds "$seconds" --mib 16 --json "$out_dir/overload-$stamp-host.json" \
    >"$work_dir/host-probe.log" 2>&1 || { tail -n 5 "$work_dir/host-probe.log"; return 1; }
  tail -n 1 "$work_dir/host-probe.log" | tee -a "$summary"
}

# start_broker NAME: a fresh broker with the memory budget as its high watermark; sets pid,
# port.
start_broker() {
  local name="$1"
  if [[ "$name" == rabbitmq ]]; then
    start_rabbitmq || return 1
    rabbitmqctl_private set_vm_memory_high_watermark absolute $((memory_budget_mib * 1048576)) \
      >/dev/null || return 1
    pid="$rabbit_beam_pid" port="$rabbit_port"
  else
    warren_config="$work_dir/warren.toml"
    printf 'vm_memory_high_watermark_absolute = "%sMiB"\n' "$memory_budget_mib" \
      >"$warren_config"
    start_warren || return 1
    pid="$warren_pid" port="$warren_port"
  fi
}

stop_broker() {
  if [[ "$1" == rabbitmq ]]; then stop_rabbitmq; else stop_warren; fi
  rm -rf "$work_dir/rabbitmq" "$work_dir/warren"
}

# run_phase BROKER PHASE: one phase on a fresh broker, sampled.
run_phase() {
  local name="$1" phase="$2" pid="" port="" queue=$CALM_QUEUE timeout_s
  say "== $name: $phase"
  start_broker "$name" || { say "$name: $phase: broker did not start"; return 1; }
  [[ "$phase" != backlog ]] || queue=$BACKLOG_QUEUE
  local phase_file="$work_dir/phase"
  echo "$phase" >"$phase_file"
  timeout_s=$((seconds + PHASE_SLACK_S))
  [[ "$phase" != sweep ]] || timeout_s=$SWEEP_TIMEOUT_S
  python3 "$SAMPLER" sample --pid "$pid" --broker "$name" --phase-file "$phase_file" \
    --csv "$csv" --port "$port" --queue "$queue" --max-seconds $((timeout_s + 10)) &
  sampler_pid=$!
  local uri="amqp://guest:guest@127.0.0.1:$port/%2f" status=0
  local json="$out_dir/overload-$stamp-$name-$phase.json"
  local args=()
  case "$phase" in
    calm) args=(-x 1 -y 1 -s 12 -a -u "$CALM_QUEUE" -z "$seconds") ;;
    backlog)
      args=(-x "$BACKLOG_PRODUCERS" -y 1 -s 12 -u "$BACKLOG_QUEUE" --flag persistent
        --auto-delete false -r $((backlog_rate / BACKLOG_PRODUCERS)) -R $((backlog_rate / 10))
        --qos "$BACKLOG_PREFETCH" --multi-ack-every $((BACKLOG_PREFETCH / 2)) -z "$seconds") ;;
    sweep) args=(-x 1 -y 1 -s 12 -a -u "$CALM_QUEUE" --sweep) ;;
  esac
  local log="$work_dir/perf-$name-$phase.log"
  timeout --kill-after=10 "$timeout_s" "$perf_bin" perf --uri "$uri" "${args[@]}" \
    --label "$name" --json "$json" >"$log" 2>&1 </dev/null || status=$?
  stop_sampler
  stop_broker "$name"
  if [[ $status -ne 0 ]]; then
    say "$name: $phase: warren perf failed (status $status); its last lines:"
    tail -n 10 "$log" | tee -a "$summary"
    return 1
  fi
  grep -E "rate avg|consumer latency min" "$log" | sed "s/^/$name: $phase: /" \
    | tee -a "$summary"
}

# draw_charts: the PNGs listed in the header.
draw_charts() {
  local prefix="$out_dir/overload-$stamp" plot status=0
  chart_tools overload "$csv" || return 1
  local phase jsons
  for phase in calm backlog; do
    mapfile -t jsons < <(ls "$prefix"-rabbitmq-$phase.json "$prefix"-warren-$phase.json \
      2>/dev/null)
    [[ ${#jsons[@]} -gt 0 ]] || continue
    "$perf_bin" perf chart "${jsons[@]}" -o "$prefix-$phase.png" || status=1
  done
  local run_csv="$prefix-rss-run.csv"
  "$plot" --csv "$run_csv" --x second --y rss_mib --series broker --marks phase \
    --title "Broker RSS during the overload phases (calm ${seconds}s, backlog ${seconds}s, sweep)" \
    --x-label "seconds of the broker's phases" --y-label "RSS (MiB)" --out "$prefix-rss.png" \
    || status=1
  "$plot" --csv "$run_csv" --x second --y messages_ready --series broker --marks phase \
    --title "Ready messages in the phase's queue" --x-label "seconds of the broker's phases" \
    --y-label "messages ready" --out "$prefix-ready.png" || status=1
  if [[ -f "$prefix-sweep.csv" && "$(wc -l <"$prefix-sweep.csv")" -gt 1 ]]; then
    "$plot" --csv "$prefix-sweep.csv" --x attempted_rate --y latency_ms --series series \
      --title "Consumer latency against attempted publish rate (1 producer, 1 autoack consumer, 12 B)" \
      --x-label "attempted rate (msg/s)" --y-label "latency (ms)" \
      --out "$prefix-sweep.png" || status=1
  fi
  return "$status"
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
