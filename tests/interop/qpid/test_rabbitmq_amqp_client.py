"""RabbitMQ's own AMQP 1.0 client library for Python (rabbitmq-amqp-python-client) against
Warren, unchanged: its management calls go over the HTTP-over-AMQP node at `/management`
(declare, inspect, bind, unbind, purge and delete queues and exchanges), and its publisher and
consumer use RabbitMQ 4's v2 addresses. The library refuses any server that does not open as
RabbitMQ 4 or later, so this also checks what Warren's AMQP 1.0 open says.

The broker is named by WARREN_AMQP_URL, as for the other suites in this directory.
"""

import os
import uuid
from urllib.parse import urlparse

import pika
import pytest
from rabbitmq_amqp_python_client.qpid.proton import Delivery
from rabbitmq_amqp_python_client.qpid.proton._utils import SendException
from rabbitmq_amqp_python_client import (
    AddressHelper,
    AMQPMessagingHandler,
    ClassicQueueSpecification,
    Converter,
    Environment,
    ExchangeSpecification,
    ExchangeToQueueBindingSpecification,
    ExchangeType,
    Message,
)


def amqp10_uri():
    url = os.environ.get("WARREN_AMQP_URL")
    if not url:
        pytest.fail("WARREN_AMQP_URL is not set; point it at the broker under test")
    parts = urlparse(url)
    return url, "amqp://%s:%s@%s:%d/" % (
        parts.username or "guest",
        parts.password or "guest",
        parts.hostname,
        parts.port or 5672,
    )


@pytest.fixture
def connection():
    _, uri = amqp10_uri()
    environment = Environment(uri=uri)
    connection = environment.connection()
    connection.dial()
    yield connection
    connection.close()
    environment.close()


class Received(Exception):
    """Ends the consumer's loop from its handler (as the library's own examples do)."""


class FirstMessage(AMQPMessagingHandler):
    """Accepts the first message and ends the consumer's loop."""

    def __init__(self):
        super().__init__()
        self.bodies = []

    def on_amqp_message(self, event):
        self.bodies.append(Converter.bytes_to_string(event.message.body))
        self.delivery_context.accept(event)
        raise Received()


def names():
    suffix = uuid.uuid4().hex[:10]
    return "rq-" + suffix, "rx-" + suffix


def declared_over_amqp091(queue):
    """Whether an AMQP 0.9.1 client sees the queue (a passive declare)."""
    url, _ = amqp10_uri()
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        connection.channel().queue_declare(queue, passive=True)
        return True
    except pika.exceptions.ChannelClosedByBroker as error:
        assert error.reply_code == 404, error
        return False
    finally:
        if connection.is_open:
            connection.close()


def with_queue(connection, queue):
    """The connection's management, after it declared the classic queue `queue`."""
    management = connection.management()
    management.declare_queue(
        ClassicQueueSpecification(name=queue, is_auto_delete=False, is_exclusive=False)
    )
    return management


def test_management_declares_binds_unbinds_and_deletes(connection):
    queue, exchange = names()
    management = with_queue(connection, queue)
    info = management.queue_info(name=queue)
    assert info.name == queue
    assert info.message_count == 0
    assert declared_over_amqp091(queue)
    management.declare_exchange(
        ExchangeSpecification(name=exchange, exchange_type=ExchangeType.direct)
    )
    binding = management.bind(
        ExchangeToQueueBindingSpecification(
            source_exchange=exchange, destination_queue=queue, binding_key="k"
        )
    )

    publisher = connection.publisher(AddressHelper.exchange_address(exchange, "k"))
    for i in range(3):
        publisher.publish(Message(body=Converter.string_to_bytes("m%d" % i)))
    publisher.close()
    assert management.queue_info(name=queue).message_count == 3

    management.unbind(binding)
    publisher = connection.publisher(AddressHelper.exchange_address(exchange, "k"))
    # Unroutable now: released, as RabbitMQ 4 does (the client raises on any other outcome
    # than accepted).
    with pytest.raises(SendException) as refused:
        publisher.publish(Message(body=Converter.string_to_bytes("unroutable")))
    assert refused.value.state == Delivery.RELEASED, refused.value
    publisher.close()
    assert management.queue_info(name=queue).message_count == 3, "unbind did not take"

    assert management.purge_queue(queue) == 3
    management.delete_exchange(exchange)
    management.delete_queue(queue)
    assert not declared_over_amqp091(queue)
    management.close()


def test_publisher_and_consumer_round_trip(connection):
    queue, _ = names()
    management = with_queue(connection, queue)
    publisher = connection.publisher(AddressHelper.queue_address(queue))
    publisher.publish(Message(body=Converter.string_to_bytes("hello from the RabbitMQ client")))
    publisher.close()
    handler = FirstMessage()
    consumer = connection.consumer(AddressHelper.queue_address(queue), message_handler=handler)
    with pytest.raises(Received):
        consumer.run()  # until the handler has a message; pytest-timeout bounds it
    consumer.close()
    assert handler.bodies == ["hello from the RabbitMQ client"]
    assert management.queue_info(name=queue).message_count == 0, "the accept did not settle it"
    management.delete_queue(queue)
    management.close()
