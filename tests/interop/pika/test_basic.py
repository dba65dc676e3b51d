"""Publish and consume, basic.get, prefetch and consumer cancellation."""

import datetime
import decimal

import pika

from helpers import consume_n, message_count, pump_for, wait_until

PROPERTY_NAMES = (
    "content_type", "content_encoding", "headers", "delivery_mode", "priority",
    "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type",
    "app_id", "cluster_id",
)


def full_properties():
    """Every basic property set, with a header table using every common field type."""
    headers = {
        "x-int": 42,
        "x-negative": -7,
        "x-long": 2**40,
        "x-str": "ünïcode",
        "x-bytes": b"\x00\xffraw",
        "x-bool": True,
        "x-none": None,
        "x-decimal": decimal.Decimal("3.14"),
        "x-timestamp": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
        "x-list": [1, "two", [3]],
        "x-table": {"nested": {"deep": 1}},
    }
    return pika.BasicProperties(
        content_type="application/octet-stream",
        content_encoding="identity",
        headers=headers,
        delivery_mode=2,
        priority=3,
        correlation_id="corr-1",
        reply_to="reply-queue",
        expiration="600000",
        message_id="msg-1",
        timestamp=1_700_000_000,
        type="interop.test",
        app_id="warren-interop",
        cluster_id="",
    )


def test_publish_then_consume_preserves_order_body_and_properties(channel, names):
    queue = names("q")
    channel.queue_declare(queue, exclusive=True)
    sent = full_properties()
    bodies = [f"message-{i}".encode() for i in range(200)]
    for body in bodies:
        channel.basic_publish("", queue, body, sent)

    deliveries = consume_n(channel, queue, len(bodies))

    assert [body for _, _, body in deliveries] == bodies
    for expected_tag, (method, properties, _) in enumerate(deliveries, start=1):
        assert method.delivery_tag == expected_tag
        assert method.redelivered is False
        assert method.exchange == ""
        assert method.routing_key == queue
        for name in PROPERTY_NAMES:
            assert getattr(properties, name) == getattr(sent, name), name
    channel.basic_ack(delivery_tag=len(bodies), multiple=True)
    assert message_count(channel, queue) == 0


def test_empty_body_and_absent_properties(channel, names):
    queue = names("q")
    channel.queue_declare(queue, exclusive=True)
    channel.basic_publish("", queue, b"")

    method, properties, body = channel.basic_get(queue, auto_ack=True)

    assert body == b""
    assert method.message_count == 0
    for name in PROPERTY_NAMES:
        assert getattr(properties, name) is None, name


def test_basic_get_reports_remaining_count_then_get_empty(channel, names):
    queue = names("q")
    channel.queue_declare(queue, exclusive=True)
    assert channel.basic_get(queue) == (None, None, None)
    channel.confirm_delivery()
    for body in (b"a", b"b", b"c"):
        channel.basic_publish("", queue, body)

    first, _, body = channel.basic_get(queue, auto_ack=False)
    assert (body, first.message_count, first.redelivered) == (b"a", 2, False)
    channel.basic_ack(first.delivery_tag)
    second, _, body = channel.basic_get(queue, auto_ack=True)
    assert (body, second.message_count) == (b"b", 1)
    assert second.delivery_tag == first.delivery_tag + 1
    third, _, body = channel.basic_get(queue, auto_ack=True)
    assert (body, third.message_count) == (b"c", 0)

    assert channel.basic_get(queue) == (None, None, None)
    assert message_count(channel, queue) == 0


def test_prefetch_count_limits_unacked_deliveries(connection, names):
    channel = connection.channel()
    queue = names("q")
    channel.queue_declare(queue, exclusive=True)
    channel.confirm_delivery()
    for i in range(10):
        channel.basic_publish("", queue, str(i).encode())
    channel.basic_qos(prefetch_count=3)
    received = []
    channel.basic_consume(queue, lambda _ch, method, _p, body: received.append((method, body)))

    assert wait_until(connection, lambda: len(received) >= 3)
    pump_for(connection, 0.5)
    assert [body for _, body in received] == [b"0", b"1", b"2"]

    channel.basic_ack(received[0][0].delivery_tag)
    assert wait_until(connection, lambda: len(received) >= 4)
    pump_for(connection, 0.3)
    assert [body for _, body in received] == [b"0", b"1", b"2", b"3"]

    channel.basic_ack(received[-1][0].delivery_tag, multiple=True)
    assert wait_until(connection, lambda: len(received) >= 7)
    pump_for(connection, 0.3)
    assert len(received) == 7


def test_cancelled_consumer_leaves_messages_in_queue(connection, names):
    channel = connection.channel()
    queue = names("q")
    channel.queue_declare(queue, exclusive=True)
    received = []
    tag = channel.basic_consume(queue, lambda *args: received.append(args), auto_ack=True)
    channel.basic_cancel(tag)
    channel.confirm_delivery()
    channel.basic_publish("", queue, b"after-cancel")
    pump_for(connection, 0.3)

    assert received == []
    assert message_count(channel, queue) == 1


def test_deleting_queue_notifies_consumer_with_basic_cancel(connect, names):
    connection = connect()
    channel = connection.channel()
    queue = names("q")
    channel.queue_declare(queue, auto_delete=False)
    cancels = []
    channel.add_on_cancel_callback(cancels.append)
    tag = channel.basic_consume(queue, lambda *args: None)

    deleter = connect().channel()
    deleter.queue_delete(queue)

    assert wait_until(connection, lambda: cancels)
    assert cancels[0].method.consumer_tag == tag
