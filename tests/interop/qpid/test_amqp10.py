"""AMQP 1.0 interop with Qpid Proton's Python binding (python-qpid-proton).

The broker under test is named by WARREN_AMQP_URL (the same amqp:// URI the pika suite uses;
AMQP 1.0 shares the port). Queues are declared with pika, then driven over AMQP 1.0 with
RabbitMQ 4's address format v2. Every blocking call has a timeout; pytest-timeout bounds each
test as a whole.
"""

import os
import uuid
from urllib.parse import urlparse

import pika
import pytest
from proton import Delivery, Message
from proton.utils import BlockingConnection, LinkDetached, SendException

TIMEOUT_S = 10


def broker():
    url = os.environ.get("WARREN_AMQP_URL")
    if not url:
        pytest.fail("WARREN_AMQP_URL is not set; point it at the broker under test")
    return url, urlparse(url)


@pytest.fixture
def queue():
    url, _ = broker()
    name = "qpid-" + uuid.uuid4().hex[:12]
    connection = pika.BlockingConnection(pika.URLParameters(url))
    connection.channel().queue_declare(name, durable=True)
    yield name
    channel = connection.channel()
    channel.queue_delete(name)
    connection.close()


@pytest.fixture
def amqp10():
    _, parts = broker()
    address = "amqp://%s:%s@%s:%d" % (
        parts.username or "guest",
        parts.password or "guest",
        parts.hostname,
        parts.port or 5672,
    )
    connection = BlockingConnection(address, timeout=TIMEOUT_S, allowed_mechs="PLAIN")
    yield connection
    connection.close()


def test_send_and_receive(amqp10, queue):
    sender = amqp10.create_sender("/queues/" + queue)
    for i in range(5):
        sender.send(Message(body="m%d" % i, durable=True))
    receiver = amqp10.create_receiver("/queues/" + queue, credit=10)
    bodies = []
    for _ in range(5):
        message = receiver.receive(timeout=TIMEOUT_S)
        bodies.append(message.body)
        receiver.accept()
    assert bodies == ["m%d" % i for i in range(5)]


def test_properties_survive(amqp10, queue):
    sender = amqp10.create_sender("/queues/" + queue)
    message = Message(body=b"bytes", content_type="application/octet-stream",
                      id="id-1", correlation_id="c-1", properties={"color": "red"})
    sender.send(message)
    receiver = amqp10.create_receiver("/queues/" + queue)
    got = receiver.receive(timeout=TIMEOUT_S)
    receiver.accept()
    assert got.body == b"bytes"
    assert got.id == "id-1" and got.correlation_id == "c-1"
    assert got.content_type == "application/octet-stream"
    assert got.properties["color"] == "red"


def test_release_and_reject(amqp10, queue):
    sender = amqp10.create_sender("/queues/" + queue)
    sender.send(Message(body="again"))
    receiver = amqp10.create_receiver("/queues/" + queue, credit=1)
    assert receiver.receive(timeout=TIMEOUT_S).body == "again"
    receiver.release(delivered=False)
    assert receiver.receive(timeout=TIMEOUT_S).body == "again"
    receiver.reject()
    sender.send(Message(body="next"))
    assert receiver.receive(timeout=TIMEOUT_S).body == "next"
    receiver.accept()


def test_large_message(amqp10, queue):
    body = bytes(range(256)) * 8192  # 2 MiB: many frames each way
    sender = amqp10.create_sender("/queues/" + queue)
    sender.send(Message(body=body))
    receiver = amqp10.create_receiver("/queues/" + queue)
    got = receiver.receive(timeout=TIMEOUT_S)
    receiver.accept()
    assert got.body == body


def test_unroutable_is_released(amqp10):
    sender = amqp10.create_sender("/exchanges/amq.direct/no-such-key-" + uuid.uuid4().hex)
    with pytest.raises(SendException) as raised:
        sender.send(Message(body="nowhere"))
    assert raised.value.state == Delivery.RELEASED


def test_unknown_queue_is_not_found(amqp10):
    with pytest.raises(LinkDetached) as raised:
        amqp10.create_receiver("/queues/no-such-queue-" + uuid.uuid4().hex)
    assert "amqp:not-found" in str(raised.value)
