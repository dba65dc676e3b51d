#!/usr/bin/env python3
"""Figures and verdicts of bench/overload.sh from its `warren perf --json` reports and its
RSS samples.

    overload_report.py --prefix DIR/overload-STAMP --rss-csv FILE --memory-budget-mib MIB

Reads PREFIX-<broker>-<phase>.json (phases calm, backlog, sweep; brokers rabbitmq, warren;
missing ones are skipped), PREFIX-host.json (the host probe, when it ran) and the sampler's
CSV (broker,second,phase,rss_mib,messages_ready, `second` restarting with each phase).
Prints first the host probe's median walks per second after the first 10 s and how many
seconds fall outside 15% of it (the machine's own unsteadiness, with no broker running), then
per broker:

- calm: the median send and receive rates after the first 10 s, how many per-second rates
  fall outside 15% of their median and the worst one, the RSS trend (least-squares slope over
  the phase after 10 s, times its length, as a percentage of the mean RSS), and consumer
  latency p50/p99 (median and worst of the per-second values);
- backlog: rates, peak RSS against the memory budget, ready messages at the end;
- sweep: per step the attempted rate, achieved rates and latency p50/p99.

and a line `verdict BROKER PHASE: pass|FAIL (why)` for calm and backlog. Writes
PREFIX-sweep.csv (series,attempted_rate,sent_rate,received_rate,latency_ms: one row per step
and percentile, series like "warren p99") and PREFIX-rss-run.csv (the samples with `second`
counted from the broker's first phase, for one timeline per broker). Exits 1 when one of
Warren's verdicts fails (RabbitMQ's are reported, not required).
"""

import argparse
import csv
import json
import os
import statistics
import sys

BROKERS = ("rabbitmq", "warren")
WARM_UP_S = 10.0
RATE_BAND = 0.15
RSS_TREND_MAX = 0.10


def load(prefix, broker, phase):
    path = f"{prefix}-{broker}-{phase}.json"
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_rss(path):
    """Rows of the sampler CSV, grouped by (broker, phase), in file order."""
    rows = {}
    with open(path, encoding="utf-8") as f:
        for row in csv.DictReader(f):
            rows.setdefault((row["broker"], row["phase"]), []).append(row)
    return rows


def trend(points):
    """Least-squares slope of (x, y) points times the x span, over the mean y."""
    if len(points) < 3:
        return 0.0
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mean_x) ** 2 for x in xs)
    if var == 0 or mean_y == 0:
        return 0.0
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / var
    return slope * (max(xs) - min(xs)) / mean_y


def band(values):
    """Median, count outside the band, worst relative deviation."""
    median = statistics.median(values)
    if median == 0:
        return 0, len(values), float("inf")
    deviations = [(v - median) / median for v in values]
    outside = sum(1 for d in deviations if abs(d) > RATE_BAND)
    worst = max(deviations, key=abs)
    return median, outside, worst


def host(prefix):
    """The host probe's line, or None when it did not run."""
    path = f"{prefix}-host.json"
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        probe = json.load(f)
    walks = probe["walks_per_second"][int(probe["warm_up_s"]):]
    median, outside, worst = band(walks)
    return (
        f"host probe (no broker running): {probe['mib']} MiB walk median {median:.0f} walks/s; "
        f"{outside} of {len(walks)} seconds outside ±{RATE_BAND:.0%} (worst {worst:+.1%})"
    )


def calm(broker, report, rss_rows):
    samples = [s for s in report["samples"] if s["time_s"] > WARM_UP_S]
    if len(samples) < 5:
        return [f"{broker} calm: too few samples after {WARM_UP_S:.0f} s"], False
    lines, ok = [], True
    for key in ("sent", "received"):
        median, outside, worst = band([s["rates"][key] for s in samples])
        lines.append(
            f"{broker} calm: {key} median {median:.0f} msg/s; {outside} of {len(samples)} "
            f"seconds outside ±{RATE_BAND:.0%} (worst {worst:+.1%})"
        )
        ok &= outside == 0
    p50 = [s["consumer_latency_us"]["median"] / 1000 for s in samples]
    p99 = [s["consumer_latency_us"]["p99"] / 1000 for s in samples]
    lines.append(
        f"{broker} calm: consumer latency per second: p50 median {statistics.median(p50):.1f} ms "
        f"(worst {max(p50):.1f}), p99 median {statistics.median(p99):.1f} ms (worst {max(p99):.1f})"
    )
    points = [
        (float(r["second"]), float(r["rss_mib"]))
        for r in rss_rows
        if r["rss_mib"] and float(r["second"]) > WARM_UP_S
    ]
    rss_trend = trend(points)
    if points:
        lines.append(
            f"{broker} calm: RSS {min(p[1] for p in points):.0f}..{max(p[1] for p in points):.0f}"
            f" MiB, trend {rss_trend:+.1%} over the phase"
        )
    ok &= rss_trend <= RSS_TREND_MAX
    return lines, ok


def backlog(broker, report, rss_rows, budget_mib):
    summary = report["summary"]
    lines = [
        f"{broker} backlog: sent {summary['sending_rate_avg']} msg/s, received "
        f"{summary['receiving_rate_avg']} msg/s, consumer latency p50 "
        f"{summary['consumer_latency_us']['median'] / 1000:.0f} ms"
    ]
    rss = [float(r["rss_mib"]) for r in rss_rows if r["rss_mib"]]
    ready = [int(r["messages_ready"]) for r in rss_rows if r["messages_ready"]]
    peak = max(rss) if rss else float("nan")
    lines.append(
        f"{broker} backlog: peak RSS {peak:.0f} MiB of a {budget_mib} MiB budget; "
        f"{ready[-1] if ready else 'unknown'} messages ready at the end"
    )
    ok = bool(rss) and peak <= budget_mib and bool(ready) and ready[-1] > 0
    return lines, ok


def sweep(broker, report, writer):
    lines = []
    for step in report["sweep"]:
        latency = step["consumer_latency_us"]
        lines.append(
            f"{broker} sweep: {step['target_percent']:>3}% = {step['target_rate']} msg/s "
            f"attempted, sent {step['sent_rate']}, received {step['received_rate']}, "
            f"p50 {latency['median'] / 1000:.2f} ms, p99 {latency['p99'] / 1000:.2f} ms"
        )
        for name, key in (("p50", "median"), ("p99", "p99")):
            writer.writerow(
                [f"{broker} {name}", step["target_rate"], step["sent_rate"],
                 step["received_rate"], latency[key] / 1000]
            )
    return lines


def timeline(rss, path):
    """The samples with `second` continuing across each broker's phases."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["broker", "second", "phase", "rss_mib", "messages_ready"])
        for broker in BROKERS:
            offset = 0
            for phase in ("calm", "backlog", "sweep"):
                rows = rss.get((broker, phase), [])
                for row in rows:
                    writer.writerow([broker, int(row["second"]) + offset, phase,
                                     row["rss_mib"], row["messages_ready"]])
                if rows:
                    offset += int(rows[-1]["second"]) + 1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--rss-csv", required=True)
    parser.add_argument("--memory-budget-mib", type=int, required=True)
    args = parser.parse_args()
    rss = read_rss(args.rss_csv)
    timeline(rss, f"{args.prefix}-rss-run.csv")
    failed = False
    host_line = host(args.prefix)
    if host_line:
        print(host_line)
    with open(f"{args.prefix}-sweep.csv", "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["series", "attempted_rate", "sent_rate", "received_rate", "latency_ms"])
        for broker in BROKERS:
            for phase, judge in (
                ("calm", lambda r, rows: calm(broker, r, rows)),
                ("backlog", lambda r, rows: backlog(broker, r, rows, args.memory_budget_mib)),
            ):
                report = load(args.prefix, broker, phase)
                if report is None:
                    continue
                lines, ok = judge(report, rss.get((broker, phase), []))
                print("\n".join(lines))
                print(f"verdict {broker} {phase}: {'pass' if ok else 'FAIL'}")
                failed |= broker == "warren" and not ok
            report = load(args.prefix, broker, "sweep")
            if report is not None:
                print("\n".join(sweep(broker, report, writer)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
