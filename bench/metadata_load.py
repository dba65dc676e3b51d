#!/usr/bin/env python3
"""Metadata load for bench/metadata.sh, the same against RabbitMQ and Warren: a minimal AMQP
0.9.1 client on plain sockets (no client library to install, nothing that favours one
broker) and the HTTP definitions import. Prints one line "seconds=S" per run.

  metadata_load.py declares HOST PORT --connections 10 --queues-each 100
  metadata_load.py binds HOST PORT --binds 30000
  metadata_load.py import HOST HTTP_PORT --queues 3000

Each step waits for the broker's answer (declare-ok, bind-ok, 204) before the next: the
broker's answer is what says the durable definition is on disk.
"""
import base64
import json
import socket
import struct
import sys
import threading
import time
import urllib.request

STEP_TIMEOUT_S = 60


def shortstr(text):
    data = text.encode()
    return bytes([len(data)]) + data


def frame(kind, channel, payload):
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + b"\xce"


def method(channel, class_id, method_id, args=b""):
    return frame(1, channel, struct.pack(">HH", class_id, method_id) + args)


class Connection:
    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port), timeout=STEP_TIMEOUT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self.expect(10, 10)
        login = b"\x00guest\x00guest"
        start_ok = (struct.pack(">I", 0) + shortstr("PLAIN") + struct.pack(">I", len(login))
                    + login + shortstr("en_US"))
        self.sock.sendall(method(0, 10, 11, start_ok))
        tune = self.expect(10, 30)
        channel_max, frame_max, _ = struct.unpack(">HIH", tune[:8])
        self.sock.sendall(method(0, 10, 31, struct.pack(">HIH", channel_max, frame_max, 0)))
        self.sock.sendall(method(0, 10, 40, shortstr("/") + shortstr("") + b"\x00"))
        self.expect(10, 41)
        self.sock.sendall(method(1, 20, 10, shortstr("")))
        self.expect(20, 11)

    def read(self, size):
        while len(self.buffer) < size:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the broker closed the connection")
            self.buffer += chunk
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def expect(self, class_id, method_id):
        while True:
            kind, _, size = struct.unpack(">BHI", self.read(7))
            payload = self.read(size + 1)[:-1]
            if kind != 1:
                continue
            got = struct.unpack(">HH", payload[:4])
            if got == (class_id, method_id):
                return payload[4:]
            if got in ((10, 50), (20, 40)):
                code = struct.unpack(">H", payload[4:6])[0]
                text = payload[7:7 + payload[6]].decode(errors="replace")
                raise RuntimeError(f"the broker closed with {code}: {text}")

    def declare_durable(self, queue):
        args = struct.pack(">H", 0) + shortstr(queue) + b"\x02" + struct.pack(">I", 0)
        self.sock.sendall(method(1, 50, 10, args))
        self.expect(50, 11)

    def bind(self, queue, exchange, key):
        args = (struct.pack(">H", 0) + shortstr(queue) + shortstr(exchange) + shortstr(key)
                + b"\x00" + struct.pack(">I", 0))
        self.sock.sendall(method(1, 50, 20, args))
        self.expect(50, 21)

    def close(self):
        self.sock.close()


def declares(host, port, connections, queues_each):
    """`connections` connections at once, each declaring `queues_each` durable queues."""
    opened = [Connection(host, port) for _ in range(connections)]
    errors = []

    def run(index, connection):
        try:
            for q in range(queues_each):
                connection.declare_durable(f"bench-declare-{index}-{q}")
        except Exception as error:  # reported below, after every thread ends
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(opened)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - start
    for connection in opened:
        connection.close()
    if errors:
        raise errors[0]
    return elapsed


def binds(host, port, count):
    """One durable queue bound to amq.direct (durable) under `count` routing keys."""
    connection = Connection(host, port)
    connection.declare_durable("bench-binds")
    start = time.monotonic()
    for i in range(count):
        connection.bind("bench-binds", "amq.direct", f"key-{i}")
    elapsed = time.monotonic() - start
    connection.close()
    return elapsed


def definitions_import(host, http_port, queues):
    """POST /api/definitions with `queues` durable queues, each bound to amq.direct."""
    document = {
        "queues": [{"name": f"bench-import-{i}", "vhost": "/", "durable": True,
                    "auto_delete": False, "arguments": {}} for i in range(queues)],
        "bindings": [{"source": "amq.direct", "vhost": "/", "destination": f"bench-import-{i}",
                      "destination_type": "queue", "routing_key": f"key-{i}", "arguments": {}}
                     for i in range(queues)],
    }
    body = json.dumps(document).encode()
    request = urllib.request.Request(
        f"http://{host}:{http_port}/api/definitions", data=body, method="POST",
        headers={"content-type": "application/json",
                 "authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    start = time.monotonic()
    with urllib.request.urlopen(request, timeout=600) as response:
        if response.status >= 300:
            raise RuntimeError(f"import answered {response.status}")
    return time.monotonic() - start


def main():
    mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    options = dict(zip(sys.argv[4::2], sys.argv[5::2]))
    if mode == "declares":
        seconds = declares(host, port, int(options.get("--connections", 10)),
                           int(options.get("--queues-each", 100)))
    elif mode == "binds":
        seconds = binds(host, port, int(options.get("--binds", 30000)))
    elif mode == "import":
        seconds = definitions_import(host, port, int(options.get("--queues", 3000)))
    else:
        raise SystemExit(f"unknown mode {mode}: declares, binds or import")
    print(f"seconds={seconds:.3f}")


if __name__ == "__main__":
    main()
