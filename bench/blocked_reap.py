"""A publisher that fills the broker with one partial message until a memory alarm blocks it,
then resets its socket: does the broker free that memory and clear the alarm?

Usage: blocked_reap.py HOST AMQP_PORT HTTP_PORT BROKER_PID [MAX_MB]
Speaks AMQP 0.9.1 by hand (stdlib only): heartbeats off, the connection.blocked capability on,
partial messages of 120 MiB each (under the default max_message_size), one per channel: a
basic.publish, its header and all but the last body frame, until connection.blocked arrives
(or MAX_MB are sent). Prints one line a second: the broker's RSS and whether its
memory alarm is on (GET /api/nodes, as guest); the last line is a verdict.
"""

import base64
import json
import socket
import struct
import sys
import time
import urllib.request

HOST, PORT, HTTP_PORT, PID = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
MAX_MB = int(sys.argv[5]) if len(sys.argv) > 5 else 1024
WAIT_S = 15


def rss_mb():
    with open(f"/proc/{PID}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def mem_alarm():
    request = urllib.request.Request(f"http://{HOST}:{HTTP_PORT}/api/nodes")
    request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(request, timeout=5) as reply:
        return json.load(reply)[0]["mem_alarm"]


def shortstr(text):
    data = text.encode()
    return bytes([len(data)]) + data


def longstr(data):
    return struct.pack(">I", len(data)) + data


def frame(kind, channel, payload):
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + b"\xce"


def method(channel, class_id, method_id, args=b""):
    return frame(1, channel, struct.pack(">HH", class_id, method_id) + args)


def read_frame(sock):
    header = b""
    while len(header) < 7:
        chunk = sock.recv(7 - len(header))
        if not chunk:
            raise EOFError("broker closed the connection")
        header += chunk
    kind, channel, size = struct.unpack(">BHI", header)
    payload = b""
    while len(payload) < size + 1:
        chunk = sock.recv(size + 1 - len(payload))
        if not chunk:
            raise EOFError("broker closed the connection")
        payload += chunk
    return kind, channel, payload[:-1]


def expect(sock, class_id, method_id):
    while True:
        kind, _, payload = read_frame(sock)
        if kind == 1 and struct.unpack(">HH", payload[:4]) == (class_id, method_id):
            return payload[4:]


def handshake():
    sock = socket.create_connection((HOST, PORT), timeout=10)
    sock.sendall(b"AMQP\x00\x00\x09\x01")
    expect(sock, 10, 10)
    capabilities = shortstr("connection.blocked") + b"t\x01"
    table = shortstr("capabilities") + b"F" + longstr(capabilities)
    start_ok = longstr(table) + shortstr("PLAIN") + longstr(b"\x00guest\x00guest") + shortstr("en_US")
    sock.sendall(method(0, 10, 11, start_ok))
    tune = expect(sock, 10, 30)
    channel_max, frame_max, _ = struct.unpack(">HIH", tune[:8])
    sock.sendall(method(0, 10, 31, struct.pack(">HIH", channel_max, frame_max, 0)))
    sock.sendall(method(0, 10, 40, shortstr("/") + shortstr("") + b"\x00"))
    expect(sock, 10, 41)
    return sock, frame_max


MESSAGE_BYTES = 120 << 20


def fill_until_blocked(sock, frame_max):
    """Sends partial messages until connection.blocked arrives; the MB sent."""
    body = b"\x07" * (frame_max - 8)
    sent = 0
    last = time.monotonic()
    channel = 0
    left = 0
    while sent < MAX_MB << 20:
        if left <= len(body):
            # This message stays partial: on to the next channel and message.
            channel += 1
            sock.settimeout(10)
            sock.sendall(method(channel, 20, 10, shortstr("")))
            expect(sock, 20, 11)
            publish = struct.pack(">H", 0) + shortstr("") + shortstr("blocked-reap") + b"\x00"
            sock.sendall(method(channel, 60, 40, publish))
            sock.sendall(frame(2, channel, struct.pack(">HHQH", 60, 0, MESSAGE_BYTES, 0)))
            left = MESSAGE_BYTES
        sock.settimeout(0.2)
        try:
            sock.sendall(frame(3, channel, body))
            sent += len(body)
            left -= len(body)
        except socket.timeout:
            pass  # the broker stopped reading: look for connection.blocked
        now = time.monotonic()
        if now - last >= 1:
            last = now
            print(f"filling: {sent >> 20} MB sent, broker RSS {rss_mb():.0f} MB", flush=True)
        sock.setblocking(False)
        try:
            kind, _, payload = read_frame(sock)
            if kind == 1 and struct.unpack(">HH", payload[:4]) == (10, 60):
                return sent >> 20
        except (BlockingIOError, socket.timeout):
            pass
    return sent >> 20


def main():
    baseline = rss_mb()
    print(f"broker RSS at start: {baseline:.0f} MB, memory alarm: {mem_alarm()}", flush=True)
    sock, frame_max = handshake()
    sent_mb = fill_until_blocked(sock, frame_max)
    blocked_rss = rss_mb()
    print(f"blocked after {sent_mb} MB of partial messages: broker RSS {blocked_rss:.0f} MB, "
          f"memory alarm: {mem_alarm()}", flush=True)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    reset_at = time.monotonic()
    print("client reset its socket", flush=True)
    cleared = None
    while time.monotonic() - reset_at < WAIT_S:
        time.sleep(1)
        alarm = mem_alarm()
        rss = rss_mb()
        print(f"{time.monotonic() - reset_at:4.1f} s after the reset: broker RSS {rss:.0f} MB, "
              f"memory alarm: {alarm}", flush=True)
        if not alarm and cleared is None:
            cleared = time.monotonic() - reset_at
    rss = rss_mb()
    verdict = "freed" if cleared is not None else "NOT freed"
    print(f"verdict: {verdict}: RSS {blocked_rss:.0f} MB blocked -> {rss:.0f} MB "
          f"{WAIT_S} s after the reset (start {baseline:.0f} MB); alarm cleared after "
          f"{cleared if cleared is None else round(cleared, 1)} s", flush=True)
    return 0 if cleared is not None else 1


if __name__ == "__main__":
    sys.exit(main())
