#!/usr/bin/env python3
"""The figures of bench/seeds.sh: rows parsed out of its runs' output, and its table.

    seeds_report.py compare ID LOG BODY_BYTES   CSV rows from one bench/compare.sh output
    seeds_report.py connections ID LOG          CSV rows from one bench/connections.sh output
    seeds_report.py table CSV                   the table: each broker's row, then W/R
    seeds_report.py ratios CSV                  index,workload,figure,ratio for warren-plot

CSV columns: workload,broker,rate_msg_s,rate_mib_s,p50_us,p95_us,p99_us,cpu_us_per_msg,
cpu_ms_per_mib,kib_per_connection (empty where a figure does not apply). The MiB columns are
filled for the W9 workloads (1 MiB bodies) only.
"""
import csv
import re
import sys

BROKERS = ("rabbitmq", "warren")
COST = "cost: CPU per message or KiB per connection"  # one chart line for both
MIB = 1048576
COLUMNS = ("workload", "broker", "rate_msg_s", "rate_mib_s", "p50_us", "p95_us", "p99_us",
           "cpu_us_per_msg", "cpu_ms_per_mib", "kib_per_connection")
# (column, heading, width, format of a figure)
TABLE = (
    ("rate_msg_s", "msg/s", 11, "{:,.0f}"),
    ("rate_mib_s", "MiB/s", 8, "{:,.0f}"),
    ("p50_us", "p50 µs", 9, "{:,.0f}"),
    ("p95_us", "p95 µs", 9, "{:,.0f}"),
    ("p99_us", "p99 µs", 9, "{:,.0f}"),
    ("cpu_us_per_msg", "CPU µs/msg", 11, "{:,.2f}"),
    ("cpu_ms_per_mib", "CPU ms/MiB", 11, "{:,.3f}"),
    ("kib_per_connection", "KiB/conn", 9, "{:,.1f}"),
)


def compare_rows(workload, log, body_bytes):
    """One row per broker that compare.sh measured (it prints `NAME: receiving rate avg`)."""
    text = open(log, errors="replace").read()
    rows = []
    for broker in BROKERS:
        received = re.search(rf"^{broker}: receiving rate avg: +(\d+) msg/s", text, re.M)
        cpu = re.search(rf"^{broker}: broker CPU: .* = ([\d.]+) µs/msg", text, re.M)
        if not received or not cpu:
            continue
        latency = re.search(rf"^{broker}: consumer latency: +min \S+ median (\S+) p75 \S+ "
                            rf"p95 (\S+) p99 (\S+) µs", text, re.M)
        p50, p95, p99 = latency.groups() if latency else ("", "", "")
        rate = int(received.group(1))
        cpu_us = float(cpu.group(1))
        big = workload.startswith("W9")
        rows.append({
            "workload": workload, "broker": broker, "rate_msg_s": rate,
            "rate_mib_s": f"{rate * body_bytes / MIB:.1f}" if big else "",
            "p50_us": p50 if p50 != "?" else "", "p95_us": p95 if p95 != "?" else "",
            "p99_us": p99 if p99 != "?" else "",
            "cpu_us_per_msg": f"{cpu_us:.2f}",
            "cpu_ms_per_mib": f"{cpu_us * MIB / body_bytes / 1000:.3f}" if big else "",
            "kib_per_connection": "",
        })
    return rows


def connection_rows(workload, log):
    """One row per broker whose `NAME: RSS idle ... KiB per connection` line is there."""
    text = open(log, errors="replace").read()
    rows = []
    for broker in BROKERS:
        found = re.search(rf"^{broker}: RSS idle .* MiB: ([\d.]+) KiB per connection", text,
                          re.M)
        if found:
            row = dict.fromkeys(COLUMNS, "")
            row.update(workload=workload, broker=broker, kib_per_connection=found.group(1))
            rows.append(row)
    return rows


def write_rows(rows):
    writer = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n")
    for row in rows:
        writer.writerow(row)


def number(text):
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def read_table(path):
    """{workload: {broker: row}}, workloads in the order of the file."""
    table = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            table.setdefault(row["workload"], {})[row["broker"]] = row
    return table


def cell(value, fmt, width):
    return (fmt.format(value) if value is not None else "-").rjust(width)


def print_table(path):
    table = read_table(path)
    head = f"{'workload':<10} {'broker':<9}" + "".join(
        f" {heading:>{width}}" for _, heading, width, _ in TABLE)
    print(head)
    print("-" * len(head))
    for workload, brokers in table.items():
        for broker in BROKERS:
            if broker in brokers:
                figures = "".join(f" {cell(number(brokers[broker].get(c)), fmt, w)}"
                                  for c, _, w, fmt in TABLE)
                print(f"{workload:<10} {broker:<9}{figures}")
        if all(b in brokers for b in BROKERS):
            ratios = ""
            for column, _, width, _ in TABLE:
                w = number(brokers["warren"].get(column))
                r = number(brokers["rabbitmq"].get(column))
                value = f"{w / r:.2f}x" if w is not None and r else "-"
                ratios += f" {value:>{width}}"
            print(f"{workload:<10} {'W/R':<9}{ratios}")
    print()
    print("W/R: Warren's figure over RabbitMQ's. Rates above 1 favour Warren; latency, CPU "
          "and KiB per connection")
    print("below 1 favour Warren. CPU: the broker process's utime + stime over the run "
          "(RabbitMQ: beam.smp)")
    print("per message received (fanout counts every queue's copy). KiB/conn: (RSS with the "
          "connections open")
    print("- idle RSS) / connections. Latency: publish to delivery, µs.")


def print_ratios(path):
    """Two lines for the chart: the rate ratio and the cost ratio (CPU per message, or KiB per
    connection for the idle-connection workload), x the workload's place in the suite."""
    print("index,workload,figure,ratio")
    table = read_table(path)
    index = 0
    for workload, brokers in table.items():
        if not all(b in brokers for b in BROKERS):
            continue
        index += 1
        w, r = brokers["warren"], brokers["rabbitmq"]
        label = workload  # on the first point drawn for this workload only
        for figure, column in (("rate", "rate_msg_s"),
                               (COST, "cpu_us_per_msg"), (COST, "kib_per_connection")):
            wv, rv = number(w[column]), number(r[column])
            if wv is not None and rv:
                print(f"{index},{label},{figure},{wv / rv:.3f}")
                label = ""


def main(argv):
    if len(argv) == 5 and argv[1] == "compare":
        write_rows(compare_rows(argv[2], argv[3], int(argv[4])))
    elif len(argv) == 4 and argv[1] == "connections":
        write_rows(connection_rows(argv[2], argv[3]))
    elif len(argv) == 3 and argv[1] == "table":
        print_table(argv[2])
    elif len(argv) == 3 and argv[1] == "ratios":
        print_ratios(argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
