"""Transactions: tx.commit makes publishes and acks take effect, tx.rollback drops them."""

import pika
import pytest

from helpers import assert_channel_closed, message_count


def test_rollback_discards_publishes_and_commit_applies_them(connect, names):
    channel = connect().channel()
    queue = names("q")
    channel.queue_declare(queue, exclusive=True)
    channel.tx_select()

    for body in (b"r1", b"r2", b"r3"):
        channel.basic_publish("", queue, body)
    assert message_count(channel, queue) == 0
    channel.tx_rollback()
    assert message_count(channel, queue) == 0

    for body in (b"c1", b"c2"):
        channel.basic_publish("", queue, body)
    channel.tx_commit()
    assert message_count(channel, queue) == 2
    assert channel.basic_get(queue, auto_ack=True)[2] == b"c1"
    assert channel.basic_get(queue, auto_ack=True)[2] == b"c2"


def test_rolled_back_ack_leaves_message_unacked_until_channel_close(connect, names):
    owner = connect()
    setup = owner.channel()
    queue = names("q")
    setup.queue_declare(queue, exclusive=True)
    setup.confirm_delivery()
    setup.basic_publish("", queue, b"keep me")
    channel = owner.channel()
    channel.tx_select()

    method, _, _ = channel.basic_get(queue, auto_ack=False)
    channel.basic_ack(method.delivery_tag)
    channel.tx_rollback()
    assert message_count(setup, queue) == 0  # still unacked on `channel`
    channel.close()

    requeued, _, body = setup.basic_get(queue, auto_ack=True)
    assert body == b"keep me"
    assert requeued.redelivered is True


def test_committed_ack_removes_message(connect, names):
    owner = connect()
    queue = names("q")
    setup = owner.channel()
    setup.queue_declare(queue, exclusive=True)
    setup.confirm_delivery()
    setup.basic_publish("", queue, b"consume me")
    channel = owner.channel()
    channel.tx_select()

    method, _, _ = channel.basic_get(queue, auto_ack=False)
    channel.basic_ack(method.delivery_tag)
    channel.tx_commit()
    channel.close()

    assert message_count(setup, queue) == 0
    assert setup.basic_get(queue) == (None, None, None)


@pytest.mark.parametrize("operation", ["tx_commit", "tx_rollback"])
def test_commit_or_rollback_without_select_closes_channel_406(channel, operation):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        getattr(channel, operation)()
    assert_channel_closed(excinfo, 406, "PRECONDITION_FAILED")
