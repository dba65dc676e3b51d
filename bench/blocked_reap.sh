#!/usr/bin/env bash
# bench/blocked_reap.sh [WATERMARK_MB]: Warren with an absolute memory high watermark (default
# 256 MB) and a publisher (bench/blocked_reap.py) that fills it with one partial message until
# the memory alarm blocks it, then resets its socket. Shows the broker's RSS and memory alarm
# once a second; passes when the alarm clears, i.e. the blocked connection was torn down and
# its memory went back to the system.
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)" || exit 1
work_dir="$(mktemp -d /tmp/warren-blocked-reap.XXXXXX)"
# shellcheck source=brokers.sh
source "$REPO_ROOT/bench/brokers.sh"
readonly WATERMARK_MB="${1:-256}"

trap 'stop_warren; rm -rf "$work_dir"' EXIT
warren_config="$work_dir/rabbitmq.conf"
cat >"$warren_config" <<CONF
vm_memory_high_watermark.absolute = ${WATERMARK_MB}MiB
heartbeat = 0
CONF
start_warren || exit 1
python3 "$REPO_ROOT/bench/blocked_reap.py" 127.0.0.1 "$warren_port" "$warren_http_port" \
  "$warren_pid" "$((WATERMARK_MB * 4))"
