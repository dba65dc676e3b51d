"""Routing through direct, fanout, topic and headers exchanges.

Each test binds exclusive queues to a fresh auto-delete exchange, publishes with
confirms (so every message is routed before basic.get looks), and compares each
queue's contents with a hand-written expectation.
"""

import pika
import pytest

from helpers import assert_channel_closed, drain as drain_at_most


def drain(channel, queue):
    return drain_at_most(channel, queue, 1000)


@pytest.fixture
def router(channel, names):
    """Declares an exchange and named queues with bindings; routes and reports."""
    channel.confirm_delivery()

    class Router:
        def __init__(self):
            self.exchange = names("x")
            self.queues = {}

        def declare(self, exchange_type, bindings):
            """bindings: {queue label: [(routing_key, arguments), ...]}"""
            channel.exchange_declare(self.exchange, exchange_type, auto_delete=True)
            for label, keys in bindings.items():
                queue = names(label)
                channel.queue_declare(queue, exclusive=True)
                self.queues[label] = queue
                for routing_key, arguments in keys:
                    channel.queue_bind(queue, self.exchange, routing_key, arguments)

        def publish(self, routing_key, body, headers=None):
            properties = pika.BasicProperties(headers=headers)
            channel.basic_publish(self.exchange, routing_key, body.encode(), properties)

        def contents(self):
            return {label: drain(channel, queue) for label, queue in self.queues.items()}

    return Router()


def test_direct_routes_on_exact_key(router, channel):
    router.declare("direct", {
        "a": [("a", None)], "b": [("b", None)], "ab": [("a", None), ("b", None)],
    })
    for key in ("a", "b", "c", "A", ""):
        router.publish(key, f"to-{key}")

    assert router.contents() == {"a": ["to-a"], "b": ["to-b"], "ab": ["to-a", "to-b"]}

    channel.queue_unbind(router.queues["ab"], router.exchange, "a")
    router.publish("a", "after-unbind")
    assert router.contents() == {"a": ["after-unbind"], "b": [], "ab": []}


def test_fanout_ignores_routing_key(router):
    router.declare("fanout", {"one": [("", None)], "two": [("ignored", None)]})
    router.publish("anything", "m1")
    router.publish("", "m2")
    assert router.contents() == {"one": ["m1", "m2"], "two": ["m1", "m2"]}


TOPIC_BINDINGS = {
    "orange": ["*.orange.*"],
    "rabbit": ["*.*.rabbit"],
    "lazy": ["lazy.#"],
    "all": ["#"],
    "a_b": ["a.#.b"],
    "ends_z": ["#.z"],
    "twice": ["*.orange.*", "*.*.rabbit"],
    "exact": ["quick.brown.fox"],
}
TOPIC_KEYS = [
    "quick.orange.rabbit", "lazy.orange.elephant", "quick.orange.fox", "lazy.brown.fox",
    "lazy", "quick.brown.fox", "quick.orange.male.rabbit", "a.b", "a.x.y.b", "z", "x.y.z",
    "",
]
TOPIC_EXPECTED = {
    "orange": ["quick.orange.rabbit", "lazy.orange.elephant", "quick.orange.fox"],
    "rabbit": ["quick.orange.rabbit"],
    "lazy": ["lazy.orange.elephant", "lazy.brown.fox", "lazy"],
    "all": TOPIC_KEYS,
    "a_b": ["a.b", "a.x.y.b"],
    "ends_z": ["z", "x.y.z"],
    # Bound twice and matched by both patterns, it still gets one copy.
    "twice": ["quick.orange.rabbit", "lazy.orange.elephant", "quick.orange.fox"],
    "exact": ["quick.brown.fox"],
}


def test_topic_patterns(router):
    router.declare("topic", {
        label: [(pattern, None) for pattern in patterns]
        for label, patterns in TOPIC_BINDINGS.items()
    })
    for key in TOPIC_KEYS:
        router.publish(key, key)
    assert router.contents() == TOPIC_EXPECTED


def test_headers_match_all_and_any(router):
    router.declare("headers", {
        "all": [("", {"x-match": "all", "format": "pdf", "type": "report"})],
        "any": [("", {"x-match": "any", "format": "pdf", "type": "log"})],
        "default_all": [("", {"format": "pdf", "type": "report"})],
        "typed": [("", {"x-match": "all", "count": 3})],
    })
    router.publish("", "pdf-report", {"format": "pdf", "type": "report", "extra": 1})
    router.publish("", "pdf-log", {"format": "pdf", "type": "log"})
    router.publish("", "zip-log", {"format": "zip", "type": "log"})
    router.publish("", "zip-only", {"format": "zip"})
    router.publish("", "no-headers")
    router.publish("", "count-3", {"count": 3})
    router.publish("", "count-str", {"count": "3"})

    assert router.contents() == {
        "all": ["pdf-report"],
        "any": ["pdf-report", "pdf-log", "zip-log"],
        "default_all": ["pdf-report"],
        "typed": ["count-3"],
    }


def test_default_exchange_routes_by_queue_name_and_refuses_bindings(channel, names):
    queue = names("q")
    channel.queue_declare(queue, exclusive=True)
    channel.confirm_delivery()
    channel.basic_publish("", queue, b"direct to queue")
    assert drain(channel, queue) == ["direct to queue"]

    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.queue_bind(queue, "", "other-key")
    assert_channel_closed(excinfo, 403, "ACCESS_REFUSED")


@pytest.mark.parametrize("name,exchange_type", [
    ("amq.direct", "direct"), ("amq.fanout", "fanout"), ("amq.topic", "topic"),
    ("amq.headers", "headers"), ("amq.match", "headers"),
])
def test_predeclared_exchanges_exist(channel, name, exchange_type):
    channel.exchange_declare(name, exchange_type, passive=True)
