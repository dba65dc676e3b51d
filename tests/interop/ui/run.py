#!/usr/bin/env python3
"""End-to-end test of Warren's management web UI in headless Chromium.

Drives Debian's `chromium` over the Chrome DevTools Protocol (a websocket, with the
`websocket-client` package): opens the UI, logs in as guest, declares a queue through the
UI's form, publishes messages through the HTTP API (and, when pika and an AMQP URL are at
hand, takes some of them over AMQP so that deliver/ack rates and unacked messages show),
waits until the queues page shows the new counts and the overview chart has changed, and
saves screenshots as PNG.

Starts no broker: give it a running one.

Usage: run.py [--http-url URL] [--amqp-url URL] [--out DIR] [--chromium PATH]
  --http-url  management listener, default $WARREN_HTTP_URL
  --amqp-url  AMQP URL, default $WARREN_AMQP_URL (optional)
  --out       screenshot directory, default tests/interop/ui/out
Exits non-zero with a message on the first failed check.
"""

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import websocket

HERE = os.path.dirname(os.path.abspath(__file__))
USER, PASSWORD = "guest", "guest"
STEP_TIMEOUT_S = 40
CDP_CALL_TIMEOUT_S = 30
BROWSER_START_TIMEOUT_S = 30
WIDTH, HEIGHT = 1440, 1000
PUBLISHED = 40
ACKED = 10
UNACKED = 5


class Failure(Exception):
    pass


def log(text):
    print(f"ui: {text}", flush=True)


# ------------------------------------------------------------------ management API


def api(http_url, method, path, body=None):
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(http_url + path, data=data, method=method)
    request.add_header("Authorization", "Basic " + token)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            text = response.read()
    except urllib.error.HTTPError as error:
        raise Failure(f"{method} {path}: HTTP {error.code} {error.read()[:300]!r}") from None
    except OSError as error:
        raise Failure(f"{method} {path}: {error}") from None
    return json.loads(text) if text else None


# ------------------------------------------------------------------ browser


class Browser:
    """A headless Chromium with one page, driven over the DevTools protocol."""

    def __init__(self, executable):
        self.profile = tempfile.mkdtemp(prefix="warren-ui-chromium-")
        args = [
            executable,
            "--headless=new",
            "--remote-debugging-port=0",
            "--remote-debugging-address=127.0.0.1",
            "--remote-allow-origins=*",
            f"--user-data-dir={self.profile}",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-gpu",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-sync",
            "--disable-component-update",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            f"--window-size={WIDTH},{HEIGHT}",
            "about:blank",
        ]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")
        self.log_path = os.path.join(self.profile, "chromium.log")
        self.log_file = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            args, stdout=self.log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        self.ws = None
        self.next_id = 0
        self.errors = []
        port = self._devtools_port()
        targets = self._json(port, "/json/list")
        pages = [t for t in targets if t.get("type") == "page"]
        if not pages:
            raise Failure(f"chromium has no page target: {targets}")
        self.ws = websocket.create_connection(
            pages[0]["webSocketDebuggerUrl"], timeout=CDP_CALL_TIMEOUT_S, suppress_origin=True
        )
        self.call("Page.enable")
        self.call("Runtime.enable")
        # Content-Security-Policy violations are reported here, not as console calls.
        self.call("Log.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
        )

    def _devtools_port(self):
        marker = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + BROWSER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise Failure(f"chromium exited with {self.process.returncode}: {self._log_tail()}")
            try:
                with open(marker) as f:
                    first = f.readline().strip()
                if first:
                    return int(first)
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        raise Failure(f"chromium gave no DevTools port in {BROWSER_START_TIMEOUT_S}s: {self._log_tail()}")

    @staticmethod
    def _json(port, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return json.loads(response.read())

    def _log_tail(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-2000:].decode(errors="replace")
        except OSError:
            return "(no log)"

    def call(self, method, params=None):
        self.next_id += 1
        call_id = self.next_id
        self.ws.send(json.dumps({"id": call_id, "method": method, "params": params or {}}))
        deadline = time.monotonic() + CDP_CALL_TIMEOUT_S
        while time.monotonic() < deadline:
            message = json.loads(self.ws.recv())
            if message.get("method") == "Runtime.exceptionThrown":
                details = message["params"]["exceptionDetails"]
                text = details.get("exception", {}).get("description") or details.get("text")
                self.errors.append(text)
            elif message.get("method") == "Log.entryAdded":
                entry = message["params"]["entry"]
                if entry.get("level") == "error" and "Content Security Policy" in entry.get("text", ""):
                    self.errors.append(entry["text"])
            elif message.get("method") == "Runtime.consoleAPICalled":
                if message["params"].get("type") == "error":
                    args = message["params"].get("args", [])
                    self.errors.append(" ".join(str(a.get("value", a.get("description"))) for a in args))
            if message.get("id") == call_id:
                if "error" in message:
                    raise Failure(f"{method}: {message['error']}")
                return message.get("result", {})
        raise Failure(f"{method}: no answer in {CDP_CALL_TIMEOUT_S}s")

    def eval(self, expression):
        result = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise Failure(f"script failed: {details.get('exception', {}).get('description') or details}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression, what, timeout=STEP_TIMEOUT_S):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.eval(expression)
            if last:
                return last
            time.sleep(0.25)
        raise Failure(f"timed out after {timeout}s waiting for {what} (last value {last!r})")

    def navigate(self, url):
        self.call("Page.navigate", {"url": url})

    def screenshot(self, path):
        metrics = self.call("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        height = min(int(size["height"]) + 1, 6000)
        shot = self.call(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": WIDTH, "height": height, "scale": 1},
            },
        )
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        log(f"screenshot {path} ({WIDTH}x{height})")

    def close(self):
        try:
            if self.ws is not None:
                self.ws.close()
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self.log_file.close()
        shutil.rmtree(self.profile, ignore_errors=True)


# ------------------------------------------------------------------ the test


def js(value):
    return json.dumps(value)


def take_over_amqp(amqp_url, queue):
    """Acks ACKED messages and keeps UNACKED unacknowledged on an open channel; returns the
    connection (closed by the caller) or None when pika or the URL is missing."""
    if not amqp_url:
        log("no AMQP URL: every message stays ready")
        return None
    try:
        import pika  # noqa: PLC0415 - optional
    except ImportError:
        log("pika not installed: every message stays ready")
        return None
    params = pika.URLParameters(amqp_url)
    params.socket_timeout = 10
    params.blocked_connection_timeout = 10
    params.client_properties = {"connection_name": "warren-ui-test"}
    connection = pika.BlockingConnection(params)
    channel = connection.channel()
    for _ in range(ACKED):
        method, _, _ = channel.basic_get(queue, auto_ack=False)
        if method is None:
            raise Failure("basic_get found the queue empty")
        channel.basic_ack(method.delivery_tag)
        time.sleep(0.3)
    for _ in range(UNACKED):
        method, _, _ = channel.basic_get(queue, auto_ack=False)
        if method is None:
            raise Failure("basic_get found the queue empty")
    return connection


def run(args, browser, checks):
    # Credentials in the URL would log the browser in by themselves: the UI logs in through
    # its form, and this script's own API calls send guest's.
    parts = urllib.parse.urlsplit(args.http_url.rstrip("/"))
    http_url = f"{parts.scheme}://{parts.hostname}:{parts.port}{parts.path}"
    queue = f"ui-test-{os.getpid()}-{int(time.time()) % 100000}"
    stream = queue + "-stream"
    os.makedirs(args.out, exist_ok=True)

    browser.navigate(http_url + "/")
    browser.wait_for("!!document.querySelector('#login-form') && !document.querySelector('#login').hidden",
                     "the login form")
    browser.screenshot(os.path.join(args.out, "login.png"))
    checks.append("login form shown")

    # A wrong password: the form says so (and the browser shows no dialog of its own).
    browser.eval(f"""(() => {{
        document.querySelector('#login-user').value = {js(USER)};
        document.querySelector('#login-pass').value = 'not-the-password';
        document.querySelector('#login-form').requestSubmit(); return true; }})()""")
    browser.wait_for("document.querySelector('#login-error').textContent.includes('Login failed')",
                     "the login form to report a wrong password")
    checks.append("wrong password reported on the login form")

    browser.eval(f"""(() => {{
        document.querySelector('#login-user').value = {js(USER)};
        document.querySelector('#login-pass').value = {js(PASSWORD)};
        document.querySelector('#login-form').requestSubmit(); return true; }})()""")
    browser.wait_for("!document.querySelector('#app').hidden && !!document.querySelector('#chart-messages')",
                     "the overview after logging in")
    browser.wait_for("document.querySelector('#user').textContent === 'guest'", "the user name in the header")
    checks.append("logged in as guest")

    # Baseline: the overview chart has a couple of samples before anything is published.
    browser.wait_for("+document.querySelector('#chart-messages').dataset.points >= 2",
                     "two overview samples")
    before = json.loads(browser.eval("document.querySelector('#chart-messages').dataset.last"))
    log(f"overview before: {before}")

    # Declare the queue through the UI's form.
    browser.eval("location.hash = '#/queues'")
    browser.wait_for("!!document.querySelector('#q-add')", "the queues page")
    browser.eval(f"""(() => {{
        document.querySelector('#q-add-section').open = true;
        document.querySelector('#q-add-name').value = {js(queue)};
        document.querySelector('#q-add-submit').click(); return true; }})()""")
    browser.wait_for("document.querySelector('#q-add-result').textContent.includes('declared')",
                     "the declare confirmation")
    browser.wait_for(f"!!document.querySelector('tr[data-queue={js(queue)}]')", "the new queue's row")
    api(http_url, "GET", f"/api/queues/%2F/{urllib.parse.quote(queue, safe='')}")
    checks.append("queue declared through the UI form")

    # Publish through the API, spread over a few seconds so that the rates show.
    for i in range(PUBLISHED):
        body = {
            "routing_key": queue,
            "payload": json.dumps({"order": i + 1, "item": "widget", "note": "published by the UI test"}),
            "payload_encoding": "string",
            "properties": {"content_type": "application/json", "delivery_mode": 2},
        }
        answer = api(http_url, "POST", "/api/exchanges/%2F/amq.default/publish", body)
        if not answer or not answer.get("routed"):
            raise Failure(f"publish {i} not routed: {answer}")
        time.sleep(0.25)
    checks.append(f"{PUBLISHED} messages published through the API")
    connection = take_over_amqp(args.amqp_url, queue)
    try:
        unacked = UNACKED if connection else 0
        ready = PUBLISHED - (ACKED + UNACKED if connection else 0)
        total = ready + unacked

        # The queues page shows the new counts.
        cell = f"document.querySelector('tr[data-queue={js(queue)}] td[data-col=%s]')"
        browser.wait_for(f"({cell % 'messages'} || {{}}).textContent === {js(str(total))}",
                         f"the queues page to show {total} messages")
        browser.wait_for(f"({cell % 'messages_ready'} || {{}}).textContent === {js(str(ready))}",
                         f"the queues page to show {ready} ready")
        browser.wait_for(f"({cell % 'messages_unacknowledged'} || {{}}).textContent === {js(str(unacked))}",
                         f"the queues page to show {unacked} unacked")
        checks.append(f"queues page shows {total} messages ({ready} ready, {unacked} unacked)")
        browser.screenshot(os.path.join(args.out, "queues.png"))

        # The overview chart has changed: its last total and the rate chart's peak.
        browser.eval("location.hash = '#/overview'")
        browser.wait_for("!!document.querySelector('#chart-rates')", "the overview page")
        browser.wait_for(
            f"""(() => {{ const last = JSON.parse(document.querySelector('#chart-messages').dataset.last || '{{}}');
                return last.total !== {js(before.get('total'))} && last.total >= {total}; }})()""",
            "the overview's message chart to change")
        browser.wait_for("+document.querySelector('#chart-rates').dataset.max > 0",
                         "a non-zero publish rate in the overview's rate chart")
        browser.wait_for("document.querySelector('#tot-queues').textContent !== '0'", "the queue total")
        browser.wait_for("!!document.querySelector('#mem-meter')", "the node memory meter")
        browser.wait_for("!!document.querySelector('#alarm-status')", "the alarm status")
        after = json.loads(browser.eval("document.querySelector('#chart-messages').dataset.last"))
        log(f"overview after: {after}")
        checks.append(f"overview chart changed (total {before.get('total')} -> {after.get('total')})")
        time.sleep(4)  # a couple more samples so the lines run on past the step
        # Point at the message chart: it shows the sample under the pointer.
        box = browser.eval("""(() => { const r = document.querySelector('#chart-messages').getBoundingClientRect();
            return [r.left, r.top, r.width, r.height]; })()""")
        browser.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": box[0] + box[2] * 0.93,
                                                  "y": box[1] + box[3] * 0.5})
        browser.wait_for("document.querySelector('#chart-messages')._hoverIndex >= 0", "the chart's hover tooltip")
        checks.append("chart shows the sample under the pointer")
        browser.screenshot(os.path.join(args.out, "overview.png"))

        # The queue's own page: counts, chart, and the messages from "Get messages".
        browser.eval(f"location.hash = '#/queue/%2F/' + encodeURIComponent({js(queue)})")
        browser.wait_for(f"(document.querySelector('#qp-total') || {{}}).textContent === {js(str(total))}",
                         "the queue page's total")
        browser.wait_for("+document.querySelector('#chart-q-messages').dataset.points >= 3",
                         "three samples in the queue's chart")
        browser.eval("""(() => { document.querySelector('#qp-get [name=count]').value = 3;
            document.querySelector('#qp-get-submit').click(); return true; })()""")
        browser.wait_for("document.querySelectorAll('#qp-messages .message').length === 3", "three fetched messages")
        payload = browser.eval("document.querySelector('#qp-messages .payload').textContent")
        if '"item": "widget"' not in payload:
            raise Failure(f"unexpected payload shown: {payload!r}")
        checks.append("queue page shows its counts, chart and fetched payloads")
        browser.screenshot(os.path.join(args.out, "queue.png"))

        if connection:
            browser.eval("location.hash = '#/connections'")
            browser.wait_for("document.querySelector('#c-table').textContent.includes('warren-ui-test')",
                             "the test's AMQP connection on the connections page")
            checks.append("connections page lists the AMQP connection")
            browser.screenshot(os.path.join(args.out, "connections.png"))
            browser.eval("location.hash = '#/channels'")
            browser.wait_for("document.querySelectorAll('#ch-table tbody td[data-col=name]').length >= 1",
                             "the test's channel on the channels page")
            checks.append("channels page lists the channel")
            browser.screenshot(os.path.join(args.out, "channels.png"))

        browser.eval("location.hash = '#/exchanges'")
        browser.wait_for("!!document.querySelector('tr[data-exchange=\"amq.direct\"]')", "the exchanges list")
        checks.append("exchanges page lists amq.direct")
        browser.screenshot(os.path.join(args.out, "exchanges.png"))

        # A stream: its type in the queues list, its log figures on its page, and the Streams
        # page with the stream protocol's connections, publishers and consumers.
        stream_path = f"/api/queues/%2F/{urllib.parse.quote(stream, safe='')}"
        api(http_url, "PUT", stream_path,
            {"durable": True, "auto_delete": False, "arguments": {"x-queue-type": "stream"}})
        for i in range(3):
            api(http_url, "POST", "/api/exchanges/%2F/amq.default/publish",
                {"routing_key": stream, "payload": f"event {i}", "payload_encoding": "string",
                 "properties": {}})
        browser.eval("location.hash = '#/queues'")
        browser.wait_for(f"((document.querySelector('tr[data-queue={js(stream)}] td[data-col=type]') || {{}})"
                         ".textContent || '') === 'stream'", "the stream's type in the queues list")
        browser.eval(f"location.hash = '#/queue/%2F/' + encodeURIComponent({js(stream)})")
        browser.wait_for("!!document.querySelector('#qp-segments')", "the stream's segments on its page")
        browser.wait_for(f"(document.querySelector('#qp-total') || {{}}).textContent === '3'",
                         "the stream's 3 messages")
        checks.append("stream shown with its type, segments and messages")
        browser.screenshot(os.path.join(args.out, "stream.png"))
        browser.eval("location.hash = '#/streams'")
        browser.wait_for("['#s-connections', '#s-publishers', '#s-consumers'].every((id) =>"
                         " !!document.querySelector(id + ' table, ' + id + ' .notice')"
                         " || document.querySelector(id).textContent.startsWith('No stream'))",
                         "the Streams page's three lists")
        checks.append("Streams page lists stream connections, publishers and consumers")
        browser.screenshot(os.path.join(args.out, "streams.png"))

        # Users: a table, or a clear message where this build has no /api/users.
        browser.eval("location.hash = '#/users'")
        browser.wait_for("!!document.querySelector('#l-table table, #l-table .notice')", "the users page")
        checks.append("users page shows a table or a clear message")
        browser.screenshot(os.path.join(args.out, "users.png"))
    finally:
        if connection:
            try:
                connection.close()
            except Exception:  # noqa: BLE001 - best effort
                pass
        for name in (queue, stream):
            try:
                api(http_url, "DELETE", f"/api/queues/%2F/{urllib.parse.quote(name, safe='')}")
            except Failure as error:
                log(f"cleanup: {error}")

    if browser.errors:
        raise Failure("JavaScript errors on the page: " + "; ".join(browser.errors[:5]))
    checks.append("no JavaScript errors")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http-url", default=os.environ.get("WARREN_HTTP_URL"))
    parser.add_argument("--amqp-url", default=os.environ.get("WARREN_AMQP_URL"))
    parser.add_argument("--out", default=os.environ.get("WARREN_UI_OUT", os.path.join(HERE, "out")))
    parser.add_argument("--chromium", default=os.environ.get("CHROMIUM"))
    args = parser.parse_args()
    if not args.http_url:
        parser.error("--http-url or WARREN_HTTP_URL is required")
    executable = args.chromium or shutil.which("chromium") or shutil.which("chromium-browser")
    if not executable:
        print("ui: FAIL chromium not found (apt-get install chromium)")
        return 1
    checks = []
    browser = None
    try:
        browser = Browser(executable)
        run(args, browser, checks)
    except (Failure, OSError, websocket.WebSocketException) as error:
        for check in checks:
            log(f"ok   {check}")
        log(f"FAIL {error}")
        print(f"{len(checks)} passed, 1 failed")
        return 1
    finally:
        if browser is not None:
            browser.close()
    for check in checks:
        log(f"ok   {check}")
    print(f"{len(checks)} passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
