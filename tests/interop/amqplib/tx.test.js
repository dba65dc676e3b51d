// AMQP transactions. amqplib has no tx API of its own, so these send tx.select,
// tx.commit and tx.rollback through the channel's generic rpc with amqplib's own
// method table (helpers.defs); everything else is the public API.

'use strict';

const assert = require('node:assert/strict');
const { test } = require('node:test');
const h = require('./helpers');

const { defs } = h;
const options = { timeout: h.TEST_TIMEOUT_MS };

const txSelect = (channel) => h.withTimeout(channel.rpc(defs.TxSelect, {}, defs.TxSelectOk), 'tx.select-ok');
const txCommit = (channel) => h.withTimeout(channel.rpc(defs.TxCommit, {}, defs.TxCommitOk), 'tx.commit-ok');
const txRollback = (channel) => h.withTimeout(channel.rpc(defs.TxRollback, {}, defs.TxRollbackOk), 'tx.rollback-ok');

// queue.declare(passive) on the same channel: it is answered only after the broker has
// handled every earlier frame of the channel, so the count reflects the publishes above.
async function countOn(channel, queue) {
  return (await h.withTimeout(channel.checkQueue(queue), 'queue.declare-ok')).messageCount;
}

test('tx.rollback discards publishes; tx.commit delivers them', options, async (t) => {
  const connection = await h.connect(t);
  const channel = await h.openChannel(connection);
  const { queue } = await channel.assertQueue(h.uniqueName(t, 'q'), { exclusive: true, durable: false });
  await txSelect(channel);

  channel.sendToQueue(queue, Buffer.from('rolled-back'));
  assert.equal(await countOn(channel, queue), 0, 'an uncommitted publish is not enqueued');
  await txRollback(channel);
  assert.equal(await countOn(channel, queue), 0, 'rollback leaves the queue empty');
  assert.equal(await channel.get(queue), false);

  channel.sendToQueue(queue, Buffer.from('committed-1'));
  channel.sendToQueue(queue, Buffer.from('committed-2'));
  assert.equal(await countOn(channel, queue), 0, 'still nothing before commit');
  await txCommit(channel);
  assert.deepEqual(await h.drain(channel, queue), ['committed-1', 'committed-2']);
  assert.deepEqual(channel.errors, []);
});

test('tx.rollback discards acks (the message stays unacked); tx.commit applies them', options, async (t) => {
  const connection = await h.connect(t);
  const setup = await h.openChannel(connection, { confirm: true });
  const { queue } = await setup.assertQueue(h.uniqueName(t, 'q'), { exclusive: true, durable: false });
  setup.sendToQueue(queue, Buffer.from('payload'));
  await h.withTimeout(setup.waitForConfirms(), 'publisher confirm');

  const channel = await h.openChannel(connection);
  await txSelect(channel);
  const message = await h.withTimeout(channel.get(queue), 'basic.get');
  channel.ack(message);
  await txRollback(channel);
  await channel.close(); // the ack was rolled back, so closing requeues the message
  const requeued = await h.withTimeout(setup.get(queue), 'basic.get after rollback');
  assert.notEqual(requeued, false, 'a rolled-back ack must leave the message in the queue');
  assert.deepEqual([requeued.content.toString(), requeued.fields.redelivered], ['payload', true]);
  setup.nack(requeued, false, true);

  const second = await h.openChannel(connection);
  await txSelect(second);
  const again = await h.withTimeout(second.get(queue), 'basic.get');
  second.ack(again);
  await txCommit(second);
  await second.close();
  assert.equal(await countOn(setup, queue), 0, 'a committed ack removes the message');
});

test('tx.commit without tx.select closes the channel with 406 PRECONDITION_FAILED', options, async (t) => {
  const connection = await h.connect(t);
  const channel = await h.openChannel(connection);
  await h.expectChannelClose(channel, () => txCommit(channel), 406, 'PRECONDITION_FAILED');
  assert.equal(connection.closed, false);
});
