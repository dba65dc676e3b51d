// Routing through direct, fanout, topic and headers exchanges, the default exchange, and
// exchange-to-exchange bindings (RabbitMQ's exchange.bind extension).

'use strict';

const assert = require('node:assert/strict');
const { test } = require('node:test');
const h = require('./helpers');

const options = { timeout: h.TEST_TIMEOUT_MS };

// A confirm channel, an exchange of `type` deleted at the end, and one exclusive queue per
// entry of `bindings` ({ label: [[routingKey, args], ...] }), bound to that exchange.
async function routingSetup(t, type, bindings) {
  const connection = await h.connect(t);
  const channel = await h.openChannel(connection, { confirm: true });
  const exchange = h.uniqueName(t, type);
  await channel.assertExchange(exchange, type, { durable: false });
  h.deleteAfter(t, connection, { exchange });
  const queues = {};
  for (const [label, keys] of Object.entries(bindings)) {
    const { queue } = await channel.assertQueue(h.uniqueName(t, label), { exclusive: true, durable: false });
    for (const [key, args] of keys) await channel.bindQueue(queue, exchange, key, args);
    queues[label] = queue;
  }
  return { connection, channel, exchange, queues };
}

// Publishes each [routingKey, body, headers] and waits for the confirms, so every message
// has been routed before the queues are read.
async function publishAll(channel, exchange, messages) {
  for (const [key, body, headers] of messages) channel.publish(exchange, key, Buffer.from(body), { headers });
  await h.withTimeout(channel.waitForConfirms(), 'publisher confirms');
}

// { label: [bodies] } as the queues hold them now.
async function contents(channel, queues) {
  const result = {};
  for (const [label, queue] of Object.entries(queues)) result[label] = await h.drain(channel, queue);
  return result;
}

test('direct exchange routes on the exact routing key', options, async (t) => {
  const { channel, exchange, queues } = await routingSetup(t, 'direct', {
    a: [['a']],
    b: [['b']],
    both: [['a'], ['b']],
  });
  await publishAll(channel, exchange, [['a', 'to-a'], ['b', 'to-b'], ['c', 'to-none'], ['A', 'case']]);

  assert.deepEqual(await contents(channel, queues), {
    a: ['to-a'],
    b: ['to-b'],
    both: ['to-a', 'to-b'],
  });
});

test('fanout exchange copies to every bound queue whatever the key', options, async (t) => {
  const { channel, exchange, queues } = await routingSetup(t, 'fanout', { one: [['ignored']], two: [['']] });
  await publishAll(channel, exchange, [['x', 'first'], ['', 'second']]);

  assert.deepEqual(await contents(channel, queues), { one: ['first', 'second'], two: ['first', 'second'] });
});

test('topic exchange: * is one word, # is zero or more words', options, async (t) => {
  const { channel, exchange, queues } = await routingSetup(t, 'topic', {
    star: [['a.*.c']],
    tail: [['a.#']],
    middle: [['x.#.y']],
    all: [['#']],
    twice: [['a.#'], ['#.c']], // two matching bindings still deliver one copy
  });
  const keys = ['a.b.c', 'a.c', 'a', 'a.b.b.c', 'x.y', 'x.1.2.y', 'b.c', 'ab.c'];
  await publishAll(
    channel,
    exchange,
    keys.map((key) => [key, key]),
  );

  assert.deepEqual(await contents(channel, queues), {
    star: ['a.b.c'],
    tail: ['a.b.c', 'a.c', 'a', 'a.b.b.c'],
    middle: ['x.y', 'x.1.2.y'],
    all: keys,
    twice: ['a.b.c', 'a.c', 'a', 'a.b.b.c', 'b.c', 'ab.c'],
  });
});

test('headers exchange: x-match all and any', options, async (t) => {
  const { channel, exchange, queues } = await routingSetup(t, 'headers', {
    all: [['', { 'x-match': 'all', format: 'pdf', type: 'report' }]],
    any: [['', { 'x-match': 'any', format: 'pdf', type: 'report' }]],
    default: [['', { format: 'zip' }]], // x-match defaults to all
  });
  await publishAll(channel, exchange, [
    ['', 'both', { format: 'pdf', type: 'report', extra: 1 }],
    ['', 'format-only', { format: 'pdf' }],
    ['', 'type-only', { type: 'report' }],
    ['', 'wrong-value', { format: 'doc', type: 'log' }],
    ['', 'zip', { format: 'zip' }],
    ['key-ignored', 'no-headers', undefined],
  ]);

  assert.deepEqual(await contents(channel, queues), {
    all: ['both'],
    any: ['both', 'format-only', 'type-only'],
    default: ['zip'],
  });
});

test('the default exchange routes to the queue named by the key', options, async (t) => {
  const connection = await h.connect(t);
  const channel = await h.openChannel(connection, { confirm: true });
  const { queue } = await channel.assertQueue(h.uniqueName(t, 'q'), { exclusive: true, durable: false });
  await publishAll(channel, '', [[queue, 'direct-to-queue']]);
  assert.deepEqual(await h.drain(channel, queue), ['direct-to-queue']);
});

test('exchange-to-exchange binding routes through both exchanges; unbind stops it', options, async (t) => {
  const { connection, channel, exchange: destination, queues } = await routingSetup(t, 'fanout', { q: [['']] });
  const source = h.uniqueName(t, 'source');
  await channel.assertExchange(source, 'topic', { durable: false });
  h.deleteAfter(t, connection, { exchange: source });
  await channel.bindExchange(destination, source, 'orders.#');

  await publishAll(channel, source, [['orders.eu', 'order'], ['invoices.eu', 'invoice']]);
  assert.deepEqual(await contents(channel, queues), { q: ['order'] });

  await channel.unbindExchange(destination, source, 'orders.#');
  await publishAll(channel, source, [['orders.us', 'after-unbind']]);
  assert.deepEqual(await contents(channel, queues), { q: [] });
  assert.deepEqual(channel.errors, []);
});
