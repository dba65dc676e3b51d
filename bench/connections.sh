#!/usr/bin/env bash
# Idle-connection memory: opens N AMQP 0.9.1 connections with 2 channels each against a
# private RabbitMQ node and then against Warren, and compares the broker's resident memory
# per connection (the seed "AMQP 1.0 Benchmarks": RabbitMQ 4.0 needs about 5.3 GB for
# 40,000 connections with 2 channels each). See bench/README.md.
#
#   bench/connections.sh [--connections N] [--hold SECONDS] [--only rabbitmq|warren]
#                        [--out-dir DIR]
#
# Before starting anything it checks what N connections need from this machine: open files
# (each broker and the load tool hold one descriptor per connection; the hard limit of this
# shell, fs.nr_open, fs.file-max), RabbitMQ's own socket limit (90% of its descriptors),
# free memory, and prints what blocks and how to fix it. It then raises `ulimit -n` to what
# the run needs, which both brokers and the tool inherit.
#
# Per broker (RabbitMQ first; each runs alone, started and stopped by bench/brokers.sh):
# idle for 5 s, RSS taken; `warren perf --connections N -z HOLD` opens the connections (32
# handshakes at a time; past 10,000 it binds its sockets to 127.0.0.2, 127.0.0.3, ... so
# that the ephemeral ports of one address do not run out); 5 s after the last one opened,
# RSS is taken again with the connections the broker has established (ss), and for RabbitMQ
# `rabbitmqctl status` (connection count, total memory); the tool holds them HOLD seconds
# (default 30), closes them, and RSS is taken once more. RSS is VmRSS of the broker process
# (RabbitMQ: beam.smp). KiB per connection = (RSS open - RSS idle) / connections opened.
#
# Writes into --out-dir (default bench/results), with STAMP the start time:
#   connections-STAMP.txt   the checks, the figures per broker and the comparison
#   connections-STAMP.csv   broker,second,phase,rss_mib (one row a second)
#   connections-STAMP.png   RSS over time, one line per broker, phases marked (warren-plot)
# Every process it starts (brokers, load tool, sampler) is stopped on every exit path.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
# shellcheck source=bench/brokers.sh
source "$REPO_ROOT/bench/brokers.sh"
readonly IDLE_S=5   # a started broker rests this long before its idle RSS is taken
readonly SETTLE_S=5 # after the last connection opened, before the RSS with N open is taken
readonly CLOSED_S=3 # after the tool closed everything, before the last RSS is taken
# Descriptors Warren needs beside its connections (listener, store files, runtime); warren
# perf needs 64 (its SPARE_DESCRIPTORS), RabbitMQ more (files_needed).
readonly BROKER_SPARE_FDS=500
# For the free-memory check: RabbitMQ 4.0 takes about 130 KiB per connection with 2
# channels in the seed; allow more for 3.10, and 1 GiB for the rest.
readonly RABBITMQ_KIB_PER_CONNECTION_MAX=200
readonly MEMORY_SPARE_MIB=1024

connections=40000
hold_s=30
only=""
out_dir="$REPO_ROOT/bench/results"
work_dir=""
open_timeout_s=""
close_timeout_s=""
summary=""
csv=""
perf_pid=""
declare -A results=()

main() {
  parse_args "$@"
  # Opening and closing run at thousands a second on either broker: wide bounds.
  open_timeout_s=$((120 + connections / 100))
  close_timeout_s=$((120 + connections / 100))
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  work_dir="$(mktemp -d -t warren-connections.XXXXXX)"
  mkdir -p "$out_dir"
  local stamp
  stamp="$(date +%Y-%m-%d-%H%M%S)"
  summary="$out_dir/connections-$stamp.txt"
  csv="$out_dir/connections-$stamp.csv"
  say "connections: $connections connections x 2 channels per broker, held ${hold_s}s;" \
    "$(date -Is)"
  check_machine || exit 1
  build_tools || exit 1
  echo "broker,second,phase,rss_mib" >"$csv"
  local status=0
  if [[ "$only" != warren ]]; then
    run_broker rabbitmq || status=1
  fi
  if [[ "$only" != rabbitmq ]]; then
    run_broker warren || status=1
  fi
  compare
  draw_chart "${csv%.csv}.png" || status=1
  echo "connections: summary $summary, CSV $csv"
  return "$status"
}

usage() {
  [[ $# -eq 0 ]] || echo "connections: $1" >&2
  cat >&2 <<EOF
usage: $0 [--connections N] [--hold SECONDS] [--only rabbitmq|warren] [--out-dir DIR]
  --connections N   idle connections per broker, 2 channels each (default 40000)
  --hold SECONDS    how long warren perf holds them once all are open (default 30, >= 15)
  --only BROKER     run one broker only
  --out-dir DIR     where the summary, CSV and chart go (default bench/results)
Quick run: $0 --connections 2000 --hold 15
Environment: WARREN_BROKER_BIN, CARGO_TARGET_DIR, WARREN_PLOT_BIN.
EOF
  exit 2
}

parse_args() {
  while [[ $# -gt 0 ]]; do
    local value="${2:-}"
    case "$1" in
      --connections) [[ "$value" =~ ^[1-9][0-9]*$ ]] || usage "--connections needs a count"
        connections="$value" ;;
      --hold) [[ "$value" =~ ^[0-9]+$ && "$value" -ge 15 ]] \
          || usage "--hold needs seconds, at least 15 (the RSS is taken ${SETTLE_S}s in)"
        hold_s="$value" ;;
      --only) [[ "$value" == rabbitmq || "$value" == warren ]] \
          || usage "--only needs rabbitmq or warren"
        only="$value" ;;
      --out-dir) [[ -n "$value" ]] || usage "--out-dir needs a directory"
        out_dir="$value" ;;
      -h|--help) usage ;;
      *) usage "unknown argument '$1'" ;;
    esac
    shift 2
  done
}

# check_machine: everything N connections need, checked before anything starts; every
# blocker is named with its fix, and the largest N this machine allows is suggested.
check_machine() {
  local need blocked=0 hard nr_open file_max file_used
  need="$(files_needed "$connections")"
  hard="$(ulimit -Hn)"
  nr_open="$(cat /proc/sys/fs/nr_open)"
  file_max="$(cat /proc/sys/fs/file-max)"
  file_used="$(awk '{ print $1 }' /proc/sys/fs/file-nr)"
  say "connections: open files: $need wanted; hard limit $hard (ulimit -Hn), fs.nr_open" \
    "$nr_open, fs.file-max $file_max ($file_used in use); net.core.somaxconn" \
    "$(cat /proc/sys/net/core/somaxconn) (warren perf has 32 handshakes in flight at most);" \
    "ephemeral ports $(tr '\t' - </proc/sys/net/ipv4/ip_local_port_range) per source address"
  if [[ "$hard" != unlimited && "$hard" -lt "$need" ]] && ! (ulimit -Hn "$need") 2>/dev/null; then
    say "connections: BLOCKED: $connections connections need $need open files in the broker" \
      "(RabbitMQ keeps a tenth of its descriptors for files, and 100 more), but the hard" \
      "limit here is $hard and this process may not raise it (that takes CAP_SYS_RESOURCE)." \
      "Fix: as root, 'ulimit -Hn $need' in the shell that runs this script; for a service" \
      "LimitNOFILE=$need; for a container --ulimit nofile=$need:$need."
    blocked=1
  fi
  if [[ "$nr_open" -lt "$need" ]]; then
    say "connections: BLOCKED: fs.nr_open is $nr_open, below the $need open files a broker" \
      "needs. Fix: sysctl -w fs.nr_open=$need"
    blocked=1
  fi
  if [[ $((file_max - file_used)) -lt $((2 * need)) ]]; then
    say "connections: BLOCKED: fs.file-max $file_max leaves $((file_max - file_used)) files" \
      "for the broker's and the tool's sockets. Fix: sysctl -w" \
      "fs.file-max=$((file_used + 2 * need + 10000))"
    blocked=1
  fi
  check_memory || blocked=1
  if [[ $blocked -ne 0 ]]; then
    suggest_largest "$hard" "$nr_open"
    return 1
  fi
  if [[ "$hard" != unlimited && "$hard" -lt "$need" ]]; then
    ulimit -Hn "$need"
  fi
  ulimit -n "$need"
  say "connections: ulimit -n $(ulimit -n) for both brokers and the load tool"
}

# files_needed N: open files for N connections in the broker: Warren needs a few beside its
# sockets; RabbitMQ 3.10 accepts sockets up to 90% of (its limit - 97), less 2 (its file
# handle cache), which the node reports once it runs (checked again then).
files_needed() {
  local warren=$(($1 + BROKER_SPARE_FDS)) rabbitmq=$(((($1 + 2) * 10 + 8) / 9 + 97))
  if [[ "$only" == warren || "$rabbitmq" -lt "$warren" ]]; then
    echo "$warren"
  else
    echo "$rabbitmq"
  fi
}

# rabbitmq_sockets_limit FILES: the AMQP sockets RabbitMQ 3.10 accepts under FILES.
rabbitmq_sockets_limit() {
  echo $(((($1 - 97) * 9) / 10 - 2))
}

check_memory() {
  local available_mib need_mib
  available_mib="$(awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo)"
  if [[ "$only" == warren ]]; then
    need_mib=$((connections * 16 / 1024 + MEMORY_SPARE_MIB))
  else
    need_mib=$((connections * RABBITMQ_KIB_PER_CONNECTION_MAX / 1024 + MEMORY_SPARE_MIB))
  fi
  say "connections: memory: $available_mib MiB available, up to $need_mib MiB wanted"
  if [[ "$available_mib" -lt "$need_mib" ]]; then
    say "connections: BLOCKED: $available_mib MiB available, RabbitMQ may need $need_mib MiB" \
      "for $connections connections. Fix: free memory, or fewer --connections."
    return 1
  fi
}

# suggest_largest HARD NR_OPEN: the largest --connections that this machine's limits allow.
suggest_largest() {
  local files="$1"
  [[ "$files" != unlimited ]] || files="$2"
  local largest=$((files - BROKER_SPARE_FDS))
  if [[ "$only" != warren ]]; then
    local rabbit
    rabbit="$(rabbitmq_sockets_limit "$files")"
    [[ "$rabbit" -ge "$largest" ]] || largest="$rabbit"
  fi
  if [[ "$largest" -gt 0 && "$largest" -lt "$connections" ]]; then
    say "connections: the largest run these limits allow: $0 --connections" \
      "$largest${only:+ --only $only}"
  fi
}

build_tools() {
  local binary
  binary="$(warren_binary)"
  if [[ ! -x "$binary" ]]; then
    echo "connections: building Warren: cargo build --release -p warren-server"
    (cd "$REPO_ROOT" && cargo build --release -p warren-server) || return 1
  fi
}

# run_broker NAME: one broker from start to stop; its figures go to `results`.
run_broker() {
  local name="$1"
  echo
  echo "== $name"
  local pid port
  if [[ "$name" == rabbitmq ]]; then
    start_rabbitmq || { say "$name: NOT MEASURED (could not start; see above)"; return 1; }
    pid="$rabbit_beam_pid" port="$rabbit_port"
    results[$name.version]="RabbitMQ $rabbit_version"
    rabbitmq_fits || { stop_rabbitmq; return 1; }
  else
    start_warren || { say "$name: NOT MEASURED (could not start; see above)"; return 1; }
    pid="$warren_pid" port="$warren_port"
    results[$name.version]="Warren $("$(warren_binary)" --version | awk '{ print $2 }')"
  fi
  local phase_file="$work_dir/phase-$name"
  echo idle >"$phase_file"
  sample_rss "$name" "$pid" "$phase_file" &
  sampler_pid=$!
  local status=0
  phases "$name" "$pid" "$port" "$phase_file" || status=1
  stop_sampler
  if [[ "$name" == rabbitmq ]]; then stop_rabbitmq; else stop_warren; fi
  return "$status"
}

# rabbitmq_fits: the node's own socket limit, from rabbitmqctl status.
rabbitmq_fits() {
  local limit
  limit="$(rabbitmq_status | awk '$1 == "sockets_limit" { print $2 }')"
  say "rabbitmq: accepts $limit AMQP sockets under ulimit -n $(ulimit -n)"
  if [[ -n "$limit" && "$limit" -lt "$connections" ]]; then
    say "rabbitmq: NOT MEASURED: its socket limit $limit is below $connections connections;" \
      "raise ulimit -n (see the checks above)"
    return 1
  fi
}

# rabbitmq_status: "key value" lines from rabbitmqctl status: sockets_limit, sockets_used,
# connection_count, total_rss_bytes, erlang_bytes.
rabbitmq_status() {
  rabbitmqctl_private status --formatter json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
fd, total = d["file_descriptors"], d["memory"]["total"]
print("sockets_limit", fd["sockets_limit"])
print("sockets_used", fd["sockets_used"])
print("connection_count", d["totals"]["connection_count"])
print("total_rss_bytes", total["rss"])
print("erlang_bytes", total["erlang"])
' || true
}

# sample_rss NAME PID PHASE_FILE: a CSV row a second until the process ends or the sampler
# is stopped (bounded by the longest run this script allows).
sample_rss() {
  local name="$1" pid="$2" phase_file="$3" second=0
  local last=$((IDLE_S + open_timeout_s + hold_s + close_timeout_s + 120))
  while [[ $second -le $last ]] && kill -0 "$pid" 2>/dev/null; do
    echo "$name,$second,$(cat "$phase_file"),$(rss_mib "$pid")" >>"$csv"
    sleep 1
    second=$((second + 1))
  done
}

rss_kib() {
  awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0
}

rss_mib() {
  awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo 0
}

# established PORT: TCP connections the broker has established on its AMQP port (by address
# too: a client socket bound to 127.0.0.2 may get the broker's port number as its own).
established() {
  ss -Htn state established "( src 127.0.0.1:$1 )" 2>/dev/null | wc -l
}

# phases NAME PID PORT PHASE_FILE: idle, opening, open, closing, closed.
phases() {
  local name="$1" pid="$2" port="$3" phase_file="$4"
  local log="$work_dir/perf-$name.log" json="$work_dir/perf-$name.json"
  sleep "$IDLE_S"
  results[$name.rss_idle_kib]="$(rss_kib "$pid")"
  echo opening >"$phase_file"
  : >"$log"
  "$(warren_binary)" perf -h "amqp://guest:guest@127.0.0.1:$port/%2f" \
    --connections "$connections" -z "$hold_s" --id "$name" --json "$json" \
    >"$log" 2>&1 </dev/null &
  perf_pid=$!
  wait_for_open "$name" "$log" || { stop_perf; return 1; }
  echo open >"$phase_file"
  sleep "$SETTLE_S"
  results[$name.rss_open_kib]="$(rss_kib "$pid")"
  results[$name.established]="$(established "$port")"
  results[$name.tool_rss_kib]="$(rss_kib "$perf_pid")"
  if [[ "$name" == rabbitmq ]]; then
    rabbitmq_status >"$work_dir/status-open"
    results[$name.status_connections]="$(awk '$1 == "connection_count" { print $2 }' \
      "$work_dir/status-open")"
    results[$name.status_rss_bytes]="$(awk '$1 == "total_rss_bytes" { print $2 }' \
      "$work_dir/status-open")"
  fi
  echo held >"$phase_file"
  wait_for_perf "$name" "$log" "$phase_file" || return 1
  echo closed >"$phase_file"
  sleep "$CLOSED_S"
  results[$name.rss_closed_kib]="$(rss_kib "$pid")"
  results[$name.established_after]="$(established "$port")"
  read_report "$name" "$json" && report_broker "$name"
}

# wait_for_open NAME LOG: until warren perf says every connection is open (or gave up).
wait_for_open() {
  local name="$1" log="$2" deadline=$((SECONDS + open_timeout_s))
  while [[ $SECONDS -lt $deadline ]]; do
    if grep -q "opened [0-9]* connections" "$log"; then
      grep "opened [0-9]* connections" "$log" | sed "s/^/$name: warren perf: /"
      return 0
    fi
    if ! kill -0 "$perf_pid" 2>/dev/null; then
      say "$name: NOT MEASURED: warren perf stopped before opening every connection:"
      tail -n 5 "$log" | while IFS= read -r line; do say "  $line"; done
      return 1
    fi
    sleep 1
  done
  say "$name: NOT MEASURED: not every connection open after ${open_timeout_s}s; last lines:"
  tail -n 3 "$log" | while IFS= read -r line; do say "  $line"; done
  return 1
}

# wait_for_perf NAME LOG: until warren perf has closed everything and exited.
wait_for_perf() {
  local name="$1" log="$2" phase_file="$3" status=0
  local deadline=$((SECONDS + hold_s + close_timeout_s))
  while kill -0 "$perf_pid" 2>/dev/null && [[ $SECONDS -lt $deadline ]]; do
    if grep -q "connections closed:" "$log"; then
      echo closing >"$phase_file"
    fi
    sleep 1
  done
  if kill -0 "$perf_pid" 2>/dev/null; then
    say "$name: warren perf still running $((hold_s + close_timeout_s))s after opening;" \
      "stopped"
    stop_perf
    return 1
  fi
  wait "$perf_pid" || status=$?
  perf_pid=""
  if [[ $status -ne 0 ]]; then
    say "$name: warren perf exited with status $status; its last lines:"
    tail -n 5 "$log" | while IFS= read -r line; do say "  $line"; done
    return 1
  fi
}

stop_perf() {
  [[ -n "$perf_pid" ]] || return 0
  kill -TERM "$perf_pid" 2>/dev/null || true
  wait "$perf_pid" 2>/dev/null || true
  perf_pid=""
}

# read_report NAME JSON: opened, closed and time to open from warren perf's JSON report.
read_report() {
  local name="$1" json="$2" fields
  fields="$(python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))["connections"]
print(c["opened"], c["closed"], "%.1f" % c["open_s"], "%.1f" % c.get("close_s", 0),
      c.get("source_addresses", 0))
' "$json")" || { say "$name: no report from warren perf ($json)"; return 1; }
  local opened closed open_s close_s sources
  read -r opened closed open_s close_s sources <<<"$fields"
  results[$name.opened]="$opened"
  results[$name.closed]="$closed"
  results[$name.open_s]="$open_s"
  results[$name.close_s]="$close_s"
  results[$name.sources]="$sources"
}

report_broker() {
  local name="$1" opened="${results[$1.opened]}"
  results[$name.kib_per_connection]="$(awk -v o="${results[$name.rss_open_kib]}" \
    -v i="${results[$name.rss_idle_kib]}" -v n="$opened" \
    'BEGIN { v = 0; if (n > 0) v = (o - i) / n; printf "%.1f", v }')"
  say "$name: ${results[$name.version]}: opened $opened of $connections connections in" \
    "${results[$name.open_s]}s (from ${results[$name.sources]} source addresses, 0: the" \
    "kernel's); the broker had ${results[$name.established]} established; warren perf's own" \
    "RSS $(mib "${results[$name.tool_rss_kib]}") MiB"
  say "$name: RSS idle $(mib "${results[$name.rss_idle_kib]}") MiB, with $opened open" \
    "$(mib "${results[$name.rss_open_kib]}") MiB: ${results[$name.kib_per_connection]} KiB" \
    "per connection"
  if [[ -n "${results[$name.status_rss_bytes]:-}" ]]; then
    say "$name: rabbitmqctl status: ${results[$name.status_connections]} connections, total" \
      "memory $(awk -v b="${results[$name.status_rss_bytes]}" \
      'BEGIN { printf "%.0f", b / 1048576 }') MiB"
  fi
  say "$name: closed ${results[$name.closed]} in ${results[$name.close_s]}s;" \
    "${CLOSED_S}s later RSS" \
    "$(mib "${results[$name.rss_closed_kib]}") MiB, ${results[$name.established_after]}" \
    "established"
}

mib() {
  awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'
}

# compare: the table of both brokers and the ratio of memory per connection.
compare() {
  local brokers=() name
  for name in rabbitmq warren; do
    [[ -z "${results[$name.kib_per_connection]:-}" ]] || brokers+=("$name")
  done
  [[ ${#brokers[@]} -gt 0 ]] || return 0
  say ""
  local row
  row="$(printf '%-34s' "$connections connections x 2 channels")"
  for name in "${brokers[@]}"; do row+="$(printf '%18s' "${results[$name.version]}")"; done
  say "$row"
  compare_row "connections opened" opened ""
  compare_row "time to open (s)" open_s ""
  compare_row "time to close (s)" close_s ""
  compare_row "RSS idle (MiB)" rss_idle_kib mib
  compare_row "RSS with all open (MiB)" rss_open_kib mib
  compare_row "KiB per connection" kib_per_connection ""
  compare_row "RSS after closing (MiB)" rss_closed_kib mib
  if [[ ${#brokers[@]} -eq 2 ]]; then
    say "$(awk -v w="${results[warren.kib_per_connection]}" \
      -v r="${results[rabbitmq.kib_per_connection]}" 'BEGIN {
        if (r <= 0 || w <= 0) { print "Warren/RabbitMQ memory per connection: n/a"; exit }
        printf "Warren/RabbitMQ memory per connection: %.3f (RabbitMQ needs %.0fx as much)", \
          w / r, r / w }')"
  fi
}

# compare_row LABEL KEY FORMAT: one line of the table (FORMAT mib converts KiB to MiB).
compare_row() {
  local row name value
  row="$(printf '%-34s' "$1")"
  for name in rabbitmq warren; do
    [[ -n "${results[$name.kib_per_connection]:-}" ]] || continue
    value="${results[$name.$2]}"
    [[ "$3" != mib ]] || value="$(mib "$value")"
    row+="$(printf '%18s' "$value")"
  done
  say "$row"
}

# draw_chart PNG: RSS over time for both brokers, phases marked.
draw_chart() {
  local png="$1" plot
  [[ "$(wc -l <"$csv")" -gt 1 ]] || return 0
  chart_tools connections "$csv" || return 1
  "$plot" --csv "$csv" --x second --y rss_mib --series broker --marks phase \
    --title "Broker RSS: $connections idle connections x 2 channels, held ${hold_s}s" \
    --x-label "seconds since broker start" --y-label "RSS (MiB)" --out "$png" || return 1
  say "connections: chart ${png##*/}"
}

cleanup() {
  stop_perf
  stop_sampler
  stop_warren
  stop_rabbitmq
  if [[ -n "$work_dir" ]]; then
    rm -rf "$work_dir"
  fi
}

main "$@"
