"""pika over TLS against a broker started by run.sh.

Usage: tls_pika.py CERTDIR HOST TLS_PORT USER PASSWORD
Each scenario prints `ok NAME` or `FAIL NAME: why`; the last line is `pika: N passed, M failed`.
"""

import ssl
import sys
import uuid

import pika
from pika.credentials import ExternalCredentials, PlainCredentials

CERTS, HOST, PORT, USER, PASSWORD = sys.argv[1], sys.argv[2], int(sys.argv[3]), *sys.argv[4:6]


def context(client=None, ca="ca.pem"):
    ctx = ssl.create_default_context(cafile=f"{CERTS}/{ca}")
    if client:
        ctx.load_cert_chain(f"{CERTS}/{client}.pem", f"{CERTS}/{client}.key")
    return ctx


def params(ctx, credentials=None):
    return pika.ConnectionParameters(
        host=HOST, port=PORT, virtual_host="/",
        credentials=credentials or PlainCredentials(USER, PASSWORD),
        ssl_options=pika.SSLOptions(ctx, server_hostname="localhost"),
        connection_attempts=1, socket_timeout=5, blocked_connection_timeout=5)


def round_trip(ctx, credentials=None):
    """Publishes one confirmed message to a fresh queue and reads it back."""
    conn = pika.BlockingConnection(params(ctx, credentials))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        queue = ch.queue_declare("", exclusive=True).method.queue
        body = uuid.uuid4().bytes
        ch.basic_publish("", queue, body, mandatory=True)
        for _ in range(50):
            method, _props, got = ch.basic_get(queue, auto_ack=True)
            if method:
                assert got == body, f"got {got!r}, sent {body!r}"
                return
            conn.sleep(0.1)
        raise AssertionError("the published message never arrived")
    finally:
        conn.close()


def refused(ctx, credentials=None):
    try:
        conn = pika.BlockingConnection(params(ctx, credentials))
    except Exception as err:  # pika wraps TLS failures in several exception types
        return f"{type(err).__name__}: {err}"
    conn.close()
    raise AssertionError("the broker accepted the connection")


SCENARIOS = [
    ("plain_login_no_client_cert", lambda: round_trip(context())),
    ("plain_login_with_client_cert", lambda: round_trip(context("client"))),
    ("external_login_with_client_cert",
     lambda: round_trip(context("client"), ExternalCredentials())),
    ("refused_wrong_ca_client_cert", lambda: refused(context("client-wrongca"))),
    ("refused_expired_client_cert", lambda: refused(context("client-expired"))),
    ("refused_client_not_trusting_server_ca", lambda: refused(context("client", "wrongca.pem"))),
    ("refused_external_without_client_cert",
     lambda: refused(context(), ExternalCredentials())),
]


def main():
    passed = failed = 0
    only = sys.argv[6:]
    for name, run in SCENARIOS:
        if only and name not in only:
            continue
        try:
            detail = run()
            passed += 1
            print(f"ok {name}" + (f" ({detail})" if detail else ""), flush=True)
            if name.startswith("refused"):
                round_trip(context())  # the broker carries on after a refusal
                print(f"ok {name}: a good client still connects afterwards", flush=True)
        except Exception as err:
            failed += 1
            print(f"FAIL {name}: {type(err).__name__}: {err}", flush=True)
    print(f"pika: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
