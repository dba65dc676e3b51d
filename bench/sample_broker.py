#!/usr/bin/env python3
"""Samples a broker once a second for Warren's benchmarks: its resident memory and, over
AMQP, how many messages one queue holds ready.

    sample_broker.py sample --pid PID --broker NAME --phase-file FILE --csv FILE \
        --port PORT --queue NAME [--max-seconds N]
    sample_broker.py count --port PORT --queue NAME

`sample` appends rows `broker,second,phase,rss_mib,messages_ready` to the CSV (the caller
writes the header): `second` counts from the sampler's start, `phase` is the content of
the phase file at that moment, `rss_mib` is VmRSS of /proc/PID/status in MiB, and
`messages_ready` is the message count of a passive queue.declare, left empty while the
queue does not exist or the broker does not answer within a second (a sample that comes
late skips the seconds it missed, so `second` stays true). It stops when PID
exits, on SIGTERM or SIGINT, or after --max-seconds.

`count` prints the queue's ready message count once (exit 1 if it cannot be had).

The AMQP 0-9-1 client here is the least that a passive queue.declare needs: one
connection as guest/guest to vhost / on 127.0.0.1, heartbeats off, one channel, reopened
after the broker closes it (as it does for a queue that does not exist yet). Python's
standard library only, so it runs wherever the benchmark scripts run.
"""

import argparse
import math
import signal
import socket
import struct
import sys
import time

FRAME_METHOD = 1
FRAME_END = 0xCE
CONNECTION_START = (10, 10)
CONNECTION_TUNE = (10, 30)
CONNECTION_OPEN_OK = (10, 41)
CONNECTION_CLOSE = (10, 50)
CHANNEL_OPEN_OK = (20, 11)
CHANNEL_CLOSE = (20, 40)
QUEUE_DECLARE_OK = (50, 11)


class AmqpError(Exception):
    pass


def shortstr(text):
    data = text.encode()
    return struct.pack("B", len(data)) + data


def longstr(data):
    return struct.pack(">I", len(data)) + data


class PassiveDeclarer:
    """One AMQP connection that answers 'how many messages are ready in this queue'."""

    def __init__(self, port, timeout_s=1.0):
        self.port = port
        self.timeout_s = timeout_s
        self.sock = None
        self.buffer = b""
        self.channel_open = False

    def close(self):
        if self.sock is not None:
            self.sock.close()
        self.sock = None
        self.channel_open = False
        self.buffer = b""

    def send_method(self, channel, class_method, args=b""):
        payload = struct.pack(">HH", *class_method) + args
        frame = struct.pack(">BHI", FRAME_METHOD, channel, len(payload)) + payload
        self.sock.sendall(frame + bytes([FRAME_END]))

    def read_method(self):
        """The next method frame as (channel, (class, method), arguments); other frames
        (heartbeats, content) are skipped."""
        while True:
            while len(self.buffer) < 7:
                self.fill()
            kind, channel, size = struct.unpack(">BHI", self.buffer[:7])
            while len(self.buffer) < 8 + size:
                self.fill()
            payload = self.buffer[7:7 + size]
            if self.buffer[7 + size] != FRAME_END:
                raise AmqpError("bad frame end")
            self.buffer = self.buffer[8 + size:]
            if kind == FRAME_METHOD:
                return channel, struct.unpack(">HH", payload[:4]), payload[4:]

    def fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise AmqpError("connection closed by the broker")
        self.buffer += data

    def expect(self, wanted):
        channel, method, args = self.read_method()
        if method == CONNECTION_CLOSE:
            self.send_method(0, (10, 51))
            raise AmqpError("connection closed: " + reply_text(args))
        if method != wanted:
            raise AmqpError(f"expected method {wanted}, got {method}")
        return channel, args

    def connect(self):
        self.sock = socket.create_connection(("127.0.0.1", self.port), self.timeout_s)
        self.sock.settimeout(self.timeout_s)
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self.expect(CONNECTION_START)
        self.send_method(0, (10, 11), struct.pack(">I", 0) + shortstr("PLAIN")
                         + longstr(b"\x00guest\x00guest") + shortstr("en_US"))
        _, tune = self.expect(CONNECTION_TUNE)
        channel_max, frame_max, _ = struct.unpack(">HIH", tune[:8])
        self.send_method(0, (10, 31), struct.pack(">HIH", channel_max, frame_max, 0))
        self.send_method(0, (10, 40), shortstr("/") + shortstr("") + b"\x00")
        self.expect(CONNECTION_OPEN_OK)

    def open_channel(self):
        self.send_method(1, (20, 10), shortstr(""))
        self.expect(CHANNEL_OPEN_OK)
        self.channel_open = True

    def ready(self, queue):
        """The queue's ready message count, or None when the queue does not exist."""
        if self.sock is None:
            self.connect()
        if not self.channel_open:
            self.open_channel()
        passive = 1
        self.send_method(1, (50, 10), struct.pack(">H", 0) + shortstr(queue)
                         + bytes([passive]) + struct.pack(">I", 0))
        channel, method, args = self.read_method()
        if method == CHANNEL_CLOSE and channel == 1:
            self.send_method(1, (20, 41))
            self.channel_open = False
            return None
        if method == CONNECTION_CLOSE:
            self.send_method(0, (10, 51))
            raise AmqpError("connection closed: " + reply_text(args))
        if method != QUEUE_DECLARE_OK:
            raise AmqpError(f"expected queue.declare-ok, got {method}")
        name_len = args[0]
        (messages,) = struct.unpack(">I", args[1 + name_len:5 + name_len])
        return messages


def reply_text(args):
    (code,) = struct.unpack(">H", args[:2])
    return f"{code} {args[3:3 + args[2]].decode(errors='replace')}"


def rss_mib(pid):
    """VmRSS of the process in MiB, or None once it has exited."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def read_phase(path):
    try:
        with open(path) as phase:
            return phase.read().strip() or "-"
    except FileNotFoundError:
        return "-"


def sample(args):
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(1))
    declarer = PassiveDeclarer(args.port)
    start = time.monotonic()
    with open(args.csv, "a", buffering=1) as out:
        tick = 0  # samples are taken at start + tick * interval; late ones skip ticks
        while not stopping and tick * args.interval <= args.max_seconds:
            rss = rss_mib(args.pid)
            if rss is None:
                break
            try:
                ready = declarer.ready(args.queue)
            except (OSError, AmqpError):
                declarer.close()  # try a new connection at the next sample
                ready = None
            phase = read_phase(args.phase_file)
            ready_text = "" if ready is None else str(ready)
            second = f"{tick * args.interval:g}"
            out.write(f"{args.broker},{second},{phase},{rss:.1f},{ready_text}\n")
            elapsed = time.monotonic() - start
            tick = max(tick + 1, math.floor(elapsed / args.interval) + 1)
            time.sleep(max(0.0, start + tick * args.interval - time.monotonic()))
    declarer.close()


def count(args):
    declarer = PassiveDeclarer(args.port, timeout_s=10.0)
    try:
        ready = declarer.ready(args.queue)
    except (OSError, AmqpError) as error:
        print(f"sample_broker: cannot ask 127.0.0.1:{args.port} about queue "
              f"{args.queue}: {error}", file=sys.stderr)
        return 1
    finally:
        declarer.close()
    if ready is None:
        print(f"sample_broker: queue {args.queue} does not exist", file=sys.stderr)
        return 1
    print(ready)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    s = commands.add_parser("sample", help="append one CSV row a second")
    s.add_argument("--pid", type=int, required=True, help="broker process to sample")
    s.add_argument("--broker", required=True, help="value of the broker column")
    s.add_argument("--phase-file", required=True, help="file holding the current phase")
    s.add_argument("--csv", required=True, help="CSV file to append to")
    s.add_argument("--port", type=int, required=True, help="broker's AMQP port on 127.0.0.1")
    s.add_argument("--queue", required=True, help="queue whose ready messages to count")
    s.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    s.add_argument("--max-seconds", type=int, default=4 * 3600, help="stop after this")
    c = commands.add_parser("count", help="print the queue's ready message count")
    c.add_argument("--port", type=int, required=True, help="broker's AMQP port on 127.0.0.1")
    c.add_argument("--queue", required=True, help="queue to ask about")
    args = parser.parse_args()
    if args.command == "sample":
        sample(args)
        return 0
    return count(args)


if __name__ == "__main__":
    sys.exit(main())
