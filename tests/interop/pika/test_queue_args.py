"""Queue arguments as pika users set them: message TTL, dead-lettering with x-death,
max-length with reject-publish, and priority queues."""

import time

import pika
import pytest

from helpers import consume_n, message_count, publish_bodies


def test_message_ttl_expires_messages(channel, names):
    queue = names("ttl")
    channel.queue_declare(queue, exclusive=True, arguments={"x-message-ttl": 100})
    publish_bodies(channel, queue, [b"a", b"b"])
    short = pika.BasicProperties(expiration="50")
    other = names("plain")
    channel.queue_declare(other, exclusive=True)
    publish_bodies(channel, other, [b"short"], short)
    time.sleep(0.3)
    assert channel.basic_get(queue, auto_ack=True) == (None, None, None)
    assert channel.basic_get(other, auto_ack=True) == (None, None, None)
    assert message_count(channel, queue) == 0


def test_rejected_message_is_dead_lettered_with_x_death(channel, names):
    queue, dlq = names("work"), names("dlq")
    channel.queue_declare(dlq, exclusive=True)
    arguments = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}
    channel.queue_declare(queue, exclusive=True, arguments=arguments)
    publish_bodies(channel, queue, [b"job"], pika.BasicProperties(expiration="60000"))
    method, _, _ = channel.basic_get(queue)
    channel.basic_reject(method.delivery_tag, requeue=False)

    [(method, properties, body)] = consume_n(channel, dlq, 1, auto_ack=True)
    assert body == b"job"
    assert method.routing_key == dlq
    assert properties.expiration is None
    headers = properties.headers
    [death] = headers["x-death"]
    assert death["count"] == 1
    assert death["reason"] == "rejected"
    assert death["queue"] == queue
    assert death["exchange"] == ""
    assert death["routing-keys"] == [queue]
    assert death["original-expiration"] == "60000"
    assert abs(death["time"].timestamp() - time.time()) < 60
    assert headers["x-first-death-reason"] == "rejected"
    assert headers["x-first-death-queue"] == queue
    assert headers["x-first-death-exchange"] == ""


def test_max_length_reject_publish_nacks(channel, names):
    queue = names("bounded")
    arguments = {"x-max-length": 1, "x-overflow": "reject-publish"}
    channel.queue_declare(queue, exclusive=True, arguments=arguments)
    channel.confirm_delivery()
    channel.basic_publish("", queue, b"first")
    with pytest.raises(pika.exceptions.NackError):
        channel.basic_publish("", queue, b"second")
    assert message_count(channel, queue) == 1


def test_max_length_drop_head_keeps_the_newest(channel, names):
    queue = names("head")
    channel.queue_declare(queue, exclusive=True, arguments={"x-max-length": 2})
    channel.confirm_delivery()
    publish_bodies(channel, queue, [b"1", b"2", b"3"])
    bodies = [body for _, _, body in consume_n(channel, queue, 2, auto_ack=True)]
    assert bodies == [b"2", b"3"]


def test_priority_queue_delivers_higher_priorities_first(channel, names):
    queue = names("prio")
    channel.queue_declare(queue, exclusive=True, arguments={"x-max-priority": 10})
    channel.confirm_delivery()
    for body, priority in [(b"low", 1), (b"high", 9), (b"none", None), (b"mid", 5)]:
        channel.basic_publish("", queue, body, pika.BasicProperties(priority=priority))
    bodies = [body for _, _, body in consume_n(channel, queue, 4, auto_ack=True)]
    assert bodies == [b"high", b"mid", b"low", b"none"]


def test_invalid_max_priority_closes_the_channel_406(channel, names):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.queue_declare(names("bad"), exclusive=True, arguments={"x-max-priority": 300})
    assert excinfo.value.reply_code == 406
    assert "invalid arg 'x-max-priority'" in excinfo.value.reply_text
    assert "{max_value_exceeded,300}" in excinfo.value.reply_text
