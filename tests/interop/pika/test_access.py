"""Vhosts, users, permissions, topic permissions, vhost limits and policies with pika, set up
through the management HTTP API as an operator would (RabbitMQ's access-control, vhosts and
policies guides). Needs WARREN_HTTP_URL (http://user:pass@host:port of the broker's HTTP API,
an administrator); skipped without it. Every user and vhost made here is deleted again.
"""

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pika
import pytest

from helpers import connection_parameters, wait_until

# `rabbitmqctl add_user alice s3cret` on RabbitMQ 3.10.8, from `export_definitions`.
RABBITMQ_HASH_OF_S3CRET = "WzEuGDlx06Z/o2mxPWCcglSt4C3fkjr9b985lgeO4g6N6vqC"


class Admin:
    """A tiny client of the management API (urllib, so no extra package)."""

    def __init__(self, url):
        parts = urllib.parse.urlsplit(url)
        self.base = f"{parts.scheme}://{parts.hostname}:{parts.port}"
        credentials = f"{parts.username or 'guest'}:{parts.password or 'guest'}"
        self.auth = "Basic " + base64.b64encode(credentials.encode()).decode()

    def call(self, method, path, body=None, auth=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Authorization", auth or self.auth)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                text = response.read().decode()
                return response.status, json.loads(text) if text else None
        except urllib.error.HTTPError as error:
            text = error.read().decode()
            return error.code, json.loads(text) if text else None

    def ok(self, method, path, body=None):
        status, answer = self.call(method, path, body)
        assert 200 <= status < 300, f"{method} {path}: {status} {answer}"
        return answer


def quote(name):
    return urllib.parse.quote(name, safe="")


@pytest.fixture
def admin():
    url = os.environ.get("WARREN_HTTP_URL")
    if not url:
        pytest.skip("WARREN_HTTP_URL is not set (the broker's HTTP API)")
    return Admin(url)


@pytest.fixture
def tenant(admin):
    """A fresh vhost and user (password `s3cret`, RabbitMQ's own hash), removed afterwards."""
    run = uuid.uuid4().hex[:8]
    vhost, user = f"pika-vhost-{run}", f"pika-user-{run}"
    admin.ok("PUT", f"/api/vhosts/{quote(vhost)}", {"description": "pika access tests"})
    admin.ok(
        "PUT",
        f"/api/users/{quote(user)}",
        {
            "password_hash": RABBITMQ_HASH_OF_S3CRET,
            "hashing_algorithm": "rabbit_password_hashing_sha256",
            "tags": "",
        },
    )
    yield vhost, user
    admin.call("DELETE", f"/api/vhosts/{quote(vhost)}")
    admin.call("DELETE", f"/api/users/{quote(user)}")


def grant(admin, vhost, user, configure=".*", write=".*", read=".*"):
    admin.ok(
        "PUT",
        f"/api/permissions/{quote(vhost)}/{quote(user)}",
        {"configure": configure, "write": write, "read": read},
    )


def connect_as(user, password, vhost):
    params = connection_parameters()
    params.credentials = pika.PlainCredentials(user, password)
    params.virtual_host = vhost
    return pika.BlockingConnection(params)


def test_a_user_with_a_rabbitmq_password_hash_logs_in(admin, tenant):
    vhost, user = tenant
    grant(admin, vhost, user)
    connection = connect_as(user, "s3cret", vhost)
    assert connection.is_open
    connection.close()
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        connect_as(user, "wrong", vhost)


def test_a_vhost_without_permissions_is_refused(admin, tenant):
    vhost, user = tenant
    with pytest.raises(pika.exceptions.AMQPConnectionError) as refused:
        connect_as(user, "s3cret", vhost)
    assert "refused for user" in str(refused.value) or isinstance(
        refused.value, pika.exceptions.ProbableAccessDeniedError
    ), refused.value


def test_each_operation_checks_its_permission(admin, tenant):
    vhost, user = tenant
    grant(admin, vhost, user, configure="^own-", write="^own-|^amq\\.default$", read="^own-")
    connection = connect_as(user, "s3cret", vhost)
    channel = connection.channel()
    channel.queue_declare("own-q")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare("other-q")
    assert closed.value.reply_code == 403
    # Warren names the permission too ("configure access to queue ..."), RabbitMQ 3.10 not.
    assert "access to queue 'other-q'" in closed.value.reply_text
    assert f"refused for user '{user}'" in closed.value.reply_text
    channel = connection.channel()
    channel.confirm_delivery()
    channel.basic_publish("", "own-q", b"allowed")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.basic_publish("amq.direct", "k", b"refused")
        channel.queue_declare("own-q", passive=True)
    assert closed.value.reply_code == 403
    assert "access to exchange 'amq.direct'" in closed.value.reply_text
    channel = connection.channel()
    method, _, body = channel.basic_get("own-q", auto_ack=True)
    assert body == b"allowed"
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_bind("own-q", "amq.direct", "k")
    assert "access to exchange 'amq.direct'" in closed.value.reply_text
    connection.close()


def test_topic_permissions_check_the_routing_key(admin, tenant):
    vhost, user = tenant
    grant(admin, vhost, user)
    admin.ok(
        "PUT",
        f"/api/topic-permissions/{quote(vhost)}/{quote(user)}",
        {"exchange": "amq.topic", "write": "^{username}\\.", "read": ".*"},
    )
    connection = connect_as(user, "s3cret", vhost)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.basic_publish("amq.topic", f"{user}.orders", b"mine")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.basic_publish("amq.topic", "someone.else", b"not mine")
        channel.queue_declare("", exclusive=True)
    assert closed.value.reply_code == 403
    assert "topic 'someone.else'" in closed.value.reply_text
    connection.close()


def test_vhost_limits_cap_connections_and_queues(admin, tenant):
    vhost, user = tenant
    grant(admin, vhost, user)
    admin.ok("PUT", f"/api/vhost-limits/{quote(vhost)}/max-connections", {"value": 1})
    admin.ok("PUT", f"/api/vhost-limits/{quote(vhost)}/max-queues", {"value": 1})
    first = connect_as(user, "s3cret", vhost)
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        connect_as(user, "s3cret", vhost)
    channel = first.channel()
    channel.queue_declare("one")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare("two")
    assert closed.value.reply_code == 406
    assert "queue limit" in closed.value.reply_text
    first.close()


def test_policies_apply_to_existing_queues(admin, tenant):
    vhost, user = tenant
    grant(admin, vhost, user)
    connection = connect_as(user, "s3cret", vhost)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("capped")
    admin.ok(
        "PUT",
        f"/api/policies/{quote(vhost)}/cap",
        {"pattern": "^capped$", "definition": {"max-length": 2}, "apply-to": "queues"},
    )
    for i in range(5):
        channel.basic_publish("", "capped", f"m{i}".encode())
    assert channel.queue_declare("capped", passive=True).method.message_count == 2
    admin.ok(
        "PUT",
        f"/api/operator-policies/{quote(vhost)}/ops",
        {"pattern": ".*", "definition": {"max-length": 1}, "apply-to": "queues"},
    )
    channel.basic_publish("", "capped", b"m5")
    assert channel.queue_declare("capped", passive=True).method.message_count == 1
    status, answer = admin.call(
        "PUT",
        f"/api/policies/{quote(vhost)}/bad",
        {"pattern": ".*", "definition": {"colour": "red"}},
    )
    assert status == 400 and "colour" in answer["reason"], answer
    connection.close()


def test_deleting_a_user_closes_their_connections(admin, tenant):
    vhost, user = tenant
    grant(admin, vhost, user)
    connection = connect_as(user, "s3cret", vhost)
    admin.ok("DELETE", f"/api/users/{quote(user)}")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        wait_until(connection, lambda: not connection.is_open)
    assert closed.value.reply_code == 320
    assert f"user '{user}' is deleted" in closed.value.reply_text


def test_users_without_tags_cannot_use_the_http_api(admin, tenant):
    vhost, user = tenant
    auth = "Basic " + base64.b64encode(f"{user}:s3cret".encode()).decode()
    status, _ = admin.call("GET", "/api/users", auth=auth)
    assert status == 401
    # As RabbitMQ: a PUT without a password leaves the user without one, so send it again.
    admin.ok("PUT", f"/api/users/{quote(user)}", {"password": "s3cret", "tags": "monitoring"})
    status, _ = admin.call("GET", "/api/overview", auth=auth)
    assert status == 200
    status, _ = admin.call("GET", "/api/users", auth=auth)
    assert status == 401, "monitoring is not administrator"


def test_definitions_round_trip_through_the_api(admin, tenant):
    vhost, user = tenant
    grant(admin, vhost, user, configure="^x")
    exported = admin.ok("GET", "/api/definitions")
    assert any(u["name"] == user and u["password_hash"] for u in exported["users"])
    assert any(
        p["user"] == user and p["vhost"] == vhost and p["configure"] == "^x"
        for p in exported["permissions"]
    )
    admin.ok("DELETE", f"/api/permissions/{quote(vhost)}/{quote(user)}")
    admin.ok("POST", "/api/definitions", exported)
    permission = admin.ok("GET", f"/api/permissions/{quote(vhost)}/{quote(user)}")
    assert permission["configure"] == "^x"
