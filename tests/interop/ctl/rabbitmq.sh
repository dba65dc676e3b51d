#!/usr/bin/env bash
# Runs tests/interop/ctl/run.sh against a private RabbitMQ node with the management plugin
# (Debian's rabbitmq-server, started on loopback by bench/brokers.sh and stopped on exit),
# including the alarm check (a disk free limit far above the free space raises one).
#
#   tests/interop/ctl/rabbitmq.sh
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
work_dir="$(mktemp -d)"
rabbit_management=1 # read by start_rabbitmq
# shellcheck source=bench/brokers.sh
source "$REPO_ROOT/bench/brokers.sh"
trap 'stop_rabbitmq; rm -rf "$work_dir"' EXIT

start_rabbitmq
# The alarm hooks run in a child shell: they get the node's rabbitmqctl command line.
ctl_env="$(printf '%q ' "${rabbit_env[@]}")"
rabbitmqctl_cmd="env $ctl_env timeout 60 /usr/lib/rabbitmq/bin/rabbitmqctl -n $rabbit_node"
export CTL_RAISE_ALARM="$rabbitmqctl_cmd set_disk_free_limit 100000GB"
export CTL_CLEAR_ALARM="$rabbitmqctl_cmd set_disk_free_limit 50MB"
"$REPO_ROOT/tests/interop/ctl/run.sh" "http://guest:guest@127.0.0.1:$rabbit_http_port"
