#!/usr/bin/env bash
# Runs RabbitMQ's classic rabbitmqadmin (the Python script Debian's rabbitmq-server package
# ships as /usr/bin/rabbitmqadmin) against a running broker's management API, with the seeds'
# syntax: declare/list/delete queue, exchange and binding; publish; get.
#
# Usage: run.sh HTTP_URL        (http://[user:pass@]host:port; guest/guest by default)
#   RABBITMQADMIN     the script to run [default: rabbitmqadmin on PATH, else the one in
#                     Debian's rabbitmq-server .deb, unpacked (not installed, so no RabbitMQ
#                     service starts) under $WARREN_TOOLS_DIR/rabbitmq-server-deb]
# Prints "N passed, N failed" and exits non-zero when a check failed.
set -uo pipefail

url="${1:?usage: run.sh HTTP_URL}"
hostport="${url#http://}"
hostport="${hostport%%/*}"
user=guest
password=guest
if [[ "$hostport" == *@* ]]; then
  credentials="${hostport%@*}"
  hostport="${hostport##*@}"
  user="${credentials%%:*}"
  password="${credentials#*:}"
fi
host="${hostport%:*}"
port="${hostport##*:}"
tools_dir="${WARREN_TOOLS_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)/.tools}"

# find_admin: prints the path of a rabbitmqadmin script, unpacking Debian's package if needed.
find_admin() {
  if [[ -n "${RABBITMQADMIN:-}" ]]; then
    echo "$RABBITMQADMIN"
    return
  fi
  if command -v rabbitmqadmin >/dev/null; then
    command -v rabbitmqadmin
    return
  fi
  local unpacked="$tools_dir/rabbitmq-server-deb"
  if [[ ! -f "$unpacked/usr/bin/rabbitmqadmin" ]]; then
    mkdir -p "$tools_dir/deb" || return 1
    (cd "$tools_dir/deb" && { apt-get download rabbitmq-server >/dev/null 2>&1 \
      || { apt-get update -qq && apt-get download rabbitmq-server; }; }) >&2 || return 1
    dpkg-deb -x "$(ls "$tools_dir"/deb/rabbitmq-server_*.deb | head -n 1)" "$unpacked" \
      || return 1
  fi
  echo "$unpacked/usr/bin/rabbitmqadmin"
}

admin="$(find_admin)"
if [[ -z "$admin" || ! -f "$admin" ]]; then
  echo "rabbitmqadmin: not found and Debian's rabbitmq-server package could not be unpacked"
  exit 1
fi
passed=0
failed=0
suffix="$$-$RANDOM"
queue="admin-q-$suffix"
exchange="admin-x-$suffix"

adm() {
  timeout 20 python3 "$admin" -H "$host" -P "$port" -u "$user" -p "$password" -V / "$@"
}

# check NAME EXPECTED COMMAND...: runs the command and looks for EXPECTED in its output.
check() {
  local name="$1" expected="$2" output status=0
  shift 2
  output="$(adm "$@" 2>&1)" || status=$?
  if [[ $status -eq 0 && "$output" == *"$expected"* ]]; then
    passed=$((passed + 1))
    echo "ok   $name"
  else
    failed=$((failed + 1))
    echo "FAIL $name: exit $status, expected '$expected' in:"
    echo "$output"
  fi
}

# check_refused NAME EXPECTED COMMAND...: the command must fail with EXPECTED in its output.
check_refused() {
  local name="$1" expected="$2" output status=0
  shift 2
  output="$(adm "$@" 2>&1)" || status=$?
  if [[ $status -ne 0 && "$output" == *"$expected"* ]]; then
    passed=$((passed + 1))
    echo "ok   $name"
  else
    failed=$((failed + 1))
    echo "FAIL $name: exit $status, expected a refusal with '$expected' in:"
    echo "$output"
  fi
}

# Warren has classic queues only: a quorum queue is refused (400 with RabbitMQ's text).
check_refused "quorum queue refused" "queue type 'quorum' is not supported by Warren yet" \
  declare queue name="$queue" queue_type=quorum durable=true
check "declare classic queue" "queue declared" \
  declare queue name="$queue" queue_type=classic durable=true
check "list queues shows it" "$queue" list queues name durable messages
check "declare exchange" "exchange declared" declare exchange name="$exchange" type=direct
check "list exchanges shows it" "$exchange" list exchanges name type
check "declare binding" "binding declared" \
  declare binding source="$exchange" destination="$queue" routing_key=key-1
check "list bindings shows it" "key-1" list bindings source destination routing_key
check "publish" "Message published" \
  publish exchange="$exchange" routing_key=key-1 payload=hello-from-rabbitmqadmin
check "get with requeue" "hello-from-rabbitmqadmin" \
  get queue="$queue" ackmode=ack_requeue_true
check "message still counted" "$queue"$'\t'"1" -f tsv list queues name messages_ready
check "get and ack" "hello-from-rabbitmqadmin" get queue="$queue" ackmode=ack_requeue_false
check "purge" "queue purged" purge queue name="$queue"
check "delete binding" "binding deleted" \
  delete binding source="$exchange" destination_type=queue destination="$queue" \
  properties_key=key-1
check "delete exchange" "exchange deleted" delete exchange name="$exchange"
check "delete queue" "queue deleted" delete queue name="$queue"
check "overview" "rabbitmq_version" show overview
check "list nodes" "rabbit@" list nodes name
check "overview says RabbitMQ" "RabbitMQ" show overview product_name

echo "rabbitmqadmin: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
