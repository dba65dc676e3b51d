// Channel errors: the broker closes the channel with the spec's reply code and text,
// amqplib rejects the operation with an error whose .code is that reply code, and the
// connection stays open.

'use strict';

const assert = require('node:assert/strict');
const { test } = require('node:test');
const h = require('./helpers');

const options = { timeout: h.TEST_TIMEOUT_MS };

test('passive declare of a missing queue closes the channel with 404 NOT_FOUND', options, async (t) => {
  const connection = await h.connect(t);
  const channel = await h.openChannel(connection);

  const error = await h.expectChannelClose(channel, () => channel.checkQueue(h.uniqueName(t, 'missing')), 404, 'NOT_FOUND');

  assert.equal(error.classId, 50, 'the close names queue.declare (class 50)');
  assert.equal(error.methodId, 10);
  assert.equal(connection.closed, false);
  assert.deepEqual(connection.errors, []);
  const replacement = await h.openChannel(connection);
  await replacement.assertQueue(h.uniqueName(t, 'q'), { exclusive: true, durable: false });
});

test('passive declare of a missing exchange closes the channel with 404 NOT_FOUND', options, async (t) => {
  const connection = await h.connect(t);
  const channel = await h.openChannel(connection);
  await h.expectChannelClose(channel, () => channel.checkExchange(h.uniqueName(t, 'missing')), 404, 'NOT_FOUND');
  assert.equal(connection.closed, false);
});

test('publishing to a missing exchange closes the channel with 404 NOT_FOUND', options, async (t) => {
  const connection = await h.connect(t);
  const channel = await h.openChannel(connection);
  channel.publish(h.uniqueName(t, 'missing'), 'key', Buffer.from('lost'));
  // basic.publish has no reply: the close arrives as an 'error' event on the channel.
  await h.waitUntil(() => channel.closed, 'the broker to close the channel');
  assert.equal(channel.errors.length, 1, 'one channel error');
  assert.equal(channel.errors[0].code, 404);
  assert.match(channel.errors[0].message, /with message "NOT_FOUND/);
  assert.equal(connection.closed, false);
});

test('redeclaring a queue with a different durable flag closes the channel with 406', options, async (t) => {
  const connection = await h.connect(t);
  const channel = await h.openChannel(connection);
  const queue = h.uniqueName(t, 'q');
  await channel.assertQueue(queue, { durable: true });
  h.deleteAfter(t, connection, { queue });

  const error = await h.expectChannelClose(
    channel,
    () => channel.assertQueue(queue, { durable: false }),
    406,
    'PRECONDITION_FAILED',
  );
  assert.match(error.message, /durable/, 'the reply text names the inequivalent property');
  // The original queue is unchanged.
  const other = await h.openChannel(connection);
  assert.equal((await other.checkQueue(queue)).queue, queue);
});

test('acking an unknown delivery tag closes the channel with 406 PRECONDITION_FAILED', options, async (t) => {
  const connection = await h.connect(t);
  const channel = await h.openChannel(connection);
  channel.ack({ fields: { deliveryTag: 99 } });
  await h.waitUntil(() => channel.closed, 'the broker to close the channel');
  assert.equal(channel.errors[0]?.code, 406);
  assert.match(channel.errors[0].message, /with message "PRECONDITION_FAILED/);
});

test('declaring a queue named amq.* closes the channel with 403 ACCESS_REFUSED', options, async (t) => {
  const connection = await h.connect(t);
  const channel = await h.openChannel(connection);
  await h.expectChannelClose(channel, () => channel.assertQueue('amq.amqplib-interop', { exclusive: true }), 403, 'ACCESS_REFUSED');
});

// Every way of touching a queue that another connection holds exclusively.
const ACCESSES = {
  declare: (channel, queue) => channel.assertQueue(queue, { exclusive: true, durable: false }),
  'passive declare': (channel, queue) => channel.checkQueue(queue),
  consume: (channel, queue) => channel.consume(queue, () => {}),
  get: (channel, queue) => channel.get(queue),
  purge: (channel, queue) => channel.purgeQueue(queue),
  delete: (channel, queue) => channel.deleteQueue(queue),
};

for (const [label, access] of Object.entries(ACCESSES)) {
  test(`${label} of another connection's exclusive queue closes the channel with 405`, options, async (t) => {
    const owner = await h.openChannel(await h.connect(t));
    const { queue } = await owner.assertQueue(h.uniqueName(t, 'q'), { exclusive: true, durable: false });
    const intruderConnection = await h.connect(t);
    const intruder = await h.openChannel(intruderConnection);

    await h.expectChannelClose(intruder, () => access(intruder, queue), 405, 'RESOURCE_LOCKED');

    assert.equal(intruderConnection.closed, false);
    assert.equal((await owner.checkQueue(queue)).queue, queue, 'the owner still has its queue');
  });
}
