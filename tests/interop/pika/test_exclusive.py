"""Exclusive queues belong to one connection; exclusive consumers to one consumer."""

import pika
import pytest

from helpers import assert_channel_closed


def access_by_declare(channel, queue):
    channel.queue_declare(queue, exclusive=True)


def access_by_passive_declare(channel, queue):
    channel.queue_declare(queue, passive=True)


def access_by_consume(channel, queue):
    channel.basic_consume(queue, lambda *args: None)


def access_by_get(channel, queue):
    channel.basic_get(queue)


def access_by_purge(channel, queue):
    channel.queue_purge(queue)


@pytest.mark.parametrize(
    "access",
    [access_by_declare, access_by_passive_declare, access_by_consume, access_by_get,
     access_by_purge],
    ids=["declare", "passive-declare", "consume", "get", "purge"],
)
def test_other_connection_gets_405_resource_locked(connect, names, access):
    owner = connect().channel()
    queue = names("q")
    owner.queue_declare(queue, exclusive=True)
    intruder_connection = connect()
    intruder = intruder_connection.channel()

    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        access(intruder, queue)

    assert_channel_closed(excinfo, 405, "RESOURCE_LOCKED")
    assert intruder.is_closed
    assert intruder_connection.is_open
    owner.queue_declare(queue, passive=True)  # the owner is unaffected


def test_exclusive_queue_is_usable_from_any_channel_of_its_connection(connection, names):
    queue = names("q")
    connection.channel().queue_declare(queue, exclusive=True)
    other = connection.channel()
    other.confirm_delivery()
    other.basic_publish("", queue, b"same connection")
    assert other.basic_get(queue, auto_ack=True)[2] == b"same connection"


def test_exclusive_queue_is_deleted_when_owner_connection_closes(connect, names):
    owner = connect()
    queue = names("q")
    owner.channel().queue_declare(queue, exclusive=True)
    owner.close()

    channel = connect().channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.queue_declare(queue, passive=True)
    assert_channel_closed(excinfo, 404, "NOT_FOUND")


def test_exclusive_consumer_refuses_second_consumer_403(connection, names):
    queue = names("q")
    first = connection.channel()
    first.queue_declare(queue, exclusive=True)
    first.basic_consume(queue, lambda *args: None, exclusive=True)
    second = connection.channel()

    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        second.basic_consume(queue, lambda *args: None)

    assert_channel_closed(excinfo, 403, "ACCESS_REFUSED")
