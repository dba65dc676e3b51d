"""Publisher confirms: one at a time, and thousands in flight on one channel."""

import pika
import pytest

from helpers import connection_parameters, message_count

IN_FLIGHT_COUNT = 5000
IN_FLIGHT_DEADLINE_S = 20.0


def test_confirm_select_acks_each_publish(channel, names):
    queue = names("q")
    channel.queue_declare(queue, exclusive=True)
    channel.confirm_delivery()
    for i in range(50):
        # BlockingChannel waits for the ack and raises NackError on a nack.
        channel.basic_publish("", queue, str(i).encode())
    assert message_count(channel, queue) == 50


def test_tx_select_on_a_confirm_channel_closes_it_406(connection):
    channel = connection.channel()
    channel.confirm_delivery()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.tx_select()
    assert excinfo.value.reply_code == 406


class ConfirmTracker:
    """Tracks delivery tags 1..count and checks each broker ack or nack against them."""

    def __init__(self, count):
        self.count = count
        self.outstanding = set(range(1, count + 1))
        self.lowest = 1
        self.acked = 0
        self.nacked = []
        self.errors = []
        self.confirm_frames = 0

    def on_confirm(self, frame):
        method = frame.method
        self.confirm_frames += 1
        if method.multiple:
            tags = [t for t in range(self.lowest, method.delivery_tag + 1) if t in self.outstanding]
        elif method.delivery_tag in self.outstanding:
            tags = [method.delivery_tag]
        else:
            self.errors.append(f"confirm for unknown or settled tag {method.delivery_tag}")
            return
        self.outstanding.difference_update(tags)
        while self.lowest not in self.outstanding and self.lowest <= self.count:
            self.lowest += 1
        if isinstance(method, pika.spec.Basic.Ack):
            self.acked += len(tags)
        else:
            self.nacked.extend(tags)

    def done(self):
        return not self.outstanding


def publish_all_then_await_confirms(queue, count, body, properties):
    """Publishes `count` messages back to back on a SelectConnection, so that all are
    in flight before the first confirm is read, then runs the ioloop until every tag
    is settled or the deadline passes."""
    tracker = ConfirmTracker(count)
    state = {"open_error": None, "timed_out": False}

    def on_channel_open(channel):
        channel.confirm_delivery(on_confirm, callback=lambda _frame: publish(channel))

    def publish(channel):
        for _ in range(count):
            channel.basic_publish("", queue, body, properties)

    def on_confirm(frame):
        tracker.on_confirm(frame)
        if tracker.done() and connection.is_open:
            connection.close()

    def on_timeout():
        state["timed_out"] = True
        if connection.is_open:
            connection.close()

    def on_open_error(_connection, error):
        state["open_error"] = error
        connection.ioloop.stop()

    connection = pika.SelectConnection(
        connection_parameters(),
        on_open_callback=lambda conn: conn.channel(on_open_callback=on_channel_open),
        on_open_error_callback=on_open_error,
        on_close_callback=lambda conn, _reason: conn.ioloop.stop(),
    )
    connection.ioloop.call_later(IN_FLIGHT_DEADLINE_S, on_timeout)
    connection.ioloop.start()
    assert state["open_error"] is None, state["open_error"]
    assert not state["timed_out"], f"{len(tracker.outstanding)} of {count} never confirmed"
    return tracker


@pytest.mark.parametrize("persistent", [False, True], ids=["transient", "persistent"])
def test_many_confirms_in_flight_settle_every_tag_exactly_once(
    channel, durable_queue, persistent
):
    properties = pika.BasicProperties(delivery_mode=2 if persistent else 1)

    tracker = publish_all_then_await_confirms(
        durable_queue, IN_FLIGHT_COUNT, b"x" * 1024, properties
    )

    assert tracker.errors == []
    assert tracker.nacked == []
    assert tracker.acked == IN_FLIGHT_COUNT
    assert tracker.confirm_frames <= IN_FLIGHT_COUNT
    assert message_count(channel, durable_queue) == IN_FLIGHT_COUNT
