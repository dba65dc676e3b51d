// The connection handshake as amqplib sees it: the capabilities in connection.start's
// server-properties, a refused login, and a clean close.

'use strict';

const assert = require('node:assert/strict');
const { test } = require('node:test');
const amqp = require('amqplib');
const h = require('./helpers');

const options = { timeout: h.TEST_TIMEOUT_MS };

test('server properties advertise the capabilities amqplib relies on', options, async (t) => {
  const connection = await h.connect(t);
  const properties = connection.connection.serverProperties;
  assert.equal(typeof properties, 'object');
  // RabbitMQ's extensions that clients look for before using them.
  const capabilities = properties.capabilities ?? {};
  for (const name of [
    'publisher_confirms',
    'consumer_cancel_notify',
    'basic.nack',
    'connection.blocked',
    'exchange_exchange_bindings',
  ]) {
    assert.equal(capabilities[name], true, `capability ${name}`);
  }
  assert.equal(typeof properties.product, 'string', 'product');
  assert.equal(typeof properties.version, 'string', 'version');
});

test('a wrong password is refused with ACCESS_REFUSED', options, async () => {
  const url = new URL(h.amqpUrl());
  url.password = 'not-the-password';
  // amqplib advertises authentication_failure_close, so RabbitMQ sends connection.close
  // 403 ACCESS_REFUSED rather than just dropping the socket.
  await assert.rejects(h.withTimeout(amqp.connect(url.toString(), { timeout: 5000 }), 'the refusal'), (error) => {
    assert.match(error.message, /403 \(ACCESS-REFUSED\) with message "ACCESS_REFUSED/);
    return true;
  });
});

test('closing the connection is clean: close-ok, no error event', options, async (t) => {
  const connection = await h.connect(t);
  const channel = await h.openChannel(connection);
  await channel.assertQueue(h.uniqueName(t, 'q'), { exclusive: true, durable: false });
  const closed = h.nextEvent(connection, 'close');
  await h.withTimeout(connection.close(), 'connection.close-ok');
  const [error] = await closed;
  assert.equal(error, undefined, 'a requested close carries no error');
  assert.deepEqual(connection.errors, []);
  assert.equal(channel.closed, true);
});
