#!/usr/bin/env bash
# Exercises every `warren ctl` command against a broker's management HTTP API (Warren or
# RabbitMQ) and fails on any error or unexpected output.
#
#   tests/interop/ctl/run.sh URL        e.g. http://guest:guest@127.0.0.1:15672
#
# The user in URL must be an administrator. The binary is WARREN_BIN (default: the debug
# build in CARGO_TARGET_DIR or <repo>/target), run as `$WARREN_BIN ctl ...`. Everything the
# script declares lives in a vhost and users named ctl-test-<pid>-*, removed at the end. Each
# command is bounded by a 30 s timeout.
#
# When CTL_RAISE_ALARM and CTL_CLEAR_ALARM are set (shell commands that raise and clear a
# resource alarm on the broker), `alarms` is also checked to report it and exit 1 while it
# is in effect; tests/interop/ctl/rabbitmq.sh sets them for its private RabbitMQ node.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
readonly REPO_ROOT
readonly BIN="${WARREN_BIN:-${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug/warren}"
readonly CALL_TIMEOUT_S=30

if [[ $# -ne 1 ]]; then
  echo "usage: $0 URL   (e.g. http://guest:guest@127.0.0.1:15672)" >&2
  exit 2
fi
if [[ ! -x "$BIN" ]]; then
  echo "ctl: $BIN missing: cargo build -p warren-server --bin warren (or set WARREN_BIN)" >&2
  exit 2
fi
export WARREN_CTL_URL="$1"
# The API user (for its permissions in the test vhost): the URL's userinfo, else guest.
api_user=guest
if [[ "$1" =~ ^https?://([^:@/]+)(:[^@/]*)?@ ]]; then
  api_user="${BASH_REMATCH[1]}"
fi
readonly api_user

prefix="ctl-test-$$"
vh="$prefix-vh"
user="$prefix-user"
hashed_user="$prefix-hashed"
tmp="$(mktemp -d)"
checks=0

cleanup() {
  timeout "$CALL_TIMEOUT_S" "$BIN" ctl delete vhost --name "$vh" >/dev/null 2>&1 || true
  timeout "$CALL_TIMEOUT_S" "$BIN" ctl delete user --name "$user" >/dev/null 2>&1 || true
  timeout "$CALL_TIMEOUT_S" "$BIN" ctl delete user --name "$hashed_user" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

ctl() {
  timeout "$CALL_TIMEOUT_S" "$BIN" ctl "$@"
}

# expect PATTERN ARGS...: `warren ctl ARGS` exits 0 and its output matches PATTERN (ERE).
expect() {
  local pattern="$1" out
  shift
  out="$(ctl "$@" 2>&1)" || fail "warren ctl $*: exit status $?: $out"
  grep -qE -- "$pattern" <<<"$out" || fail "warren ctl $*: no /$pattern/ in: $out"
  checks=$((checks + 1))
}

# expect_absent PATTERN ARGS...: exits 0 and its output does not match PATTERN.
expect_absent() {
  local pattern="$1" out
  shift
  out="$(ctl "$@" 2>&1)" || fail "warren ctl $*: exit status $?: $out"
  if grep -qE -- "$pattern" <<<"$out"; then
    fail "warren ctl $*: unexpected /$pattern/ in: $out"
  fi
  checks=$((checks + 1))
}

# expect_error PATTERN ARGS...: exits 1 and its output (stderr) matches PATTERN.
expect_error() {
  local pattern="$1" out status=0
  shift
  out="$(ctl "$@" 2>&1)" || status=$?
  [[ $status -eq 1 ]] || fail "warren ctl $*: exit status $status, wanted 1: $out"
  grep -qE -- "$pattern" <<<"$out" || fail "warren ctl $*: no /$pattern/ in: $out"
  checks=$((checks + 1))
}

echo "ctl: $BIN ctl against $1"

# --- status and alarms ---------------------------------------------------------------------
expect '^\| product +\| [A-Za-z]+ [0-9]' status
expect 'listeners:' status
expect '"listeners"' status --json
expect 'no alarms in effect' alarms
expect '"status": "ok"' alarms --json

# wait_alarms WANT_STATUS PATTERN: polls `alarms` (bounded) until it exits WANT_STATUS with
# output matching PATTERN.
wait_alarms() {
  local want="$1" pattern="$2" out status deadline=$((SECONDS + 60))
  while [[ $SECONDS -lt $deadline ]]; do
    status=0
    out="$(ctl alarms 2>&1)" || status=$?
    if [[ $status -eq $want ]] && grep -qE -- "$pattern" <<<"$out"; then
      checks=$((checks + 1))
      return 0
    fi
    sleep 1
  done
  fail "warren ctl alarms: no exit status $want with /$pattern/ within 60 s: $out"
}
if [[ -n "${CTL_RAISE_ALARM:-}" && -n "${CTL_CLEAR_ALARM:-}" ]]; then
  bash -c "$CTL_RAISE_ALARM" >/dev/null
  wait_alarms 1 '^alarms in effect'
  expect_error '\| resource +\|' alarms
  bash -c "$CTL_CLEAR_ALARM" >/dev/null
  wait_alarms 0 'no alarms in effect'
fi

# --- vhosts, users, permissions ------------------------------------------------------------
expect "vhost '$vh' declared" declare vhost --name "$vh" --description "ctl test" --tags a,b
expect "\\| $vh +\\| ctl test +\\| a,b" list vhosts
expect "permissions of '$api_user' in vhost '$vh' declared" \
  declare permission --vhost "$vh" --user "$api_user" --configure '.*' --write '.*' --read '.*'
expect "user '$user' declared" declare user --name "$user" --password s3cret --tags monitoring
expect "\\| $user +\\| monitoring" list users
# A RabbitMQ SHA-256 password hash: base64(salt ++ sha256(salt ++ password)).
hash="$(python3 -c 'import base64, hashlib, os
salt = os.urandom(4)
print(base64.b64encode(salt + hashlib.sha256(salt + b"hashed-pw").digest()).decode())')"
expect "user '$hashed_user' declared" declare user --name "$hashed_user" \
  --password-hash "$hash" --hashing-algorithm rabbit_password_hashing_sha256 --tags management
expect "permissions of '$user' in vhost '$vh' declared" \
  declare permission --vhost "$vh" --user "$user" --configure '^c' --write '^w' --read '.*'
expect "permissions of '$hashed_user' in vhost '$vh' declared" \
  declare permission --vhost "$vh" --user "$hashed_user" --configure '.*' --write '.*' --read '.*'
expect "\\| $user +\\| $vh +\\| \\^c +\\| \\^w +\\| \\.\\* +\\|" list permissions --vhost "$vh"
expect "\\| $user +\\| $vh" list permissions --all-vhosts
# The hashed password works: the user logs in with it.
expect '^No items$' -u "$hashed_user" -p hashed-pw list queues --vhost "$vh"
expect_error ': 401 ' -u "$hashed_user" -p wrong list queues --vhost "$vh"
expect "topic permissions of '$user' on 'amq.topic' in vhost '$vh' declared" \
  declare topic-permission --vhost "$vh" --user "$user" --exchange amq.topic --write '^a' \
  --read '.*'
expect "\\| $user +\\| $vh +\\| amq.topic +\\| \\^a +\\|" list topic-permissions --vhost "$vh"
expect "$user" list topic-permissions --all-vhosts

# --- exchanges, queues, bindings -----------------------------------------------------------
expect "exchange 'ex' declared" declare exchange --vhost "$vh" --name ex --type topic
expect "exchange 'ex2' declared" declare exchange --vhost "$vh" --name ex2 --type fanout \
  --durable false --auto-delete
expect '\| ex +\| topic +\| true +\| false' list exchanges --vhost "$vh"
expect '\| ex2 +\| fanout +\| false +\| true' list exchanges --vhost "$vh"
expect "queue 'q1' declared" declare queue --vhost "$vh" --name q1 \
  --arguments '{"x-max-length":100}'
# Warren has classic queues and streams: quorum queues are refused with RabbitMQ's
# precondition text (400 from the API, exit 1 from ctl), never served as classic ones.
warren=""
if ctl status --json | grep -q '"warren_product": "Warren"'; then
  warren=1
  expect_error "queue type 'quorum' is not supported by Warren yet" declare queue \
    --vhost "$vh" --name q2 --type quorum
  expect "queue 'q2' declared" declare queue --vhost "$vh" --name q2 --type classic
  expect '\| q2 +\| classic +\| true' list queues --vhost "$vh"
else
  expect "queue 'q2' declared" declare queue --vhost "$vh" --name q2 --type quorum
fi
expect "queue 'q3' declared" declare queue --vhost "$vh" --name q3 --type stream
expect "queue 'q4' declared" declare queue --vhost "$vh" --name q4 --durable false \
  --auto-delete --type classic
expect '\| q1 +\| classic +\| true +\| false' list queues --vhost "$vh"
if [[ -z "$warren" ]]; then
  expect '\| q2 +\| quorum +\| true' list queues --vhost "$vh"
fi
expect '\| q3 +\| stream +\| true' list queues --vhost "$vh"
expect '\| q4 +\| classic +\| false +\| true' list queues --vhost "$vh"
expect "\\| $vh +\\| q1 " list queues --all-vhosts
expect '"x-max-length": 100' list queues --vhost "$vh" --json
expect "binding 'ex' -> 'q1' declared" declare binding --vhost "$vh" --source ex \
  --destination q1 --routing-key a.b
expect "binding 'ex' -> 'q1' declared" declare binding --vhost "$vh" --source ex \
  --destination q1 --routing-key 'c.#' --arguments '{"x-note":"two"}'
expect "binding 'ex' -> 'ex2' declared" declare binding --vhost "$vh" --source ex \
  --destination ex2 --destination-type exchange --routing-key e.k
expect '\| ex +\| q1 +\| queue +\| a\.b ' list bindings --vhost "$vh"
expect '\| ex +\| q1 +\| queue +\| c\.# +\| \{"x-note":"two"\}' list bindings --vhost "$vh"
expect '\| ex +\| ex2 +\| exchange +\| e\.k ' list bindings --vhost "$vh"
expect "\\| $vh +\\| ex " list bindings --all-vhosts

# --- publish, get, purge -------------------------------------------------------------------
expect '^routed: true$' publish --vhost "$vh" --exchange ex --routing-key a.b --payload hello
expect '^routed: false$' publish --vhost "$vh" --exchange ex --routing-key nowhere --payload x
expect '^routed: true$' publish --vhost "$vh" --routing-key q1 --payload 'second one' \
  --properties '{"delivery_mode":2}'
expect '\| a\.b +\| ex +\| 1 +\| false .*\| hello +\|' get --vhost "$vh" --queue q1
expect '\| a\.b +\| ex +\| 1 +\| true .*\| hello +\|' get --vhost "$vh" --queue q1 --count 1 \
  --ackmode ack_requeue_false
expect '"payload": "second one"' get --vhost "$vh" --queue q1 --count 5 --json
expect "queue 'q1' purged" purge queue --vhost "$vh" --name q1
expect '^No items$' get --vhost "$vh" --queue q1 --ackmode ack_requeue_false

# --- connections, channels, consumers (none here: the lists must still come back) ---------
expect '^(No items$|\+)' list connections --vhost "$vh"
expect '^(No items$|\+)' list connections --all-vhosts
expect '^(No items$|\+)' list channels --vhost "$vh"
expect '^(No items$|\+)' list channels --all-vhosts
expect '^(No items$|\+)' list consumers --vhost "$vh"
expect '^(No items$|\+)' list consumers --all-vhosts
expect '^\[' list connections --json

# --- stream connections, publishers, consumers (RabbitMQ: with rabbitmq_stream_management) -
if [[ -n "$warren" ]] || ctl list stream-connections --all-vhosts >/dev/null 2>&1; then
  for kind in stream-connections stream-publishers stream-consumers; do
    expect '^(No items$|\+)' list "$kind" --vhost "$vh"
    expect '^\[' list "$kind" --all-vhosts --json
  done
  expect '^(No items$|\+)' list stream_publishers --vhost "$vh"
fi
# A fresh stream tracks no consumer offset and no writer sequence.
if [[ -n "$warren" ]]; then
  expect '^No items$' list stream-tracking --vhost "$vh" --stream q3
  expect '^No items$' list stream-tracking --vhost "$vh" --stream q3 --type writer
  expect '"offsets": \{\}' list stream-tracking --vhost "$vh" --stream q3 --json
  expect_error 'needs --stream' list stream-tracking --vhost "$vh"
  expect_error '404' list stream-tracking --vhost "$vh" --stream q1
fi

# --- policies, operator policies, limits ---------------------------------------------------
expect "policy 'p1' declared" declare policy --vhost "$vh" --name p1 --pattern '^q1$' \
  --definition '{"max-length":10}' --priority 1 --apply-to queues
expect '\| p1 +\| \^q1\$ +\| queues +\| 1 +\| \{"max-length":10\}' list policies --vhost "$vh"
expect "operator policy 'op1' declared" declare operator-policy --vhost "$vh" --name op1 \
  --pattern '.*' --definition '{"max-length":20}' --apply-to queues
expect '\| op1 +\| \.\* +\| queues +\| 0 ' list operator-policies --vhost "$vh"
expect "\\| $vh +\\| p1 " list policies --all-vhosts
expect "limit max-queues of vhost '$vh' set to 100" \
  declare vhost-limit --vhost "$vh" --name max-queues --value 100
expect "limit max-connections of vhost '$vh' set to 10" \
  declare vhost-limit --vhost "$vh" --name max-connections --value 10
expect "\\| $vh +\\| .*\"max-queues\":100" list vhost-limits --vhost "$vh"
expect "\"max-connections\":10" list vhost-limits --all-vhosts

# --- definitions ---------------------------------------------------------------------------
expect "definitions exported to $tmp/defs.json" export "$tmp/defs.json"
grep -q "\"$vh\"" "$tmp/defs.json" || fail "export: $vh missing from $tmp/defs.json"
grep -q '"q2"' "$tmp/defs.json" || fail "export: q2 missing from $tmp/defs.json"
expect '"vhosts"' export
cat >"$tmp/import.json" <<JSON
{"queues": [{"name": "q-imported", "vhost": "$vh", "durable": true, "auto_delete": false,
  "arguments": {}}],
 "exchanges": [{"name": "ex-imported", "vhost": "$vh", "type": "direct", "durable": true,
  "auto_delete": false, "internal": false, "arguments": {}}],
 "bindings": [{"source": "ex-imported", "vhost": "$vh", "destination": "q-imported",
  "destination_type": "queue", "routing_key": "imp", "arguments": {}}]}
JSON
expect "definitions imported from $tmp/import.json" import "$tmp/import.json"
expect '\| q-imported ' list queues --vhost "$vh"
expect '\| ex-imported +\| q-imported +\| queue +\| imp ' list bindings --vhost "$vh"
echo '{not json' >"$tmp/bad.json"
expect_error 'not JSON' import "$tmp/bad.json"

# --- errors --------------------------------------------------------------------------------
expect_error "^warren ctl: DELETE /api/queues/$prefix-vh/nope: 404 Object Not Found: Not Found" \
  delete queue --vhost "$vh" --name nope
expect_error '^warren ctl: GET /api/queues/no-such-vhost: 404 ' list queues --vhost no-such-vhost
expect_error 'no binding with routing key' delete binding --vhost "$vh" --source ex \
  --destination q1 --routing-key nope
free="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')"
expect_error "cannot connect to 127.0.0.1:$free .*--http-port" status --host 127.0.0.1 \
  --port "$free"

# --- deletes -------------------------------------------------------------------------------
expect "limit max-queues of vhost '$vh' deleted" delete vhost-limit --vhost "$vh" \
  --name max-queues
expect_absent 'max-queues' list vhost-limits --vhost "$vh"
expect "operator policy 'op1' deleted" delete operator-policy --vhost "$vh" --name op1
expect_absent 'op1' list operator-policies --vhost "$vh"
expect "policy 'p1' deleted" delete policy --vhost "$vh" --name p1
expect_absent 'p1' list policies --vhost "$vh"
expect "binding with routing key 'c.#' deleted" delete binding --vhost "$vh" --source ex \
  --destination q1 --routing-key 'c.#'
expect "binding with routing key 'e.k' deleted" delete binding --vhost "$vh" --source ex \
  --destination ex2 --destination-type exchange --routing-key e.k
expect_absent '(c\.#|e\.k)' list bindings --vhost "$vh"
expect '\| ex +\| q1 +\| queue +\| a\.b ' list bindings --vhost "$vh"
expect "queue 'q1' deleted" delete queue --vhost "$vh" --name q1 --if-empty
expect "queue 'q2' deleted" delete queue --vhost "$vh" --name q2
expect "queue 'q3' deleted" delete queue --vhost "$vh" --name q3
expect "queue 'q4' deleted" delete queue --vhost "$vh" --name q4 --if-unused
expect_absent '\| q[1-4] ' list queues --vhost "$vh"
expect "exchange 'ex' deleted" delete exchange --vhost "$vh" --name ex
expect "exchange 'ex2' deleted" delete exchange --vhost "$vh" --name ex2 --if-unused
expect_absent '\| ex2? ' list exchanges --vhost "$vh"
expect "topic permissions of '$user' in vhost '$vh' deleted" \
  delete topic-permission --vhost "$vh" --user "$user"
expect_absent "$user" list topic-permissions --vhost "$vh"
expect "permissions of '$user' in vhost '$vh' deleted" \
  delete permission --vhost "$vh" --user "$user"
expect_absent "$user" list permissions --vhost "$vh"
expect "user '$user' deleted" delete user --name "$user"
expect "user '$hashed_user' deleted" delete user --name "$hashed_user"
expect_absent "$prefix" list users
expect "vhost '$vh' deleted" delete vhost --name "$vh"
expect_absent "$vh" list vhosts

echo "ctl: all $checks checks passed"
