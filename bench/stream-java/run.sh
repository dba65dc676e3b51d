#!/usr/bin/env bash
# The independent reference for `warren perf stream`: a small load harness on RabbitMQ's Java
# stream client (com.rabbitmq:stream-client from Maven Central), driven with the same flags
# and printing the same summary lines. See bench/README.md ("stream: warren perf stream and
# the Java harness").
#
#   bench/stream-java/run.sh [--producers N] [--consumers N] [--size BYTES]
#       [--batch-size N] [--sub-entry-size N] [--confirms N] [--streams NAME,...]
#       [--offset first|last|next|N] [--rate MSG/S] [--time SECONDS] [--uris rabbitmq-stream://USER:PASS@HOST:PORT/VHOST] [--delete-streams]
#   bench/stream-java/run.sh --install-only     fetch and compile, print the class path
#
# The client and its runtime dependencies come from Maven Central through
# `mvn dependency:copy-dependencies` on a generated pom, into
# $WARREN_TOOLS_DIR/stream-client-<version>/jars (WARREN_TOOLS_DIR defaults to <repo>/.tools);
# StreamPerf.java is compiled there with plain javac. Java 17.
set -euo pipefail

readonly CLIENT_VERSION="${STREAM_CLIENT_VERSION:-1.11.0}"
# The JVM's options (word-split): a fixed heap and the throughput collector keep GC cheap.
readonly JAVA_OPTS="${STREAM_JAVA_OPTS:--Xms1g -Xmx1g -XX:+UseParallelGC}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly HERE
readonly REPO_ROOT="$HERE/../.."
readonly TOOLS_DIR="${WARREN_TOOLS_DIR:-$REPO_ROOT/.tools}"
readonly CLIENT_DIR="$TOOLS_DIR/stream-client-$CLIENT_VERSION"
readonly JARS_DIR="$CLIENT_DIR/jars"
readonly CLASSES_DIR="$CLIENT_DIR/classes"

main() {
  install_client
  compile
  if [[ "${1:-}" == --install-only ]]; then
    echo "$CLASSES_DIR:$JARS_DIR/*"
    return 0
  fi
  local java_opts=()
  read -ra java_opts <<<"$JAVA_OPTS"
  exec java "${java_opts[@]}" -cp "$CLASSES_DIR:$JARS_DIR/*" StreamPerf "$@"
}

# Downloads the client once; a marker file makes an interrupted download start over.
install_client() {
  [[ ! -f "$CLIENT_DIR/complete" ]] || return 0
  local work
  work="$(mktemp -d)"
  mkdir -p "$TOOLS_DIR"
  cat >"$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>warren.tools</groupId>
  <artifactId>stream-client-fetch</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>com.rabbitmq</groupId>
      <artifactId>stream-client</artifactId>
      <version>$CLIENT_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-nop</artifactId>
      <version>1.7.36</version>
    </dependency>
  </dependencies>
</project>
POM
  echo "stream-java: fetching com.rabbitmq:stream-client:$CLIENT_VERSION into $JARS_DIR" >&2
  rm -rf "$CLIENT_DIR"
  if ! (cd "$work" && mvn -B -q -ntp dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$JARS_DIR") >"$work/mvn.log" 2>&1; then
    tail -n 40 "$work/mvn.log" >&2
    echo "stream-java: maven could not fetch stream-client $CLIENT_VERSION" >&2
    exit 1
  fi
  [[ -f "$JARS_DIR/stream-client-$CLIENT_VERSION.jar" ]] || {
    echo "stream-java: stream-client-$CLIENT_VERSION.jar missing after download" >&2
    exit 1
  }
  touch "$CLIENT_DIR/complete"
  rm -rf "$work"
}

# Compiles StreamPerf.java when it is newer than its class.
compile() {
  local class="$CLASSES_DIR/StreamPerf.class"
  [[ ! -f "$class" || "$HERE/StreamPerf.java" -nt "$class" ]] || return 0
  mkdir -p "$CLASSES_DIR"
  javac -d "$CLASSES_DIR" -cp "$JARS_DIR/*" "$HERE/StreamPerf.java" >&2
}

main "$@"
