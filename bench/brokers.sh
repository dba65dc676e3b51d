# shellcheck shell=bash
# Starting and stopping the two brokers that Warren's benchmarks compare: a private RabbitMQ
# node and Warren, and the few helpers the benchmark scripts share (RSS sampler, disk check,
# chart font). Sourced by bench/compare.sh, bench/lazy_queue.sh and bench/backlog.sh; not
# run by itself.
#
# The sourcing script sets REPO_ROOT and work_dir (a temporary directory it removes) before
# calling these, and stops both brokers in its EXIT trap (stop_warren, stop_rabbitmq).
#
# RabbitMQ comes from Debian's rabbitmq-server package (installed when missing). Its node
# gets its own name, ports, config, mnesia and log directories under work_dir, and runs as
# the invoking user, so a node already running on this machine is not touched. Warren is
# the release build (see warren_binary), built when missing.

work_dir="${work_dir:-}" # set by the sourcing script before starting a broker
# A loaded machine starts RabbitMQ (and its feature flags) slowly: WARREN_BENCH_READY_TIMEOUT_S.
readonly BROKER_READY_TIMEOUT_S="${WARREN_BENCH_READY_TIMEOUT_S:-120}"
readonly BROKER_STOP_TIMEOUT_S=30

rabbit_pid=""      # the rabbitmq-server script, which stops the node on SIGTERM
rabbit_beam_pid="" # the Erlang VM doing the work, whose CPU and memory are measured
rabbit_node=""
rabbit_port=""
rabbit_dist_port=""
rabbit_env=()
rabbit_version=""
# Set rabbit_management=1 before start_rabbitmq to enable the management plugin; its HTTP API
# then listens on 127.0.0.1:$rabbit_http_port.
rabbit_management="${rabbit_management:-}"
rabbit_http_port=""
# Set when RABBITMQ_BENCH_PLUGINS enables rabbitmq_stream: the node's stream protocol port
# (stream.listeners.tcp.default), also its advertised port, on 127.0.0.1.
rabbit_stream_port=""
warren_pid=""
warren_port=""
# The stream protocol port, when the binary has --stream-port (empty otherwise).
warren_stream_port=""
warren_http_port=""
warren_prometheus_port=""
warren_data_dir=""
warren_log="" # the broker's stdout and stderr (its tracing output)
warren_config="${warren_config:-}" # a TOML config file for Warren (--config), when set
# warren_management=off starts Warren without its HTTP API and Prometheus listeners.
warren_management="${warren_management:-on}"

# perf_command: the load tool, one word a line: WARREN_PERF_BIN (a warren-perf binary, from
# `cargo build --release -p warren-perf`) when set, else the broker binary's `perf`.
perf_command() {
  if [[ -n "${WARREN_PERF_BIN:-}" ]]; then
    echo "$WARREN_PERF_BIN"
  else
    printf '%s\n' "$(warren_binary)" perf
  fi
}

# warren_binary: the broker to start: WARREN_BROKER_BIN, else the release build in
# CARGO_TARGET_DIR (when set) or <repo>/target.
warren_binary() {
  echo "${WARREN_BROKER_BIN:-${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/warren}"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# wait_for_tcp PID PORT SECONDS: polls until a connect succeeds or the process exits.
wait_for_tcp() {
  local pid="$1" port="$2" deadline=$((SECONDS + $3))
  while [[ $SECONDS -lt $deadline ]]; do
    kill -0 "$pid" 2>/dev/null || return 1
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    sleep 0.2
  done
  return 1
}

# cpu_ticks PID: utime + stime of the process (all its threads), in clock ticks.
cpu_ticks() {
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  local fields
  read -ra fields <<<"${stat##*) }"  # after "pid (comm) ", the state is field 3
  echo $((fields[11] + fields[12]))  # fields 14 and 15: utime, stime
}

install_rabbitmq() {
  if [[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]]; then
    return 0
  fi
  echo "bench: installing Debian's rabbitmq-server"
  if ! { apt-get update -qq \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server; }; then
    echo "bench: could not install rabbitmq-server; as root: apt-get install rabbitmq-server"
    return 1
  fi
}

# set_rabbitmq_env: the environment of the private node, for the server and rabbitmqctl.
set_rabbitmq_env() {
  local base="$work_dir/rabbitmq"
  rabbit_env=(HOME="$base/home"
    RABBITMQ_NODENAME="$rabbit_node" RABBITMQ_NODE_PORT="$rabbit_port"
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_DIST_PORT="$rabbit_dist_port"
    RABBITMQ_MNESIA_BASE="$base/mnesia" RABBITMQ_LOG_BASE="$base/log"
    RABBITMQ_CONFIG_FILE="$base/rabbitmq" RABBITMQ_ADVANCED_CONFIG_FILE="$base/advanced.config"
    RABBITMQ_CONF_ENV_FILE="$base/rabbitmq-env.conf"
    RABBITMQ_ENABLED_PLUGINS_FILE="$base/enabled_plugins"
    RABBITMQ_PID_FILE="$base/rabbitmq.pid")
}

rabbitmqctl_private() {
  env "${rabbit_env[@]}" timeout 60 /usr/lib/rabbitmq/bin/rabbitmqctl -n "$rabbit_node" "$@"
}

# start_rabbitmq: starts the private node; sets rabbit_port, rabbit_beam_pid, rabbit_version.
start_rabbitmq() {
  install_rabbitmq || return 1
  local base="$work_dir/rabbitmq"
  mkdir -p "$base/home" "$base/mnesia" "$base/log"
  : >"$base/rabbitmq.conf"
  : >"$base/rabbitmq-env.conf"
  # RABBITMQ_BENCH_PLUGINS: plugins to enable, comma-separated Erlang atoms
  # (rabbitmq_consistent_hash_exchange for bench/features.sh).
  echo "[${RABBITMQ_BENCH_PLUGINS:-}]." >"$base/enabled_plugins"
  rabbit_port="$(free_port)" && rabbit_dist_port="$(free_port)" || return 1
  if [[ -n "$rabbit_management" ]]; then
    rabbit_http_port="$(free_port)" || return 1
    echo "[rabbitmq_management${RABBITMQ_BENCH_PLUGINS:+,$RABBITMQ_BENCH_PLUGINS}]." \
      >"$base/enabled_plugins"
    printf 'management.tcp.ip = 127.0.0.1\nmanagement.tcp.port = %s\n' "$rabbit_http_port" \
      >"$base/rabbitmq.conf"
  fi
  if [[ ",${RABBITMQ_BENCH_PLUGINS:-}," == *,rabbitmq_stream,* ]]; then
    # Clients reconnect to the advertised address, so it is the private port on loopback.
    rabbit_stream_port="$(free_port)" || return 1
    {
      echo "stream.listeners.tcp.default = 127.0.0.1:$rabbit_stream_port"
      echo "stream.advertised_host = 127.0.0.1"
      echo "stream.advertised_port = $rabbit_stream_port"
    } >>"$base/rabbitmq.conf"
  fi
  rabbit_node="warren-bench-$$@localhost"
  echo "rabbitmq: starting node $rabbit_node on 127.0.0.1:$rabbit_port in $base"
  set_rabbitmq_env
  env "${rabbit_env[@]}" /usr/lib/rabbitmq/bin/rabbitmq-server >"$base/server.log" 2>&1 \
    </dev/null &
  rabbit_pid=$!
  if ! wait_for_tcp "$rabbit_pid" "$rabbit_port" "$BROKER_READY_TIMEOUT_S" \
      || ! rabbitmqctl_private await_startup >/dev/null 2>&1; then
    echo "rabbitmq: node did not start; last lines of its logs:"
    tail -n 30 "$base/server.log" "$base"/log/*.log 2>/dev/null || true
    return 1
  fi
  rabbit_beam_pid="$(rabbitmqctl_private eval 'os:getpid().' 2>/dev/null | tr -dc '0-9')" \
    || true
  if [[ -z "$rabbit_beam_pid" || ! -r "/proc/$rabbit_beam_pid/stat" ]]; then
    echo "rabbitmq: could not find the node's beam.smp pid (rabbitmqctl eval 'os:getpid().')"
    return 1
  fi
  rabbit_version="$(rabbitmqctl_private eval 'rabbit_misc:version().' 2>/dev/null \
    | tr -d '"')" || true
  echo "rabbitmq: version $rabbit_version, beam.smp pid $rabbit_beam_pid"
  if [[ -n "$rabbit_management" ]]; then
    if ! wait_for_tcp "$rabbit_pid" "$rabbit_http_port" "$BROKER_READY_TIMEOUT_S"; then
      echo "rabbitmq: management HTTP API not listening on $rabbit_http_port"
      return 1
    fi
    echo "rabbitmq: management HTTP API on 127.0.0.1:$rabbit_http_port"
  fi
  if [[ -n "$rabbit_stream_port" ]]; then
    if ! wait_for_tcp "$rabbit_pid" "$rabbit_stream_port" "$BROKER_READY_TIMEOUT_S"; then
      echo "rabbitmq: stream protocol not listening on $rabbit_stream_port"
      return 1
    fi
    echo "rabbitmq: stream protocol on 127.0.0.1:$rabbit_stream_port"
  fi
}

stop_rabbitmq() {
  [[ -n "$rabbit_pid" ]] || return 0
  kill -TERM "$rabbit_pid" 2>/dev/null || true
  stop_wait "$rabbit_pid" rabbitmq
  if [[ -n "$rabbit_beam_pid" ]] && kill -0 "$rabbit_beam_pid" 2>/dev/null; then
    kill -KILL "$rabbit_beam_pid" 2>/dev/null || true
  fi
  rabbit_pid=""
  rabbit_beam_pid=""
  rabbit_stream_port=""
}

# start_warren: builds Warren when missing and starts it on a free port with a fresh data
# directory, with --config "$warren_config" when that is set; sets warren_pid, warren_port,
# warren_data_dir and warren_log. The broker's log filter is WARREN_BENCH_RUST_LOG (default
# info), so a RUST_LOG set for other work does not hide the INFO lines the benchmarks read.
start_warren() {
  local binary
  binary="$(warren_binary)"
  if [[ ! -x "$binary" ]]; then
    echo "warren: $binary missing; cargo build --release (or set WARREN_BROKER_BIN)"
    (cd "$REPO_ROOT" && cargo build --release) || return 1
    if [[ ! -x "$binary" ]]; then
      echo "warren: still no $binary after the build; set WARREN_BROKER_BIN to the binary"
      return 1
    fi
  fi
  warren_port="$(free_port)" || return 1
  # Free ports for the management API and Prometheus too: 15672/15692 may be RabbitMQ's.
  warren_http_port="$(free_port)" || return 1
  warren_prometheus_port="$(free_port)" || return 1
  warren_data_dir="$work_dir/warren/data"
  warren_log="$work_dir/warren/broker.log"
  mkdir -p "$warren_data_dir"
  warren_stream_port=""
  if "$binary" server --help 2>/dev/null | grep -q -- '--stream-port'; then
    warren_stream_port="$(free_port)" || return 1
  fi
  echo "warren: starting $binary on 127.0.0.1:$warren_port in $work_dir/warren" \
    "(management $warren_management)"
  launch_warren "$warren_log"
  if ! wait_for_tcp "$warren_pid" "$warren_port" "$BROKER_READY_TIMEOUT_S"; then
    if kill -0 "$warren_pid" 2>/dev/null; then
      echo "warren: not accepting TCP on $warren_port after ${BROKER_READY_TIMEOUT_S}s"
    else
      local status=0
      wait "$warren_pid" || status=$?
      echo "warren: exited with status $status before accepting TCP on $warren_port"
      warren_pid=""
    fi
    echo "warren: last lines of its log:"
    tail -n 30 "$warren_log" || true
    return 1
  fi
  echo "warren: pid $warren_pid${warren_stream_port:+, stream protocol on $warren_stream_port}"
}

# launch_warren LOG: starts Warren in the background with the ports, data directory, config
# and management setting in the warren_* variables (as start_warren chose them; a restart
# passes the same again), its output in LOG; sets warren_pid.
launch_warren() {
  local config=() stream=() management=(--http-port "$warren_http_port" \
    --prometheus-port "$warren_prometheus_port")
  [[ -z "$warren_config" ]] || config=(--config "$warren_config")
  [[ -z "$warren_stream_port" ]] || stream=(--stream-port "$warren_stream_port")
  [[ "$warren_management" != off ]] || management=(--no-management --no-prometheus)
  RUST_LOG="${WARREN_BENCH_RUST_LOG:-info}" "$(warren_binary)" server \
    --bind-address 127.0.0.1 --amqp-port "$warren_port" --data-dir "$warren_data_dir" \
    ${config[@]+"${config[@]}"} ${stream[@]+"${stream[@]}"} "${management[@]}" \
    >"$1" 2>&1 </dev/null &
  warren_pid=$!
}

stop_warren() {
  [[ -n "$warren_pid" ]] || return 0
  kill -TERM "$warren_pid" 2>/dev/null || true
  stop_wait "$warren_pid" warren
  warren_pid=""
}

# stop_wait PID NAME: waits for a SIGTERMed child, then kills it if it lingers.
stop_wait() {
  local pid="$1" deadline=$((SECONDS + BROKER_STOP_TIMEOUT_S))
  while kill -0 "$pid" 2>/dev/null && [[ $SECONDS -lt $deadline ]]; do
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "$2: still running ${BROKER_STOP_TIMEOUT_S}s after SIGTERM; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

# --- shared by the scripts that sample a broker and draw charts -----------------------------

readonly CHART_FONT=/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
sampler_pid="" # the background RSS sampler a script started, if any

# stop_sampler: stops the sampler started by the sourcing script (it sets sampler_pid).
stop_sampler() {
  [[ -n "$sampler_pid" ]] || return 0
  kill -TERM "$sampler_pid" 2>/dev/null || true
  wait "$sampler_pid" 2>/dev/null || true
  sampler_pid=""
}

# require_free_mib NAME NEED_MIB: exits when the disk holding work_dir has less free space.
require_free_mib() {
  local name="$1" need_mib="$2" free_mib
  free_mib="$(df -Pm "$work_dir" | awk 'NR == 2 { print $4 }')"
  if [[ "$free_mib" -lt "$need_mib" ]]; then
    echo "$name: $free_mib MiB free in $(dirname "$work_dir"), $need_mib MiB wanted;" \
      "free space or set TMPDIR to a larger disk" >&2
    exit 1
  fi
}

# say TEXT...: prints a line and, once the sourcing script has set summary, keeps it there.
say() {
  echo "$*"
  if [[ -n "${summary:-}" ]]; then
    echo "$*" >>"$summary"
  fi
}

# chart_tools NAME CSV: sets plot to warren-plot (WARREN_PLOT_BIN, else the release build,
# built when missing) and installs the chart font; CSV is named when either fails.
chart_tools() {
  local name="$1" csv="$2"
  plot="${WARREN_PLOT_BIN:-${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/warren-plot}"
  if [[ ! -x "$plot" ]]; then
    echo "$name: building warren-plot: cargo build --release -p warren-plot"
    (cd "$REPO_ROOT" && cargo build --release -p warren-plot) || {
      echo "$name: cannot build warren-plot (or set WARREN_PLOT_BIN); the CSV is $csv"
      return 1
    }
  fi
  install_chart_font "$name" "$csv"
}

# install_chart_font NAME CSV: warren-plot draws text with DejaVu Sans from Debian's
# fonts-dejavu-core; installs it when missing (CSV is named when that fails).
install_chart_font() {
  local name="$1" csv="$2"
  [[ ! -f "$CHART_FONT" ]] || return 0
  echo "$name: installing Debian's fonts-dejavu-core for the chart text"
  if ! { apt-get update -qq \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-dejavu-core; }; then
    echo "$name: cannot install fonts-dejavu-core; as root: apt-get install" \
      "fonts-dejavu-core. The CSV is $csv"
    return 1
  fi
}
