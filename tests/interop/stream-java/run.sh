#!/usr/bin/env bash
# Runs the Java stream client suite (StreamInterop.java and ManagementApi.java, on
# com.rabbitmq:stream-client 1.11.0 from Maven Central) against a broker's stream port.
#
#   tests/interop/stream-java/run.sh [STREAM_URI [HTTP_URL]]
#   STREAM_URI  e.g. rabbitmq-stream://guest:guest@127.0.0.1:5552/%2f (or WARREN_STREAM_URL)
#   HTTP_URL    the management API, e.g. http://127.0.0.1:15672 (or WARREN_HTTP_URL); without
#               it the reconnect case is skipped
#
# Needs java and javac 17 and mvn (the first run fetches the client and its dependencies
# with `mvn dependency:copy-dependencies` into $WARREN_TOOLS_DIR/stream-java, default
# <repo>/.tools; later runs use that cache and need no network).
# Prints PASS/FAIL/SKIP per case and `stream-java: N passed, M failed, K skipped`; exits
# non-zero on any failure.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="${WARREN_TOOLS_DIR:-$here/../../../.tools}/stream-java"
readonly JAVA_HEAP="-Xmx256m"

stream_url="${1:-${WARREN_STREAM_URL:-}}"
http_url="${2:-${WARREN_HTTP_URL:-}}"
if [[ -z "$stream_url" ]]; then
  echo "run.sh: no stream URI; pass it or set WARREN_STREAM_URL," \
    "e.g. rabbitmq-stream://guest:guest@127.0.0.1:5552/%2f" >&2
  exit 2
fi

# A marker file, written last, makes an interrupted download start over.
if [[ ! -f "$tools/complete" ]]; then
  rm -rf "$tools"
  mkdir -p "$tools/jars"
  (cd "$here" && mvn -B -q -ntp dependency:copy-dependencies \
    -DoutputDirectory="$tools/jars") >"$tools/mvn.log" 2>&1 \
    || { echo "run.sh: mvn could not fetch the client:"; tail -n 30 "$tools/mvn.log"; exit 1; }
  touch "$tools/complete"
fi
rm -rf "$tools/classes"
mkdir -p "$tools/classes"
javac -d "$tools/classes" -cp "$tools/jars/*" "$here"/*.java
exec java "$JAVA_HEAP" -cp "$tools/classes:$tools/jars/*" StreamInterop "$stream_url" "$http_url"
