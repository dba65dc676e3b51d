// Helpers shared by the amqplib interop tests: connections that close themselves,
// unique names, and waits that always end.
//
// The broker under test is named by WARREN_AMQP_URL, an amqp:// URI whose vhost is
// percent-encoded (amqp://guest:guest@127.0.0.1:5672/%2f).

'use strict';

const crypto = require('node:crypto');
const path = require('node:path');
const amqp = require('amqplib');

const CONNECT_TIMEOUT_MS = 5000;
const WAIT_MS = 5000;
const TEST_TIMEOUT_MS = 20000;

function amqpUrl(query = {}) {
  const url = process.env.WARREN_AMQP_URL;
  if (!url) {
    throw new Error(
      'WARREN_AMQP_URL is not set; point it at the broker under test, ' +
        "e.g. WARREN_AMQP_URL='amqp://guest:guest@127.0.0.1:5672/%2f'",
    );
  }
  const parsed = new URL(url);
  for (const [key, value] of Object.entries(query)) parsed.searchParams.set(key, String(value));
  return parsed.toString();
}

// Checked when the file loads, so an unset variable fails every file at once and says why.
amqpUrl();

// amqplib's generated method table. The package has no transaction API, so tx.select,
// tx.commit and tx.rollback go through the channel's generic rpc with these ids. The
// package's "exports" map hides lib/, hence the path from the resolved entry point.
const defs = require(path.join(path.dirname(require.resolve('amqplib')), 'lib', 'defs.js'));

// Rejects with a message naming `what` if `promise` has not settled within `ms`.
function withTimeout(promise, what, ms = WAIT_MS) {
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Polls `predicate` every 10 ms; rejects naming `what` if it is still false after `ms`.
async function waitUntil(predicate, what, ms = WAIT_MS) {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(10);
  }
}

// Resolves with the arguments of the next `event` on `emitter`, within `ms`.
function nextEvent(emitter, event, ms = WAIT_MS) {
  let listener;
  const seen = new Promise((resolve) => {
    listener = (...args) => resolve(args);
    emitter.once(event, listener);
  });
  return withTimeout(seen, `'${event}' event`, ms).finally(() => emitter.removeListener(event, listener));
}

// A name unique to this run of this test, readable in broker logs.
function uniqueName(t, suffix) {
  const test = t.name.replace(/[^A-Za-z0-9]+/g, '-').slice(0, 60);
  return `amqplib.${test}.${crypto.randomBytes(4).toString('hex')}.${suffix}`;
}

// Runs `fn` when the test ends, after everything deferred later (last in, first out, so a
// queue is deleted before the connection that deletes it closes). Errors are ignored:
// cleanup must not hide the test's own result.
const deferred = new WeakMap();
function defer(t, fn) {
  if (!deferred.has(t)) {
    deferred.set(t, []);
    t.after(async () => {
      for (const cleanup of deferred.get(t).reverse()) {
        await withTimeout(Promise.resolve().then(cleanup), 'cleanup').catch(() => {});
      }
    });
  }
  deferred.get(t).push(fn);
}

// Opens a connection that is closed when the test ends. Errors the connection emits are
// kept in `connection.errors` (an unhandled 'error' event would crash the test process).
async function connect(t, query = {}) {
  const connection = await withTimeout(
    amqp.connect(amqpUrl(query), { timeout: CONNECT_TIMEOUT_MS }),
    'connection to open',
    CONNECT_TIMEOUT_MS + 1000,
  );
  connection.errors = [];
  connection.closed = false;
  connection.on('error', (error) => connection.errors.push(error));
  connection.on('close', () => {
    connection.closed = true;
  });
  defer(t, () => (connection.closed ? undefined : connection.close()));
  return connection;
}

// Opens a channel (a ConfirmChannel with { confirm: true }). Channel errors, such as a
// channel.close from the broker, are kept in `channel.errors`.
async function openChannel(connection, { confirm = false } = {}) {
  const open = confirm ? connection.createConfirmChannel() : connection.createChannel();
  const channel = await withTimeout(open, 'channel to open');
  channel.errors = [];
  channel.closed = false;
  channel.on('error', (error) => channel.errors.push(error));
  channel.on('close', () => {
    channel.closed = true;
  });
  return channel;
}

// Deletes a queue or exchange when the test ends, from a fresh channel on `connection`
// (the test's own channel may have been closed by the broker).
function deleteAfter(t, connection, { queue, exchange }) {
  defer(t, async () => {
    const channel = await openChannel(connection);
    if (queue !== undefined) await channel.deleteQueue(queue);
    if (exchange !== undefined) await channel.deleteExchange(exchange);
    await channel.close();
  });
}

// Consumes until `count` messages have arrived and resolves with them (the consumer stays
// registered; `onMessage` may ack). Rejects on timeout or on a broker cancel.
async function consumeN(channel, queue, count, { noAck = false, onMessage = () => {}, ms = WAIT_MS } = {}) {
  const messages = [];
  let done;
  let fail;
  const finished = new Promise((resolve, reject) => {
    done = resolve;
    fail = reject;
  });
  const { consumerTag } = await channel.consume(
    queue,
    (message) => {
      if (message === null) return fail(new Error(`consumer on ${queue} cancelled by the broker`));
      messages.push(message);
      onMessage(message);
      if (messages.length === count) done();
    },
    { noAck },
  );
  await withTimeout(finished, `${count} deliveries from ${queue}`, ms).catch((error) => {
    error.message += ` (got ${messages.length})`;
    throw error;
  });
  return { consumerTag, messages };
}

// Gets (no-ack) every message in `queue` and returns the bodies as strings.
async function drain(channel, queue, limit = 100) {
  const bodies = [];
  for (let i = 0; i < limit; i++) {
    const message = await withTimeout(channel.get(queue, { noAck: true }), `basic.get on ${queue}`);
    if (message === false) return bodies;
    bodies.push(message.content.toString());
  }
  throw new Error(`queue ${queue} holds more than ${limit} messages`);
}

// Expects `operation` to reject because the broker closed the channel with `code`,
// and the channel to end up closed. Returns the error.
async function expectChannelClose(channel, operation, code, textPrefix) {
  let caught = null;
  try {
    await withTimeout(operation(), 'the broker to answer');
  } catch (error) {
    caught = error;
  }
  if (caught === null) throw new Error(`expected the broker to close the channel with ${code}`);
  if (caught.code !== code) throw caught;
  if (!caught.message.includes(`with message "${textPrefix}`)) {
    throw new Error(`expected reply text starting ${textPrefix}, got: ${caught.message}`);
  }
  if (!channel.closed) await nextEvent(channel, 'close');
  return caught;
}

module.exports = {
  TEST_TIMEOUT_MS,
  WAIT_MS,
  amqpUrl,
  connect,
  consumeN,
  defer,
  defs,
  deleteAfter,
  drain,
  expectChannelClose,
  nextEvent,
  openChannel,
  sleep,
  uniqueName,
  waitUntil,
  withTimeout,
};
