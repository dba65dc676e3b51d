#!/usr/bin/env bash
# java.sh CERTDIR TLS_PORT USER PASS: TlsCheck.java (the Java client amqp-client, fetched
# with mvn into $WARREN_TOOLS_DIR/tls-java, compiled with javac), run by run.sh when
# TLS_EXTRA_SUITES names "java".
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="${WARREN_TOOLS_DIR:-$here/../../../.tools}/tls-java"
mkdir -p "$tools/jars" "$tools/classes"
if ! ls "$tools"/jars/amqp-client-*.jar >/dev/null 2>&1; then
  (cd "$here/java" && mvn -B -q -ntp dependency:copy-dependencies \
    -DoutputDirectory="$tools/jars") >"$tools/mvn.log" 2>&1 \
    || { tail -n 30 "$tools/mvn.log"; exit 1; }
fi
javac -d "$tools/classes" -cp "$tools/jars/*" "$here/java/TlsCheck.java"
java -cp "$tools/classes:$tools/jars/*" TlsCheck "$@"
