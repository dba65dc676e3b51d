"""Negative acknowledgements: basic.nack and basic.reject, with and without requeue."""

import pika
import pytest

from helpers import assert_channel_closed, consume_n, message_count

BODIES = [f"m{i}".encode() for i in range(5)]


@pytest.fixture
def loaded_queue(channel, names):
    """An exclusive queue holding m0..m4, published with confirms."""
    queue = names("q")
    channel.queue_declare(queue, exclusive=True)
    channel.confirm_delivery()
    for body in BODIES:
        channel.basic_publish("", queue, body)
    return queue


def test_nack_multiple_requeue_redelivers_all_in_original_order(channel, loaded_queue):
    first = consume_n(channel, loaded_queue, len(BODIES))
    assert [body for _, _, body in first] == BODIES
    assert all(method.redelivered is False for method, _, _ in first)

    channel.basic_nack(first[-1][0].delivery_tag, multiple=True, requeue=True)
    again = consume_n(channel, loaded_queue, len(BODIES))

    assert [body for _, _, body in again] == BODIES
    assert all(method.redelivered is True for method, _, _ in again)
    tags = [method.delivery_tag for method, _, _ in again]
    assert tags == list(range(first[-1][0].delivery_tag + 1, first[-1][0].delivery_tag + 6))
    channel.basic_ack(tags[-1], multiple=True)
    assert message_count(channel, loaded_queue) == 0


def test_nack_single_requeue_returns_message_ahead_of_later_ones(channel, loaded_queue):
    gets = [channel.basic_get(loaded_queue, auto_ack=False) for _ in range(3)]
    assert [body for _, _, body in gets] == BODIES[:3]

    channel.basic_nack(gets[1][0].delivery_tag, multiple=False, requeue=True)
    method, _, body = channel.basic_get(loaded_queue, auto_ack=True)

    assert body == b"m1"
    assert method.redelivered is True
    assert method.message_count == 2  # m3, m4; m0 and m2 are still unacked
    rest = [channel.basic_get(loaded_queue, auto_ack=True)[2] for _ in range(2)]
    assert rest == [b"m3", b"m4"]


def test_nack_without_requeue_discards(channel, loaded_queue):
    first = consume_n(channel, loaded_queue, len(BODIES))
    channel.basic_nack(first[1][0].delivery_tag, multiple=True, requeue=False)
    channel.basic_nack(first[-1][0].delivery_tag, multiple=True, requeue=True)

    again = consume_n(channel, loaded_queue, 3, timeout_s=2.0)

    assert [body for _, _, body in again] == BODIES[2:]
    channel.basic_ack(again[-1][0].delivery_tag, multiple=True)
    assert message_count(channel, loaded_queue) == 0


def test_reject_requeue_redelivers_and_reject_discard_drops(channel, loaded_queue):
    method, _, body = channel.basic_get(loaded_queue, auto_ack=False)
    assert body == b"m0"
    channel.basic_reject(method.delivery_tag, requeue=True)

    method, _, body = channel.basic_get(loaded_queue, auto_ack=False)
    assert (body, method.redelivered) == (b"m0", True)
    channel.basic_reject(method.delivery_tag, requeue=False)

    method, _, body = channel.basic_get(loaded_queue, auto_ack=True)
    assert (body, method.redelivered, method.message_count) == (b"m1", False, 3)


def test_ack_of_unknown_delivery_tag_closes_channel_406(channel, loaded_queue):
    channel.basic_ack(delivery_tag=999)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        # The close is asynchronous; the next synchronous call surfaces it.
        channel.queue_declare(loaded_queue, passive=True)
    assert_channel_closed(excinfo, 406, "PRECONDITION_FAILED")


def test_unacked_messages_are_requeued_when_channel_closes(connection, loaded_queue):
    reader = connection.channel()
    got = consume_n(reader, loaded_queue, 2)
    assert [body for _, _, body in got] == BODIES[:2]
    reader.close()

    checker = connection.channel()
    method, _, body = checker.basic_get(loaded_queue, auto_ack=True)
    assert (body, method.redelivered, method.message_count) == (b"m0", True, 4)
