#!/usr/bin/env bash
# Runs the amqplib interop suite: the Node.js client `amqplib` (version pinned in
# package-lock.json) against the broker named by WARREN_AMQP_URL, e.g.
#   WARREN_AMQP_URL='amqp://guest:guest@127.0.0.1:5672/%2f' tests/interop/amqplib/run.sh
# Installs the locked dependencies with `npm ci` (needs node >= 18, npm and the npm
# registry), then runs every *.test.js with node's built-in test runner. Each test has
# its own timeout; the whole run is bounded too, so a stuck broker cannot hang CI.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

if [[ -z "${WARREN_AMQP_URL:-}" ]]; then
  echo "run.sh: WARREN_AMQP_URL is not set (e.g. amqp://guest:guest@127.0.0.1:5672/%2f)" >&2
  exit 2
fi

npm ci --no-audit --no-fund --loglevel=error >/dev/null
timeout --kill-after=10 120 node --test ./*.test.js
