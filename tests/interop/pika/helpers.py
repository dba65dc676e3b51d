"""Helpers shared by the pika interop tests: connection parameters and bounded waits.

The broker under test is named by WARREN_AMQP_URL, an amqp:// URI whose vhost is
percent-encoded (amqp://guest:guest@127.0.0.1:5672/%2f).
"""

import os
import time

import pika
import pytest

CONNECT_TIMEOUT_S = 5.0
SOCKET_TIMEOUT_S = 5.0
BLOCKED_CONNECTION_TIMEOUT_S = 10.0
WAIT_S = 5.0


def amqp_url():
    url = os.environ.get("WARREN_AMQP_URL")
    if not url:
        pytest.exit(
            "WARREN_AMQP_URL is not set; point it at the broker under test, "
            "e.g. amqp://guest:guest@127.0.0.1:5672/%2f",
            returncode=2,
        )
    return url


def connection_parameters(**overrides):
    """URL parameters with every timeout set explicitly, plus overrides."""
    params = pika.URLParameters(amqp_url())
    params.connection_attempts = 1
    params.retry_delay = 0
    params.socket_timeout = SOCKET_TIMEOUT_S
    params.stack_timeout = CONNECT_TIMEOUT_S
    params.blocked_connection_timeout = BLOCKED_CONNECTION_TIMEOUT_S
    for key, value in overrides.items():
        setattr(params, key, value)
    return params


def wait_until(connection, predicate, timeout_s=WAIT_S):
    """Pumps the connection until predicate() is true; False on timeout."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        connection.process_data_events(time_limit=min(0.1, remaining))
    return True


def pump_for(connection, seconds):
    """Pumps the connection for a fixed time, for checks that nothing arrives."""
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        connection.process_data_events(time_limit=min(0.1, remaining))


def consume_n(channel, queue, count, timeout_s=WAIT_S, auto_ack=False):
    """Consumes exactly `count` deliveries (or fewer on timeout) and cancels."""
    deliveries = []
    deadline = time.monotonic() + timeout_s
    for method, properties, body in channel.consume(
        queue, auto_ack=auto_ack, inactivity_timeout=0.1
    ):
        if method is not None:
            deliveries.append((method, properties, body))
        if len(deliveries) == count or time.monotonic() > deadline:
            break
    channel.cancel()
    return deliveries


def drain(channel, queue, limit):
    """Gets (auto-ack) every message in `queue`, bodies as text; fails past `limit`."""
    bodies = []
    for _ in range(limit):
        method, _, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return bodies
        bodies.append(body.decode())
    raise AssertionError(f"queue {queue} holds more than {limit} messages")


def publish_bodies(channel, queue, bodies, properties=None):
    for body in bodies:
        channel.basic_publish("", queue, body, properties)


def message_count(channel, queue):
    return channel.queue_declare(queue, passive=True).method.message_count


def assert_channel_closed(excinfo, code, text_prefix):
    error = excinfo.value
    assert error.reply_code == code, error
    assert error.reply_text.startswith(text_prefix), error
