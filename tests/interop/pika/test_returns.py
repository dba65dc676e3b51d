"""Mandatory publishes: basic.return 312 NO_ROUTE for unroutable messages."""

import pika
import pytest

from helpers import message_count, wait_until


@pytest.mark.parametrize("exchange_kind", ["default", "declared-direct"])
def test_unroutable_mandatory_publish_is_returned_312_no_route(
    connection, names, exchange_kind
):
    channel = connection.channel()
    exchange = ""
    if exchange_kind == "declared-direct":
        exchange = names("x")
        channel.exchange_declare(exchange, "direct", auto_delete=True)
        bound = names("bound")
        channel.queue_declare(bound, exclusive=True)
        channel.queue_bind(bound, exchange, routing_key="bound-key")
    returned = []
    channel.add_on_return_callback(lambda _ch, *args: returned.append(args))
    routing_key = names("nowhere")
    properties = pika.BasicProperties(message_id="m-1", headers={"k": "v"})

    channel.basic_publish(exchange, routing_key, b"bounce me", properties, mandatory=True)

    assert wait_until(connection, lambda: returned)
    method, returned_properties, body = returned[0]
    assert method.reply_code == 312
    assert method.reply_text == "NO_ROUTE"
    assert method.exchange == exchange
    assert method.routing_key == routing_key
    assert body == b"bounce me"
    assert returned_properties.message_id == "m-1"
    assert returned_properties.headers == {"k": "v"}
    assert len(returned) == 1


def test_unroutable_non_mandatory_publish_is_dropped_silently(connection, names):
    channel = connection.channel()
    returned = []
    channel.add_on_return_callback(lambda _ch, *args: returned.append(args))
    channel.confirm_delivery()

    channel.basic_publish("", names("nowhere"), b"dropped", mandatory=False)

    assert returned == []


def test_return_arrives_before_confirm(channel, names):
    channel.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError) as excinfo:
        channel.basic_publish("", names("nowhere"), b"bounce", mandatory=True)
    (message,) = excinfo.value.messages
    assert message.method.reply_code == 312
    assert message.method.reply_text == "NO_ROUTE"
    assert message.body == b"bounce"


def test_routable_mandatory_publish_is_delivered_not_returned(connection, names):
    channel = connection.channel()
    queue = names("q")
    channel.queue_declare(queue, exclusive=True)
    returned = []
    channel.add_on_return_callback(lambda _ch, *args: returned.append(args))
    channel.confirm_delivery()

    channel.basic_publish("", queue, b"routed", mandatory=True)

    assert returned == []
    assert message_count(channel, queue) == 1
