#!/usr/bin/env bash
# Runs the amqp091-go interop suite: RabbitMQ's Go client
# (github.com/rabbitmq/amqp091-go, pinned in go.mod) against a running broker.
#
# Needs: go 1.26 and access to the Go module proxy (the first run downloads the
# modules go.sum pins), and WARREN_AMQP_URL naming the broker under test, e.g.
#   WARREN_AMQP_URL='amqp://guest:guest@127.0.0.1:5672/%2f' tests/interop/go/run.sh
# Extra arguments go to `go test` (e.g. -run TestTopic).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

if [[ -z "${WARREN_AMQP_URL:-}" ]]; then
  echo "run.sh: WARREN_AMQP_URL is not set; e.g. amqp://guest:guest@127.0.0.1:5672/%2f" >&2
  exit 2
fi

go test -count=1 -timeout 120s -v "$@" ./...
