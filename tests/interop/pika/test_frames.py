"""Bodies split over many frames at the smallest frame_max, compared byte for byte."""

import hashlib
import random

import pytest

from helpers import consume_n

FRAME_MAX = 4096
# A body frame carries frame_max minus 7 header bytes and 1 frame-end byte.
BODY_PER_FRAME = FRAME_MAX - 8
THREE_MIB = 3 * 1024 * 1024
SIZES = [0, 1, BODY_PER_FRAME - 1, BODY_PER_FRAME, BODY_PER_FRAME + 1, 2 * BODY_PER_FRAME,
         THREE_MIB]


def body_of(size):
    return random.Random(size).randbytes(size)


@pytest.fixture
def small_frame_channel(connect):
    connection = connect(frame_max=FRAME_MAX)
    assert connection._impl.params.frame_max == FRAME_MAX, "broker did not accept frame_max"
    return connection.channel()


@pytest.mark.parametrize("size", SIZES)
def test_body_round_trips_through_basic_get(small_frame_channel, names, size):
    channel = small_frame_channel
    queue = names("q")
    channel.queue_declare(queue, exclusive=True)
    channel.confirm_delivery()
    sent = body_of(size)

    channel.basic_publish("", queue, sent)
    method, _, received = channel.basic_get(queue, auto_ack=True)

    assert method is not None
    assert len(received) == size
    assert hashlib.sha256(received).digest() == hashlib.sha256(sent).digest()


def test_three_mib_bodies_round_trip_through_consume(small_frame_channel, names):
    channel = small_frame_channel
    queue = names("q")
    channel.queue_declare(queue, exclusive=True)
    channel.confirm_delivery()
    sent = [body_of(THREE_MIB + delta) for delta in (0, 1, 2)]
    for body in sent:
        channel.basic_publish("", queue, body)

    deliveries = consume_n(channel, queue, len(sent), timeout_s=20.0, auto_ack=True)

    assert len(deliveries) == len(sent)
    for (_, _, received), expected in zip(deliveries, sent):
        assert received == expected
