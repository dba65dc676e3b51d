#!/usr/bin/env bash
# End-to-end test of the management web UI in headless Chromium (run.py) against a running
# broker. Installs Debian's chromium with apt-get when it is missing.
#
# Usage: run.sh HTTP_URL [AMQP_URL]   (default $WARREN_HTTP_URL, $WARREN_AMQP_URL)
#        run.sh --install-only       (only the chromium install; .ci/prefetch runs it)
#   PYTHON          interpreter with websocket-client (and pika) [default: the CI venv's
#                   $WARREN_TOOLS_DIR/venv/bin/python when present, else python3]
#   WARREN_UI_OUT   screenshot directory [default: tests/interop/ui/out]
# Prints "N passed, N failed" and exits non-zero when a check failed.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
install_chromium() {
  command -v chromium >/dev/null && return 0
  echo "ui: installing chromium with apt-get"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
    >/dev/null || { echo "ui: apt-get install chromium failed"; exit 1; }
}
if [[ "${1:-}" == --install-only ]]; then
  install_chromium
  exit 0
fi
http_url="${1:-${WARREN_HTTP_URL:-}}"
amqp_url="${2:-${WARREN_AMQP_URL:-}}"
if [[ -z "$http_url" ]]; then
  echo "usage: run.sh HTTP_URL [AMQP_URL]"
  exit 2
fi
tools_dir="${WARREN_TOOLS_DIR:-$here/../../../.tools}"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$tools_dir/venv/bin/python" ]]; then
    python="$tools_dir/venv/bin/python"
  else
    python=python3
  fi
fi

install_chromium
if ! "$python" -c 'import websocket' 2>/dev/null; then
  echo "ui: $python lacks websocket-client (pip install -r tests/interop/requirements.txt)"
  exit 1
fi
args=(--http-url "$http_url")
if [[ -n "$amqp_url" ]]; then
  args+=(--amqp-url "$amqp_url")
fi
exec timeout --kill-after=10 300 "$python" "$here/run.py" "${args[@]}"
