#!/usr/bin/env bash
# Warren against Warren: two builds, turn about, through bench/seeds.sh (Warren only), so
# that a change can be shown to cost no speed (issue 30, point 9). The machine drifts by
# ±20% from run to run on 2 shared cores; alternating the builds and taking the median of
# several rounds keeps that drift out of the ratio.
#
#   bench/ab.sh --before BIN --after BIN [--only ID,ID...] [--rounds N] [--seconds N]
#               [--out-dir DIR]
#
# Each round runs `seeds.sh --only-broker warren --only IDS --seconds N` with BEFORE, then
# with AFTER (defaults: the exchange and fanout workloads, 5 rounds, 10 s). Prints and writes
# ab-STAMP.txt into --out-dir (default bench/results): per workload the median rate and broker
# CPU per message of each build, their ratios (after over before) and whether both are within
# 10%. Medians, not means: one round that the machine ran fast or slow moves a mean by
# more than the 10% asked. The seeds tables of every round stay in WARREN_BENCH_LOG_DIR (default
# /tmp/warren-ab-STAMP).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STAMP="$(date +%Y-%m-%d-%H%M%S)"
before=""
after=""
only="X-fanout,X-topic,X-headers,F50,F100"
rounds=5
seconds=10
out_dir="$REPO_ROOT/bench/results"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --before) before="$2"; shift 2 ;;
    --after) after="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --out-dir) out_dir="$2"; shift 2 ;;
    *) echo "ab: unknown argument '$1' (see the head of bench/ab.sh)" >&2; exit 2 ;;
  esac
done
for binary in "$before" "$after"; do
  if [[ ! -x "$binary" ]]; then
    echo "ab: --before and --after must name Warren binaries ('$binary' is not executable)" >&2
    exit 2
  fi
done
logs="${WARREN_BENCH_LOG_DIR:-/tmp/warren-ab-$STAMP}"
mkdir -p "$logs" "$out_dir"
for round in $(seq 1 "$rounds"); do
  for side in before after; do
    binary="$before"
    [[ "$side" == after ]] && binary="$after"
    echo "ab: round $round of $rounds, $side ($binary)"
    WARREN_BENCH_LOG_DIR="$logs/r$round-$side-logs" "$REPO_ROOT/bench/seeds.sh" \
      --only-broker warren --only "$only" --seconds "$seconds" --warren "$binary" \
      --label "ab $side round $round" --out-dir "$logs/r$round-$side" |
      grep -E '^(seeds:|[WXFLC][^ ]* +warren)' || true
  done
done
python3 - "$logs" "$rounds" "$before" "$after" > "$out_dir/ab-$STAMP.txt" <<'PY'
import csv, glob, statistics, sys
logs, rounds, before, after = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
figures = {}
for side in ("before", "after"):
    for path in sorted(glob.glob(f"{logs}/r*-{side}/seeds-*.csv")):
        for row in csv.DictReader(open(path)):
            if row["broker"] != "warren" or not row["rate_msg_s"]:
                continue
            cell = figures.setdefault(row["workload"], {}).setdefault(side, ([], []))
            cell[0].append(float(row["rate_msg_s"]))
            cell[1].append(float(row["cpu_us_per_msg"]))
print(f"bench/ab.sh: {rounds} rounds, turn about; before {before}, after {after}")
print("median of the rounds; ratio = after / before; 'within' = both within 10%")
print(f"{'workload':<10} {'msg/s before':>13} {'after':>10} {'ratio':>6}"
      f" {'CPU µs/msg before':>18} {'after':>7} {'ratio':>6}  within")
for workload, sides in figures.items():
    if "before" not in sides or "after" not in sides:
        print(f"{workload:<10} not measured by both builds")
        continue
    (rb, cb), (ra, ca) = sides["before"], sides["after"]
    rate = statistics.median(ra) / statistics.median(rb)
    cpu = statistics.median(ca) / statistics.median(cb)
    ok = rate >= 0.9 and cpu <= 1.1
    print(f"{workload:<10} {statistics.median(rb):>13,.0f} {statistics.median(ra):>10,.0f}"
          f" {rate:>5.2f}x {statistics.median(cb):>18.2f} {statistics.median(ca):>7.2f}"
          f" {cpu:>5.2f}x  {'yes' if ok else 'NO'}")
print("each round, msg/s before / after:")
for workload, sides in figures.items():
    pairs = zip(sides.get("before", ([], []))[0], sides.get("after", ([], []))[0])
    print(f"  {workload:<10} " + ", ".join(f"{b:,.0f} / {a:,.0f}" for b, a in pairs))
PY
cat "$out_dir/ab-$STAMP.txt"
