"""Heartbeats: a 1 s heartbeat keeps an idle connection alive, and a silent peer is dropped."""

import socket
import time

import pika
import pika.frame
import pika.spec
import pytest

from helpers import amqp_url, pump_for

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


def test_heartbeat_1s_connection_survives_4s_of_idle_pumping(connect, names):
    proposed = []

    def negotiate(_connection, broker_value):
        proposed.append(broker_value)
        return 1

    connection = connect(heartbeat=negotiate)
    assert connection._impl.params.heartbeat == 1

    pump_for(connection, 4.0)

    assert connection.is_open
    # Private pika counter: heartbeats the broker sent us while we were idle.
    received = connection._impl._heartbeat_checker._heartbeat_frames_received
    assert received >= 3, f"broker sent {received} heartbeats in 4 s at heartbeat=1"
    channel = connection.channel()
    queue = names("q")
    channel.queue_declare(queue, exclusive=True)
    channel.confirm_delivery()
    channel.basic_publish("", queue, b"still alive")
    assert channel.basic_get(queue, auto_ack=True)[2] == b"still alive"
    assert len(proposed) == 1 and proposed[0] >= 0


def read_frame(sock, buffer):
    """Reads until one whole frame is decoded; returns (frame, rest of buffer)."""
    while True:
        consumed, frame = pika.frame.decode_frame(buffer)
        if frame is not None:
            return frame, buffer[consumed:]
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("broker closed the socket during the handshake")
        buffer += chunk


def open_raw_connection(heartbeat_s):
    """Performs the 0.9.1 handshake by hand, proposing heartbeat_s, then goes silent."""
    params = pika.URLParameters(amqp_url())
    sock = socket.create_connection((params.host, params.port), timeout=5)
    sock.sendall(PROTOCOL_HEADER)
    frame, buffer = read_frame(sock, b"")
    assert isinstance(frame.method, pika.spec.Connection.Start)
    user, password = params.credentials.username, params.credentials.password
    response = f"\x00{user}\x00{password}"
    sock.sendall(pika.frame.Method(0, pika.spec.Connection.StartOk(
        client_properties={"product": "warren-interop"}, mechanism="PLAIN",
        response=response, locale="en_US")).marshal())
    frame, buffer = read_frame(sock, buffer)
    assert isinstance(frame.method, pika.spec.Connection.Tune)
    sock.sendall(pika.frame.Method(0, pika.spec.Connection.TuneOk(
        channel_max=16, frame_max=frame.method.frame_max, heartbeat=heartbeat_s)).marshal())
    sock.sendall(pika.frame.Method(0, pika.spec.Connection.Open(
        virtual_host=params.virtual_host)).marshal())
    frame, buffer = read_frame(sock, buffer)
    assert isinstance(frame.method, pika.spec.Connection.OpenOk)
    return sock


def test_silent_client_is_disconnected_after_missed_heartbeats():
    sock = open_raw_connection(heartbeat_s=1)
    started = time.monotonic()
    sock.settimeout(0.5)
    closed = False
    try:
        while time.monotonic() - started < 10 and not closed:
            try:
                closed = sock.recv(65536) == b""  # heartbeats arrive until the close
            except socket.timeout:
                continue
            except ConnectionResetError:
                closed = True
    finally:
        sock.close()
    elapsed = time.monotonic() - started
    assert closed, "broker kept a client that sent nothing for 10 s at heartbeat=1"
    assert elapsed >= 1.0, f"closed after {elapsed:.1f} s, before one heartbeat timeout"


@pytest.mark.parametrize("header", [b"AMQP\x00\x00\x0a\x00", b"GET / HTTP/1.1\r\n\r\n"])
def test_unsupported_protocol_header_gets_supported_header_and_close(header):
    params = pika.URLParameters(amqp_url())
    reply = b""
    with socket.create_connection((params.host, params.port), timeout=5) as sock:
        sock.sendall(header)
        try:
            while chunk := sock.recv(64):
                reply += chunk
                assert len(reply) <= len(PROTOCOL_HEADER), reply
        except ConnectionResetError:
            pass  # a close with our unread bytes still queued arrives as a reset
    assert reply == PROTOCOL_HEADER
