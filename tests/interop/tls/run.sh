#!/usr/bin/env bash
# run.sh warren|rabbitmq: starts that broker with a rabbitmq.conf of TLS settings on free
# loopback ports (temporary data dir, log captured), then runs the TLS suites against it:
# pika (tls_pika.py), HTTPS for the management API and Prometheus (curl), and a plain-TCP
# AMQP client on the TLS port. Its last line is `tls: N passed, M failed`; exits non-zero on
# a failure.
#   WARREN_BROKER_BIN   Warren binary (default <repo>/target/release/warren)
#   WARREN_TOOLS_DIR    where the venv and Java jars live (default <repo>/.tools)
#   TLS_EXTRA_SUITES    client suites after pika (default "go java": go.sh, java.sh)
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)" || exit 1
readonly REPO_ROOT HERE="$REPO_ROOT/tests/interop/tls"
readonly TOOLS_DIR="${WARREN_TOOLS_DIR:-$REPO_ROOT/.tools}"
readonly USER_NAME=tls-user USER_PASS=tls-pass
kind="${1:-}"
work_dir="${work_dir:-$(mktemp -d /tmp/warren-tls.XXXXXX)}"
# shellcheck source=../../../bench/brokers.sh
source "$REPO_ROOT/bench/brokers.sh"
passed=0
failed=0
broker_log=""

check() { # check NAME COMMAND...: one counted check
  local name="$1"
  shift
  if "$@"; then
    passed=$((passed + 1))
    echo "tls: ok $name"
  else
    failed=$((failed + 1))
    echo "tls: FAIL $name"
  fi
}

cleanup() {
  stop_warren
  stop_rabbitmq
  rm -rf "$work_dir"
}

# write_conf FILE: the rabbitmq.conf both brokers read.
write_conf() {
  local c="$work_dir/certs"
  cat >"$1" <<CONF
listeners.tcp.default = 127.0.0.1:$amqp_port
listeners.ssl.default = 127.0.0.1:$amqps_port
ssl_options.cacertfile = $c/ca.pem
ssl_options.certfile = $c/server.pem
ssl_options.keyfile = $c/server.key
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = false
auth_mechanisms.1 = PLAIN
auth_mechanisms.2 = AMQPLAIN
auth_mechanisms.3 = EXTERNAL
ssl_cert_login_from = common_name
management.tcp.ip = 127.0.0.1
management.tcp.port = $http_port
management.ssl.ip = 127.0.0.1
management.ssl.port = $https_port
management.ssl.cacertfile = $c/ca.pem
management.ssl.certfile = $c/server.pem
management.ssl.keyfile = $c/server.key
prometheus.tcp.ip = 127.0.0.1
prometheus.tcp.port = $prom_port
prometheus.ssl.ip = 127.0.0.1
prometheus.ssl.port = $proms_port
prometheus.ssl.cacertfile = $c/ca.pem
prometheus.ssl.certfile = $c/server.pem
prometheus.ssl.keyfile = $c/server.key
CONF
}

start_rabbit_tls() {
  install_rabbitmq || return 1
  local base="$work_dir/rabbitmq"
  mkdir -p "$base/home" "$base/mnesia" "$base/log"
  rabbit_port="$amqp_port" rabbit_dist_port="$(free_port)"
  rabbit_node="warren-tls-$$@localhost"
  set_rabbitmq_env
  write_conf "$base/rabbitmq.conf"
  : >"$base/rabbitmq-env.conf"
  echo "[rabbitmq_management,rabbitmq_auth_mechanism_ssl,rabbitmq_prometheus]." \
    >"$base/enabled_plugins"
  env "${rabbit_env[@]}" /usr/lib/rabbitmq/bin/rabbitmq-server >"$base/server.log" 2>&1 \
    </dev/null &
  rabbit_pid=$!
  broker_log="$base/log/$rabbit_node.log"
  wait_for_tcp "$rabbit_pid" "$amqps_port" "$BROKER_READY_TIMEOUT_S" \
    && rabbitmqctl_private await_startup >/dev/null 2>&1 \
    && wait_for_tcp "$rabbit_pid" "$https_port" "$BROKER_READY_TIMEOUT_S" || {
    echo "tls: RabbitMQ did not start"; tail -n 30 "$base/server.log" "$base"/log/*.log
    return 1
  }
  rabbit_beam_pid="$(rabbitmqctl_private eval 'os:getpid().' 2>/dev/null | tr -dc '0-9')"
}

start_warren_tls() {
  local bin
  bin="$(warren_binary)"
  [[ -x "$bin" ]] || { echo "tls: no Warren binary at $bin"; return 1; }
  warren_data_dir="$work_dir/warren-data"
  mkdir -p "$warren_data_dir"
  write_conf "$work_dir/rabbitmq.conf"
  echo "data_dir = $warren_data_dir" >>"$work_dir/rabbitmq.conf"
  broker_log="$work_dir/warren.log"
  RUST_LOG=info "$bin" server --stream-port 0 --config "$work_dir/rabbitmq.conf" >"$broker_log" 2>&1 \
    </dev/null &
  warren_pid=$!
  wait_for_tcp "$warren_pid" "$amqps_port" 30 && wait_for_tcp "$warren_pid" "$https_port" 30 \
    || { echo "tls: Warren did not start; its log:"; tail -n 30 "$broker_log"; return 1; }
}

# api METHOD PATH [BODY]: the management API over HTTPS as guest.
api() {
  curl -sS -f --max-time 10 --cacert "$work_dir/certs/ca.pem" -u guest:guest \
    -H 'content-type: application/json' -X "$1" "https://localhost:$https_port$2" \
    ${3:+--data "$3"}
}

create_user() {
  api PUT "/api/users/$USER_NAME" "{\"password\":\"$USER_PASS\",\"tags\":\"\"}" \
    && api PUT "/api/permissions/%2F/$USER_NAME" '{"configure":".*","write":".*","read":".*"}'
}

https_overview() {
  local body
  body="$(api GET /api/overview)" && [[ "$body" == *'"management_version"'* ]]
}
https_wrong_ca_refused() {
  ! curl -sS --max-time 10 --cacert "$work_dir/certs/wrongca.pem" \
    "https://localhost:$https_port/api/overview" >/dev/null 2>&1
}
https_prometheus() {
  local body
  body="$(curl -sS -f --max-time 10 --cacert "$work_dir/certs/ca.pem" \
    "https://localhost:$proms_port/metrics")" && [[ "$body" == *$'\nrabbitmq_'* ]]
}

# plain_tcp_refused: an AMQP 0-9-1 header in clear on the TLS port gets no AMQP answer.
plain_tcp_refused() {
  local reply
  reply="$(python3 - "$amqps_port" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"AMQP\x00\x00\x09\x01")
try:
    data = s.recv(4096)
except OSError as err:
    data = b""
print(repr(data[:40]))
PY
)"
  echo "tls: plain AMQP header on the TLS port got $reply"
  [[ "$reply" != *"connection.start"* && "$reply" != "b'\\x01\\x00\\x00"* ]]
}

good_client_after() { "$venv_py" "$HERE/tls_pika.py" "$work_dir/certs" 127.0.0.1 \
  "$amqps_port" "$USER_NAME" "$USER_PASS" plain_login_no_client_cert >/dev/null; }

# handshake_logged: Warren names a failed handshake and its peer; RabbitMQ's lines are shown.
handshake_logged() {
  sleep 0.5
  local lines
  lines="$(grep -i 'tls handshake\|tls.*fail\|handshake.*fail\|certificate' "$broker_log" \
    | tail -n 8)"
  echo "tls: broker log lines about TLS failures:"
  echo "${lines:-  (none)}" | sed 's/^/    /'
  [[ "$kind" == rabbitmq ]] || grep -qi 'tls handshake.*127\.0\.0\.1' "$broker_log"
}

ensure_venv() {
  venv_py="$TOOLS_DIR/venv/bin/python"
  if ! "$venv_py" -c 'import pika' 2>/dev/null; then
    python3 -m venv "$TOOLS_DIR/venv" \
      && "$TOOLS_DIR/venv/bin/pip" install -q -r "$REPO_ROOT/tests/interop/requirements.txt"
  fi
}

# start_tls_broker KIND: certificates, free ports and the broker of that kind with TLS.
start_tls_broker() {
  bash "$HERE/certs.sh" "$work_dir/certs" >/dev/null || return 1
  amqp_port="$(free_port)" amqps_port="$(free_port)" http_port="$(free_port)"
  https_port="$(free_port)" prom_port="$(free_port)" proms_port="$(free_port)"
  case "$1" in
    rabbitmq) start_rabbit_tls ;;
    warren) start_warren_tls ;;
    *) echo "usage: run.sh warren|rabbitmq"; exit 2 ;;
  esac
}

main() {
  trap cleanup EXIT
  ensure_venv || { echo "tls: no venv with pika"; echo "tls: 0 passed, 1 failed"; exit 1; }
  start_tls_broker "$kind" || { echo "tls: 0 passed, 1 failed"; exit 1; }
  echo "tls: $kind up: amqps 127.0.0.1:$amqps_port, https $https_port, prometheus $proms_port"
  check https_management_overview https_overview
  check https_wrong_ca_refused https_wrong_ca_refused
  check https_prometheus_metrics https_prometheus
  check create_tls_user create_user
  if "$venv_py" "$HERE/tls_pika.py" "$work_dir/certs" 127.0.0.1 "$amqps_port" \
      "$USER_NAME" "$USER_PASS"; then
    check pika_suite true
  else
    check pika_suite false
  fi
  check plain_tcp_on_tls_port_refused plain_tcp_refused
  check good_client_after_plain_tcp good_client_after
  check failed_handshake_logged handshake_logged
  if [[ -n "${TLS_EXTRA_SUITES-go java}" ]]; then
    for suite in ${TLS_EXTRA_SUITES-go java}; do
      check "$suite" bash "$HERE/$suite.sh" "$work_dir/certs" "$amqps_port" "$USER_NAME" \
        "$USER_PASS"
    done
  fi
  echo "tls: $kind done"
  echo "tls: $passed passed, $failed failed"
  [[ $failed -eq 0 ]]
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main
fi
