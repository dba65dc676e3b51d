// Publish and consume, prefetch, basic properties and field tables, basic.get,
// acks/nacks/rejects, broker-sent basic.cancel and multi-frame bodies.

'use strict';

const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const { test } = require('node:test');
const h = require('./helpers');

const options = { timeout: h.TEST_TIMEOUT_MS };

// Headers using the field types amqplib picks for plain JS values, plus its typed escapes.
const HEADERS = {
  'x-byte': 42,
  'x-negative': -7,
  'x-short': 1000,
  'x-int': 100000,
  'x-long': 2 ** 40,
  'x-double': 3.5,
  'x-str': 'ünïcode',
  'x-bytes': Buffer.from([0, 0xff, 0x72, 0x61, 0x77]),
  'x-bool': true,
  'x-void': null,
  'x-array': [1, 'two', [3]],
  'x-table': { nested: { deep: 1 } },
  'x-timestamp': { '!': 'timestamp', value: 1700000000 },
  'x-decimal': { '!': 'decimal', value: { places: 2, digits: 314 } },
};

function fullProperties(i) {
  return {
    contentType: 'application/octet-stream',
    contentEncoding: 'identity',
    headers: HEADERS,
    deliveryMode: 2,
    priority: 3,
    correlationId: `corr-${i}`,
    replyTo: 'reply-queue',
    expiration: '600000',
    messageId: `msg-${i}`,
    timestamp: 1700000000,
    type: 'interop.test',
    appId: 'warren-interop',
  };
}

async function exclusiveQueue(t, channel, suffix = 'q') {
  const { queue } = await channel.assertQueue(h.uniqueName(t, suffix), { exclusive: true, durable: false });
  return queue;
}

// Publishes on a confirm channel and waits for the broker's acks, so the messages are in
// their queues before the test goes on.
async function publishConfirmed(channel, exchange, routingKey, bodies, props = {}) {
  for (const body of bodies) channel.publish(exchange, routingKey, Buffer.from(body), props);
  await h.withTimeout(channel.waitForConfirms(), 'publisher confirms');
}

test('prefetch bounds unacked deliveries; order, body and properties survive', options, async (t) => {
  const connection = await h.connect(t);
  const channel = await h.openChannel(connection);
  const queue = await exclusiveQueue(t, channel);
  const count = 20;
  for (let i = 0; i < count; i++) channel.sendToQueue(queue, Buffer.from(`message-${i}`), fullProperties(i));
  await channel.prefetch(5);

  const received = [];
  let ackOnArrival = false;
  await channel.consume(queue, (message) => {
    received.push(message);
    if (ackOnArrival) channel.ack(message);
  });

  // RabbitMQ stops at prefetch_count unacked deliveries and sends one more per ack.
  await h.waitUntil(() => received.length >= 5, 'the first 5 deliveries');
  await h.sleep(300);
  assert.equal(received.length, 5, 'deliveries beyond prefetch 5 without an ack');
  channel.ack(received[0]);
  await h.waitUntil(() => received.length >= 6, 'a 6th delivery after one ack');
  await h.sleep(200);
  assert.equal(received.length, 6, 'one ack must release exactly one delivery');

  ackOnArrival = true;
  channel.ack(received[5], true); // multiple: acks tags 2..6
  await h.waitUntil(() => received.length === count, `${count} deliveries`);

  assert.deepEqual(received.map((m) => m.content.toString()), Array.from({ length: count }, (_, i) => `message-${i}`));
  received.forEach((message, i) => {
    assert.equal(message.fields.deliveryTag, i + 1);
    assert.equal(message.fields.redelivered, false);
    assert.equal(message.fields.exchange, '');
    assert.equal(message.fields.routingKey, queue);
    const expected = fullProperties(i);
    for (const [name, value] of Object.entries(expected)) {
      assert.deepEqual(message.properties[name], value, `property ${name} of message ${i}`);
    }
    assert.equal(message.properties.userId, undefined);
    assert.equal(message.properties.clusterId, undefined);
  });
  const { messageCount } = await channel.checkQueue(queue);
  assert.equal(messageCount, 0, 'every message was acked');
  assert.deepEqual(channel.errors, []);
});

test('every RabbitMQ field-table type round-trips through the broker', options, async (t) => {
  const connection = await h.connect(t);
  const channel = await h.openChannel(connection, { confirm: true });
  const queue = await exclusiveQueue(t, channel);
  const typed = (type, value) => ({ '!': type, value });
  // One header per RabbitMQ field type tag (b B s u I i l f d D T S x t V A F).
  const sent = {
    b: typed('int8', -5),
    B: typed('uint8', 200),
    s: typed('int16', -30000),
    u: typed('uint16', 60000),
    I: typed('int32', -2000000000),
    i: typed('uint32', 4000000000),
    l: typed('int64', -(2 ** 52)),
    f: typed('float', 1.5),
    d: typed('double', 2.25),
    D: typed('decimal', { places: 3, digits: 12345 }),
    T: typed('timestamp', 1700000001),
    S: '',
    x: Buffer.alloc(0),
    t: false,
    V: null,
    A: [],
    F: {},
  };
  await publishConfirmed(channel, '', queue, ['typed'], { headers: sent });

  const message = await h.withTimeout(channel.get(queue, { noAck: true }), 'basic.get');
  assert.notEqual(message, false, 'the message was confirmed but the queue is empty');
  assert.deepEqual(message.properties.headers, {
    b: -5,
    B: 200,
    s: -30000,
    u: 60000,
    I: -2000000000,
    i: 4000000000,
    l: -(2 ** 52),
    f: 1.5,
    d: 2.25,
    D: typed('decimal', { places: 3, digits: 12345 }),
    T: typed('timestamp', 1700000001),
    S: '',
    x: Buffer.alloc(0),
    t: false,
    V: null,
    A: [],
    F: {},
  });
});

test('an empty body and absent properties arrive as sent', options, async (t) => {
  const connection = await h.connect(t);
  const channel = await h.openChannel(connection, { confirm: true });
  const queue = await exclusiveQueue(t, channel);
  channel.sendToQueue(queue, Buffer.alloc(0));
  await h.withTimeout(channel.waitForConfirms(), 'publisher confirm');

  const message = await h.withTimeout(channel.get(queue, { noAck: true }), 'basic.get');
  assert.notEqual(message, false);
  assert.equal(message.content.length, 0);
  assert.equal(message.fields.messageCount, 0);
  for (const name of ['contentType', 'deliveryMode', 'priority', 'correlationId', 'messageId', 'expiration']) {
    assert.equal(message.properties[name], undefined, name);
  }
});

test('basic.get returns messages with the remaining count, then get-empty as false', options, async (t) => {
  const connection = await h.connect(t);
  const channel = await h.openChannel(connection, { confirm: true });
  const queue = await exclusiveQueue(t, channel);
  assert.equal(await h.withTimeout(channel.get(queue), 'basic.get on an empty queue'), false);
  await publishConfirmed(channel, '', queue, ['a', 'b', 'c']);

  const first = await h.withTimeout(channel.get(queue, { noAck: false }), 'basic.get');
  assert.equal(first.content.toString(), 'a');
  assert.equal(first.fields.messageCount, 2);
  assert.equal(first.fields.redelivered, false);
  assert.equal(first.fields.routingKey, queue);
  channel.ack(first);
  const second = await h.withTimeout(channel.get(queue, { noAck: true }), 'basic.get');
  assert.deepEqual([second.content.toString(), second.fields.messageCount], ['b', 1]);
  assert.equal(second.fields.deliveryTag, first.fields.deliveryTag + 1);
  const third = await h.withTimeout(channel.get(queue, { noAck: true }), 'basic.get');
  assert.deepEqual([third.content.toString(), third.fields.messageCount], ['c', 0]);

  assert.equal(await h.withTimeout(channel.get(queue), 'basic.get-empty'), false);
  assert.equal((await channel.checkQueue(queue)).messageCount, 0);
  assert.deepEqual(channel.errors, []);
});

test('nack with requeue redelivers with redelivered set; reject without requeue drops', options, async (t) => {
  const connection = await h.connect(t);
  const channel = await h.openChannel(connection);
  const queue = await exclusiveQueue(t, channel);
  channel.sendToQueue(queue, Buffer.from('bounce'));
  await channel.prefetch(1);
  const received = [];
  const { consumerTag } = await channel.consume(queue, (message) => {
    received.push(message);
    if (received.length === 1) channel.nack(message, false, true);
    else channel.reject(message, false);
  });

  await h.waitUntil(() => received.length >= 2, 'the requeued message to come back');
  await h.sleep(300); // a rejected (not requeued) message must not come back
  await channel.cancel(consumerTag);

  assert.equal(received.length, 2);
  assert.deepEqual(received.map((m) => m.content.toString()), ['bounce', 'bounce']);
  assert.deepEqual(received.map((m) => m.fields.redelivered), [false, true]);
  assert.equal((await channel.checkQueue(queue)).messageCount, 0, 'reject(requeue=false) drops');
  assert.equal(await channel.get(queue), false);
});

test('nack of several with requeue puts them back in their original order', options, async (t) => {
  const connection = await h.connect(t);
  const channel = await h.openChannel(connection, { confirm: true });
  const queue = await exclusiveQueue(t, channel);
  const bodies = ['1', '2', '3', '4', '5'];
  await publishConfirmed(channel, '', queue, bodies);
  let last = null;
  for (const body of bodies) {
    last = await h.withTimeout(channel.get(queue), 'basic.get');
    assert.equal(last.content.toString(), body);
  }
  channel.nack(last, true, true); // multiple: every unacked tag up to the last

  const again = [];
  for (const body of bodies) {
    const message = await h.withTimeout(channel.get(queue, { noAck: true }), 'basic.get after requeue');
    assert.notEqual(message, false, `message ${body} was not requeued`);
    again.push([message.content.toString(), message.fields.redelivered]);
  }
  assert.deepEqual(again, bodies.map((body) => [body, true]));
  assert.equal(await channel.get(queue), false);
  // reject with requeue also redelivers
  await publishConfirmed(channel, '', queue, ['r']);
  const once = await channel.get(queue);
  channel.reject(once, true);
  const twice = await channel.get(queue, { noAck: true });
  assert.deepEqual([twice.content.toString(), twice.fields.redelivered], ['r', true]);
});

test('deleting a queue sends basic.cancel: the consumer callback gets null', options, async (t) => {
  const connection = await h.connect(t);
  const channel = await h.openChannel(connection);
  const queue = h.uniqueName(t, 'q');
  await channel.assertQueue(queue, { durable: true });
  h.deleteAfter(t, connection, { queue });
  const calls = [];
  let onCancel;
  const cancelled = new Promise((resolve) => {
    onCancel = resolve;
  });
  const { consumerTag } = await channel.consume(queue, (message) => {
    calls.push(message);
    if (message === null) onCancel();
  });

  // RabbitMQ's consumer_cancel_notify: a queue deleted under a consumer sends basic.cancel.
  const other = await h.openChannel(await h.connect(t));
  await other.deleteQueue(queue);
  await h.withTimeout(cancelled, 'basic.cancel from the broker');

  assert.deepEqual(calls, [null]);
  assert.equal(channel.consumers.has(consumerTag), false);
  // The channel is still usable after a broker-side cancel.
  const probe = await exclusiveQueue(t, channel, 'probe');
  assert.equal((await channel.checkQueue(probe)).consumerCount, 0);
  assert.deepEqual(channel.errors, []);
});

for (const frameMax of [4096, 131072]) {
  test(`a 1 MiB body is byte-exact at frame_max ${frameMax}`, options, async (t) => {
    const connection = await h.connect(t, { frameMax });
    assert.equal(connection.connection.frameMax, frameMax, 'negotiated frame_max');
    const channel = await h.openChannel(connection, { confirm: true });
    const queue = await exclusiveQueue(t, channel);
    const body = crypto.randomBytes(1024 * 1024);
    channel.sendToQueue(queue, body, { messageId: 'big' });
    await h.withTimeout(channel.waitForConfirms(), 'publisher confirm');

    const { messages } = await h.consumeN(channel, queue, 1, { noAck: true });
    const content = messages[0].content;
    assert.equal(content.length, body.length);
    assert.ok(content.equals(body), 'body differs from what was published');
    assert.equal(messages[0].properties.messageId, 'big');
  });
}
