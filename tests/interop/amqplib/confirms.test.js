// Publisher confirms on a ConfirmChannel, and mandatory publishes returned as
// basic.return 312 NO_ROUTE.

'use strict';

const assert = require('node:assert/strict');
const { test } = require('node:test');
const h = require('./helpers');

const options = { timeout: h.TEST_TIMEOUT_MS };
const PUBLISH_COUNT = 1000;

// Publishes PUBLISH_COUNT messages without waiting, then waitForConfirms. RabbitMQ acks
// every publish (possibly with multiple=true); amqplib settles each callback once.
async function publishAndConfirmAll(channel, queue, props) {
  const settled = new Array(PUBLISH_COUNT).fill(0);
  const errors = [];
  for (let i = 0; i < PUBLISH_COUNT; i++) {
    channel.sendToQueue(queue, Buffer.from(`m${i}`), props, (error) => {
      settled[i] += 1;
      if (error !== null) errors.push([i, error.message]);
    });
  }
  await h.withTimeout(channel.waitForConfirms(), `${PUBLISH_COUNT} publisher confirms`);
  return { settled, errors };
}

for (const [label, durable, persistent] of [
  ['transient messages to a transient queue', false, false],
  ['persistent messages to a durable queue', true, true],
]) {
  test(`1,000 confirms in flight, ${label}: each callback settled once, no nack`, options, async (t) => {
    const connection = await h.connect(t);
    const channel = await h.openChannel(connection, { confirm: true });
    const queue = h.uniqueName(t, 'q');
    await channel.assertQueue(queue, { durable, exclusive: !durable });
    if (durable) h.deleteAfter(t, connection, { queue });

    const { settled, errors } = await publishAndConfirmAll(channel, queue, { persistent });

    assert.deepEqual(errors, [], 'nacked publishes');
    const wrong = settled.flatMap((calls, i) => (calls === 1 ? [] : [`#${i}: ${calls} calls`]));
    assert.deepEqual(wrong, [], 'publish callbacks not called exactly once');
    await h.sleep(100); // a late duplicate ack would show up as an error on the channel
    assert.equal((await channel.checkQueue(queue)).messageCount, PUBLISH_COUNT);
    assert.deepEqual(channel.errors, []);
    assert.deepEqual(connection.errors, []);
  });
}

test('mandatory publish to an unroutable key is returned with 312 NO_ROUTE, then acked', options, async (t) => {
  const connection = await h.connect(t);
  const channel = await h.openChannel(connection, { confirm: true });
  const exchange = h.uniqueName(t, 'x');
  await channel.assertExchange(exchange, 'direct', { durable: false, autoDelete: false });
  h.deleteAfter(t, connection, { exchange });
  const events = [];
  channel.on('return', (message) => events.push(['return', message]));
  const acked = new Promise((resolve) => {
    channel.publish(exchange, 'nowhere', Buffer.from('lost'), { mandatory: true, messageId: 'm-1' }, (error) => {
      events.push(['confirm', error]);
      resolve();
    });
  });
  await h.withTimeout(acked, 'the publisher confirm');
  await h.waitUntil(() => events.length >= 2, 'basic.return');

  // RabbitMQ sends basic.return before the basic.ack of an unroutable mandatory message.
  assert.deepEqual(events.map(([kind]) => kind), ['return', 'confirm']);
  const [, returned] = events[0];
  assert.equal(returned.fields.replyCode, 312);
  assert.equal(returned.fields.replyText, 'NO_ROUTE');
  assert.equal(returned.fields.exchange, exchange);
  assert.equal(returned.fields.routingKey, 'nowhere');
  assert.equal(returned.content.toString(), 'lost');
  assert.equal(returned.properties.messageId, 'm-1');
  assert.equal(events[1][1], null, 'an unroutable message is acked, not nacked');
});

test('mandatory publish on a plain channel is returned; a routable one is not', options, async (t) => {
  const connection = await h.connect(t);
  const channel = await h.openChannel(connection);
  const { queue } = await channel.assertQueue(h.uniqueName(t, 'q'), { exclusive: true, durable: false });
  const returns = [];
  channel.on('return', (message) => returns.push(message));

  channel.sendToQueue(queue, Buffer.from('routed'), { mandatory: true });
  channel.publish('', h.uniqueName(t, 'missing'), Buffer.from('unrouted'), { mandatory: true });
  await h.waitUntil(() => returns.length >= 1, 'basic.return');
  await h.sleep(200);

  assert.deepEqual(returns.map((m) => [m.fields.replyCode, m.content.toString()]), [[312, 'unrouted']]);
  assert.equal((await channel.checkQueue(queue)).messageCount, 1);
});
