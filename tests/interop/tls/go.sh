#!/usr/bin/env bash
# go.sh CERTDIR TLS_PORT USER PASS: the amqp091-go TLS tests (tests/interop/tls/go), run by
# run.sh when TLS_EXTRA_SUITES names "go".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/go"
command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"
TLS_CERTS="$1" TLS_PORT="$2" TLS_USER="$3" TLS_PASS="$4" go test -count=1 -v ./... 2>&1 \
  | grep -v '^=== RUN'
