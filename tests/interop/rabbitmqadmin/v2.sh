#!/usr/bin/env bash
# rabbitmqadmin v2 (the `rabbitmqadmin` crate) against a broker's management API: declare,
# list and delete a queue, an exchange and a binding; publish; get; export definitions,
# delete, import them back. Prints `N passed, N failed`.
#
# Usage: v2.sh HTTP_URL   (http://[user:pass@]host:port; guest/guest by default)
#        v2.sh --install-only   (only the install below; .ci/run runs it in the background)
# The binary is RABBITMQADMIN_V2 (default: $WARREN_TOOLS_DIR/rabbitmqadmin-v2/bin/rabbitmqadmin,
# installed there with `cargo install rabbitmqadmin --locked --debug` when missing: a debug
# build is about half the CPU of a release one, and a few minutes cold). The .ci/run stage
# `rabbitmqadmin-v2`.
set -uo pipefail

url="${1:?usage: v2.sh HTTP_URL | --install-only}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
tools="${WARREN_TOOLS_DIR:-$REPO_ROOT/.tools}"
bin="${RABBITMQADMIN_V2:-$tools/rabbitmqadmin-v2/bin/rabbitmqadmin}"
if [[ ! -x "$bin" ]]; then
  echo "rabbitmqadmin-v2: installing the rabbitmqadmin crate into $tools/rabbitmqadmin-v2"
  log="$(mktemp)"
  if ! cargo install rabbitmqadmin --locked --debug --root "$tools/rabbitmqadmin-v2" >"$log" 2>&1
  then
    echo "rabbitmqadmin-v2: cargo install rabbitmqadmin failed:"; tail -n 30 "$log"; rm -f "$log"
    exit 1
  fi
  rm -f "$log"
  "$bin" --version
fi
[[ "$url" != --install-only ]] || exit 0
rest="${url#*://}"
user=guest password=guest
if [[ "$rest" == *@* ]]; then
  creds="${rest%%@*}"; rest="${rest#*@}"
  user="${creds%%:*}"; password="${creds#*:}"
fi
host="${rest%%:*}"; port="${rest#*:}"; port="${port%%/*}"
admin=("$bin" --host "$host" --port "$port" -u "$user" -p "$password")
q="v2-test-$$-q" x="v2-test-$$-x" defs="$(mktemp)"
passed=0 failed=0
check() { # check NAME PATTERN ARGS...: the command succeeds and prints PATTERN
  local name="$1" pattern="$2" out
  shift 2
  if out="$(timeout 30 "${admin[@]}" "$@" 2>&1)" && grep -qE -- "$pattern" <<<"$out"; then
    echo "ok   $name"; passed=$((passed + 1))
  else
    echo "FAIL $name: $out"; failed=$((failed + 1))
  fi
}
check "declare queue" "" declare queue --name "$q" --type classic --durable true
check "list queues" "$q" list queues
check "declare exchange" "" declare exchange --name "$x" --type direct
check "list exchanges" "$x" list exchanges
check "declare binding" "" declare binding --source "$x" --destination-type queue \
  --destination "$q" --routing-key k
check "list bindings" "$x" list bindings
check "publish" "routed" publish message --exchange "$x" --routing-key k --payload hello
check "get" "hello" get messages --queue "$q" --count 1
check "export definitions" "" definitions export --file "$defs"
if grep -q "$q" "$defs"; then echo "ok   exported file names the queue"; passed=$((passed + 1)); else echo "FAIL exported file lacks $q"; failed=$((failed + 1)); fi
check "delete queue" "" delete queue --name "$q"
check "import definitions" "" definitions import --file "$defs"
check "imported queue is back" "$q" list queues
check "delete queue again" "" delete queue --name "$q"
check "delete exchange" "" delete exchange --name "$x"
rm -f "$defs"
echo "rabbitmqadmin-v2: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
