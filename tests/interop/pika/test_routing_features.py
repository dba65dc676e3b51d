"""What RabbitMQ applications rely on beyond plain routing, with pika: the consistent-hash,
modulus-hash and local-random exchanges, alternate exchanges, exchange-to-exchange bindings,
sender-selected distribution (CC/BCC), direct reply-to, single active consumer, consumer
priorities, per-message expiration and x-expires. Every publish is confirmed before a queue
is looked at. The plugin exchanges need RabbitMQ's plugins when run against RabbitMQ.
"""

import time

import pika
import pytest

from helpers import drain as drain_at_most, wait_until


def drain(channel, queue):
    return drain_at_most(channel, queue, 10000)


@pytest.fixture
def confirmed(channel):
    channel.confirm_delivery()
    return channel


def queues(channel, names, exchange, count, binding_key):
    made = []
    for i in range(count):
        queue = names(f"q{i}")
        channel.queue_declare(queue, exclusive=True)
        channel.queue_bind(queue, exchange, binding_key(i))
        made.append(queue)
    return made


def test_consistent_hash_spreads_by_weight_and_keeps_a_key_on_one_queue(confirmed, names):
    exchange = names("ch")
    confirmed.exchange_declare(exchange, "x-consistent-hash", auto_delete=True)
    # weights 1 and 3: the second queue gets about three quarters
    light, heavy = queues(confirmed, names, exchange, 2, lambda i: "1" if i == 0 else "3")
    for i in range(2000):
        confirmed.basic_publish(exchange, f"key-{i}", b"m")
    for _ in range(5):
        confirmed.basic_publish(exchange, "same-key", b"same")
    got_light, got_heavy = drain(confirmed, light), drain(confirmed, heavy)
    assert len(got_light) + len(got_heavy) == 2005
    assert 0.15 < len(got_light) / 2005 < 0.35, (len(got_light), len(got_heavy))
    assert got_light.count("same") in (0, 5) and got_heavy.count("same") in (0, 5)


def test_modulus_hash_is_stable_per_key(confirmed, names):
    exchange = names("mh")
    confirmed.exchange_declare(exchange, "x-modulus-hash", auto_delete=True)
    made = queues(confirmed, names, exchange, 3, lambda i: "")
    for round_ in range(2):
        for i in range(30):
            confirmed.basic_publish(exchange, f"k{i}", f"{round_}:k{i}".encode())
    seen = {}
    total = 0
    for queue in made:
        for body in drain(confirmed, queue):
            total += 1
            key = body.split(":")[1]
            assert seen.setdefault(key, queue) == queue, f"{key} went to two queues"
    assert total == 60
    assert len(set(seen.values())) > 1, "30 keys over 3 queues use more than one queue"


def test_local_random_delivers_each_message_to_one_queue(confirmed, names):
    exchange = names("lr")
    confirmed.exchange_declare(exchange, "x-local-random", auto_delete=True)
    made = queues(confirmed, names, exchange, 3, lambda i: "")
    for i in range(300):
        confirmed.basic_publish(exchange, "any", f"m{i}".encode())
    counts = [len(drain(confirmed, q)) for q in made]
    assert sum(counts) == 300 and all(c > 0 for c in counts), counts


def test_alternate_exchange_takes_unroutable_messages(confirmed, names):
    ae, main = names("ae"), names("main")
    confirmed.exchange_declare(ae, "fanout", auto_delete=True)
    confirmed.exchange_declare(
        main, "direct", auto_delete=True, arguments={"alternate-exchange": ae}
    )
    routed, unrouted = names("routed"), names("unrouted")
    for queue in (routed, unrouted):
        confirmed.queue_declare(queue, exclusive=True)
    confirmed.queue_bind(routed, main, "known")
    confirmed.queue_bind(unrouted, ae, "")
    confirmed.basic_publish(main, "known", b"a")
    confirmed.basic_publish(main, "unknown", b"b")
    assert drain(confirmed, routed) == ["a"]
    assert drain(confirmed, unrouted) == ["b"]


def test_exchange_to_exchange_bindings_chain(confirmed, names):
    upstream, downstream = names("up"), names("down")
    confirmed.exchange_declare(upstream, "topic", auto_delete=True)
    confirmed.exchange_declare(downstream, "direct", auto_delete=True)
    confirmed.exchange_bind(downstream, upstream, "orders.#")
    queue = names("q")
    confirmed.queue_declare(queue, exclusive=True)
    confirmed.queue_bind(queue, downstream, "orders.eu")
    confirmed.basic_publish(upstream, "orders.eu", b"eu")
    confirmed.basic_publish(upstream, "orders.us", b"us")
    confirmed.basic_publish(upstream, "invoices.eu", b"no")
    assert drain(confirmed, queue) == ["eu"]


def test_cc_and_bcc_headers_add_routing_keys_and_bcc_is_removed(confirmed, names):
    a, b, c = names("a"), names("b"), names("c")
    for queue in (a, b, c):
        confirmed.queue_declare(queue, exclusive=True)
    headers = {"CC": [b], "BCC": [c]}
    confirmed.basic_publish("", a, b"x", pika.BasicProperties(headers=headers))
    for queue in (a, b, c):
        method, properties, body = confirmed.basic_get(queue, auto_ack=True)
        assert body == b"x", queue
        assert "BCC" not in (properties.headers or {}), "BCC must not reach consumers"
        assert (properties.headers or {}).get("CC") == [b]


def test_direct_reply_to_answers_reach_the_requester(connection, names):
    requests = connection.channel()
    server_queue = names("rpc")
    requests.queue_declare(server_queue, exclusive=True)
    replies = []
    requests.basic_consume(
        "amq.rabbitmq.reply-to", lambda ch, m, p, body: replies.append(body), auto_ack=True
    )
    requests.basic_publish(
        "", server_queue, b"ping", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to")
    )
    method, properties, body = requests.basic_get(server_queue, auto_ack=True)
    assert properties.reply_to.startswith("amq.rabbitmq.reply-to.")
    requests.basic_publish("", properties.reply_to, b"pong")
    assert wait_until(connection, lambda: replies == [b"pong"]), replies


def test_single_active_consumer_fails_over(connection, names):
    channel = connection.channel()
    channel.confirm_delivery()
    queue = names("sac")
    channel.queue_declare(queue, exclusive=True, arguments={"x-single-active-consumer": True})
    got = {"first": [], "second": []}
    first = channel.basic_consume(queue, lambda c, m, p, b: got["first"].append(b), auto_ack=True)
    channel.basic_consume(queue, lambda c, m, p, b: got["second"].append(b), auto_ack=True)
    for i in range(3):
        channel.basic_publish("", queue, f"a{i}".encode())
    assert wait_until(connection, lambda: len(got["first"]) == 3)
    assert got["second"] == []
    channel.basic_cancel(first)
    channel.basic_publish("", queue, b"b0")
    assert wait_until(connection, lambda: got["second"] == [b"b0"]), got


def test_consumer_priorities_prefer_the_higher_one(connection, names):
    channel = connection.channel()
    channel.confirm_delivery()
    queue = names("prio")
    channel.queue_declare(queue, exclusive=True)
    got = {"low": [], "high": []}
    channel.basic_consume(queue, lambda c, m, p, b: got["low"].append(b), auto_ack=True,
                          arguments={"x-priority": 1})
    channel.basic_consume(queue, lambda c, m, p, b: got["high"].append(b), auto_ack=True,
                          arguments={"x-priority": 10})
    for i in range(5):
        channel.basic_publish("", queue, f"m{i}".encode())
    assert wait_until(connection, lambda: len(got["high"]) + len(got["low"]) == 5)
    assert len(got["high"]) == 5, got


def test_per_message_expiration_drops_expired_messages_behind_others(confirmed, names):
    queue = names("exp")
    confirmed.queue_declare(queue, exclusive=True)
    confirmed.basic_publish("", queue, b"keeps")
    confirmed.basic_publish("", queue, b"expires", pika.BasicProperties(expiration="50"))
    confirmed.basic_publish("", queue, b"also keeps")
    time.sleep(0.3)
    assert drain(confirmed, queue) == ["keeps", "also keeps"]


def test_unused_queue_expires(connect, names):
    queue = names("x-expires")
    channel = connect().channel()
    channel.queue_declare(queue, arguments={"x-expires": 200})
    time.sleep(1.0)
    probe = connect().channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        probe.queue_declare(queue, passive=True)
    assert closed.value.reply_code == 404
