"""Channel errors: the broker closes the channel with the spec's code; the connection lives."""

import pika
import pytest

from helpers import amqp_url, assert_channel_closed


def test_passive_declare_of_missing_queue_closes_channel_404(connection, names):
    channel = connection.channel()

    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.queue_declare(names("missing"), passive=True)

    assert_channel_closed(excinfo, 404, "NOT_FOUND")
    assert channel.is_closed
    assert connection.is_open
    replacement = connection.channel()
    replacement.queue_declare(names("q"), exclusive=True)


def test_passive_declare_of_missing_exchange_closes_channel_404(connection, names):
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.exchange_declare(names("missing"), passive=True)
    assert_channel_closed(excinfo, 404, "NOT_FOUND")
    assert connection.is_open


def test_passive_declare_of_existing_queue_reports_counts(channel, names):
    queue = names("q")
    channel.queue_declare(queue, exclusive=True)
    channel.confirm_delivery()
    channel.basic_publish("", queue, b"one")
    channel.basic_consume(queue, lambda *args: None)

    result = channel.queue_declare(queue, passive=True).method

    assert result.queue == queue
    assert result.consumer_count == 1


def test_publish_to_missing_exchange_closes_channel_404(channel, names):
    channel.basic_publish(names("missing"), "key", b"lost")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.queue_declare(names("q"), exclusive=True)
    assert_channel_closed(excinfo, 404, "NOT_FOUND")


def test_redeclare_queue_with_different_arguments_closes_channel_406(connection, names):
    queue = names("q")
    connection.channel().queue_declare(queue, exclusive=True, arguments={"x-max-length": 10})
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.queue_declare(queue, exclusive=True, arguments={"x-max-length": 20})
    assert_channel_closed(excinfo, 406, "PRECONDITION_FAILED")


def test_redeclare_exchange_with_different_type_closes_channel_406(connection, names):
    exchange = names("x")
    connection.channel().exchange_declare(exchange, "direct", auto_delete=True)
    queue = names("q")
    keeper = connection.channel()
    keeper.queue_declare(queue, exclusive=True)
    keeper.queue_bind(queue, exchange)  # keeps the auto-delete exchange alive
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.exchange_declare(exchange, "fanout", auto_delete=True)
    assert_channel_closed(excinfo, 406, "PRECONDITION_FAILED")


def test_user_id_other_than_the_authenticated_user_closes_channel_406(channel, names):
    queue = names("q")
    channel.queue_declare(queue, exclusive=True)
    user = pika.URLParameters(amqp_url()).credentials.username
    channel.confirm_delivery()
    channel.basic_publish("", queue, b"ok", pika.BasicProperties(user_id=user))
    assert channel.basic_get(queue, auto_ack=True)[1].user_id == user

    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.basic_publish("", queue, b"forged", pika.BasicProperties(user_id=user + "-x"))
    assert_channel_closed(excinfo, 406, "PRECONDITION_FAILED")


def test_declare_with_reserved_amq_prefix_closes_channel_403(channel):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.queue_declare("amq.interop-reserved")
    assert_channel_closed(excinfo, 403, "ACCESS_REFUSED")


def test_server_named_queue_gets_amq_gen_name(channel):
    result = channel.queue_declare("", exclusive=True).method
    assert result.queue.startswith("amq.gen-")
    assert (result.message_count, result.consumer_count) == (0, 0)
