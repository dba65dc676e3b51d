#!/usr/bin/env python3
"""Tables of bench/features.sh's CSV: each scenario's figures per broker and Warren's ratio
to RabbitMQ (rates: Warren / RabbitMQ, higher is better; latency and CPU: lower is better).
A scenario run in several rounds (--rounds) is given by the median of each figure over its
rounds (a failed round does not count).

    python3 bench/features_report.py features-STAMP.csv
"""
import csv
import statistics
import sys

FIGURES = ("sent_rate", "recv_rate", "p50_us", "p99_us", "cpu_us_per_msg")


def number(text):
    return float(text) if text else None


def rate(value):
    """A rate for a table: whole messages per second, or 'failed'."""
    return f"{value:,.0f}" if value else "failed"


def ratio(warren, rabbit):
    if warren is None or rabbit is None or rabbit == 0:
        return "n/a"
    return f"{warren / rabbit:.2f}"


def read_rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def median_rows(rows):
    """One row per broker and scenario, each figure the median of the rounds that have it,
    and `rounds` the number of rounds that ran."""
    groups = {}
    for row in rows:
        key = (row["broker"], row["scenario"], row["queues"], row["publishers"])
        groups.setdefault(key, []).append(row)
    merged = []
    for (broker, scenario, queues, publishers), group in groups.items():
        row = {"broker": broker, "scenario": scenario, "queues": queues,
               "publishers": publishers}
        for figure in FIGURES:
            values = [float(r[figure]) for r in group if r[figure]]
            row[figure] = f"{statistics.median(values):g}" if values else ""
        row["rounds"] = str(sum(1 for r in group if r["sent_rate"]))
        merged.append(row)
    return merged


def main(path):
    rows = median_rows(read_rows(path))
    rounds = sorted({row["rounds"] for row in rows})
    print(f"\nEach figure is the median of {' or '.join(rounds)} round(s).")
    by_key = {}
    for row in rows:
        key = (row["scenario"], int(row["queues"]), int(row["publishers"]))
        by_key.setdefault(key, {})[row["broker"]] = row
    sections = [
        ("Exchange types: 1 publisher -> 1 queue, autoack", lambda k: k[0].startswith("type-")),
        ("Fanout at 1,000 msg/s to N queues (expected receive rate 1,000 x N)",
         lambda k: k[0] == "fanout"),
        ("Consistent-hash exchange, confirms (-c 100)", lambda k: k[0] == "hash"),
    ]
    for title, keep in sections:
        print(f"\n### {title}\n")
        print("| scenario | queues | publishers | RabbitMQ sent/s | Warren sent/s | ratio "
              "| RabbitMQ recv/s | Warren recv/s | ratio | p99 µs RabbitMQ / Warren "
              "| CPU µs/msg RabbitMQ / Warren |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for key in sorted(k for k in by_key if keep(k)):
            pair = by_key[key]
            r, w = pair.get("rabbitmq", {}), pair.get("warren", {})
            get = lambda row, col: number(row.get(col, ""))
            print(f"| {key[0]} | {key[1]} | {key[2]} "
                  f"| {rate(get(r, 'sent_rate'))} | {rate(get(w, 'sent_rate'))} "
                  f"| {ratio(get(w, 'sent_rate'), get(r, 'sent_rate'))} "
                  f"| {rate(get(r, 'recv_rate'))} | {rate(get(w, 'recv_rate'))} "
                  f"| {ratio(get(w, 'recv_rate'), get(r, 'recv_rate'))} "
                  f"| {r.get('p99_us', '')} / {w.get('p99_us', '')} "
                  f"| {r.get('cpu_us_per_msg', '')} / {w.get('cpu_us_per_msg', '')} |")
    scaling(by_key)


def scaling(by_key):
    """Each broker's consistent-hash publish rate at N queues over its rate at 1 queue, per
    publisher count: the seed shows RabbitMQ's single publisher slowing down as queues are
    added."""
    hash_keys = sorted(k for k in by_key if k[0] == "hash")
    publisher_counts = sorted({k[2] for k in hash_keys})
    queue_counts = sorted({k[1] for k in hash_keys})
    if 1 not in queue_counts:
        return
    print("\n### Consistent-hash: publish rate at N queues / at 1 queue\n")
    columns = [(broker, p) for p in publisher_counts for broker in ("rabbitmq", "warren")]
    names = {"rabbitmq": "RabbitMQ", "warren": "Warren"}
    print("| queues | " + " | ".join(f"{names[b]}, {p} publisher{'s' * (p > 1)}"
                                     for b, p in columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for queues in queue_counts:
        cells = []
        for broker, publishers in columns:
            base = by_key.get(("hash", 1, publishers), {}).get(broker, {})
            here = by_key.get(("hash", queues, publishers), {}).get(broker, {})
            cells.append(ratio(number(here.get("sent_rate", "")),
                               number(base.get("sent_rate", ""))))
        print(f"| {queues} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
