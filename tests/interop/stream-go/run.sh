#!/usr/bin/env bash
# Runs the Go stream client suite (main.go, cases.go, mgmt.go on
# github.com/rabbitmq/rabbitmq-stream-go-client v1.8.3, pinned in go.mod/go.sum) against a
# broker's stream port.
#
#   tests/interop/stream-go/run.sh [STREAM_URI [HTTP_URL]]
#   tests/interop/stream-go/run.sh --restart-phase write|check [STREAM_URI]
#   STREAM_URI  e.g. rabbitmq-stream://guest:guest@127.0.0.1:5552/%2f (or WARREN_STREAM_URL)
#   HTTP_URL    the management API, e.g. http://127.0.0.1:15672 (or WARREN_HTTP_URL); without
#               it the reconnect case is skipped
# --restart-phase runs one half of the restart check (restart.go): `write` before the caller
# restarts the broker, `check` after it (.ci/run's stream-restart stage).
#
# Needs go 1.26. The first run downloads the modules go.sum pins from the Go module proxy
# into $WARREN_TOOLS_DIR/go-mod (default <repo>/.tools); later runs need no network.
# Prints PASS/FAIL/SKIP per case and `stream-go: N passed, M failed, K skipped`; exits
# non-zero on any failure.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="${WARREN_TOOLS_DIR:-$here/../../../.tools}"

phase_args=()
if [[ "${1:-}" == "--restart-phase" ]]; then
  phase_args=(--restart-phase "${2:-}")
  shift 2 || shift
fi
stream_url="${1:-${WARREN_STREAM_URL:-}}"
http_url="${2:-${WARREN_HTTP_URL:-}}"
if [[ -z "$stream_url" ]]; then
  echo "run.sh: no stream URI; pass it or set WARREN_STREAM_URL," \
    "e.g. rabbitmq-stream://guest:guest@127.0.0.1:5552/%2f" >&2
  exit 2
fi

mkdir -p "$tools/go-mod" "$tools/stream-go"
# -modcacherw: the cache stays deletable by rm -rf; -mod=readonly: go.sum is the pin.
export GOMODCACHE="$tools/go-mod" GOFLAGS="-modcacherw -mod=readonly"
(cd "$here" && go build -o "$tools/stream-go/stream-go" .)
exec "$tools/stream-go/stream-go" "${phase_args[@]}" "$stream_url" "$http_url"
