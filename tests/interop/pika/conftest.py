"""Fixtures for the pika interop suite.

Every queue and exchange a test declares has a unique name and is exclusive or
auto-deleted, so the suite can run against a shared broker, such as a reference
RabbitMQ, without leaving state behind. Every wait is bounded by a deadline
(helpers.py); pytest-timeout (pytest.ini) bounds each test as a whole.
"""

import uuid

import pika
import pytest

from helpers import connection_parameters


@pytest.fixture
def connect():
    """Opens blocking connections and closes whichever are still open at teardown."""
    opened = []

    def open_connection(**overrides):
        connection = pika.BlockingConnection(connection_parameters(**overrides))
        opened.append(connection)
        return connection

    yield open_connection
    for connection in opened:
        if connection.is_open:
            connection.close()


@pytest.fixture
def connection(connect):
    return connect()


@pytest.fixture
def channel(connection):
    return connection.channel()


@pytest.fixture
def names(request):
    """names("q") -> a name unique to this test run, readable in broker logs."""
    run = uuid.uuid4().hex[:8]
    test = request.node.name.replace("[", ".").replace("]", "")[:80]

    def name(suffix):
        return f"interop.{test}.{run}.{suffix}"

    return name


@pytest.fixture
def durable_queue(connect, names):
    """A durable queue that is deleted at teardown from a fresh connection."""
    queue = names("durable")
    connect().channel().queue_declare(queue, durable=True)
    yield queue
    cleanup = pika.BlockingConnection(connection_parameters())
    try:
        cleanup.channel().queue_delete(queue)
    finally:
        cleanup.close()


