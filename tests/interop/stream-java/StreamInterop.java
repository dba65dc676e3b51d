// The Java stream client (com.rabbitmq:stream-client) against a broker's stream port, used
// the way applications use it: an Environment, producers, consumers, and, where the
// Environment has no call for it (metadata, MetadataUpdate), the client's own Client class.
// (ManagementApi.java closes connections for the reconnect case.)
// Usage: java StreamInterop STREAM_URI [HTTP_URL]. Prints `PASS NAME`, `FAIL NAME: why` or
// `SKIP NAME: why` per case and `stream-java: N passed, M failed, K skipped` last; exits 1
// on a failure. Every stream it creates is named stream-java-<pid>-<case> and deleted after.
import com.rabbitmq.stream.ByteCapacity;
import com.rabbitmq.stream.Consumer;
import com.rabbitmq.stream.ConsumerBuilder;
import com.rabbitmq.stream.Environment;
import com.rabbitmq.stream.Message;
import com.rabbitmq.stream.NoOffsetException;
import com.rabbitmq.stream.OffsetSpecification;
import com.rabbitmq.stream.Producer;
import com.rabbitmq.stream.Resource;
import com.rabbitmq.stream.StreamDoesNotExistException;
import com.rabbitmq.stream.StreamException;
import com.rabbitmq.stream.StreamStats;
import com.rabbitmq.stream.compression.Compression;
import com.rabbitmq.stream.impl.Client;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;

public class StreamInterop {
  /** Bound of every wait for confirms, deliveries or a broker-side effect. */
  static final Duration WAIT = Duration.ofSeconds(20);
  /** RabbitMQ stream protocol response codes (PROTOCOL.adoc, "Response codes"). */
  static final short STREAM_DOES_NOT_EXIST = 2;
  static final short STREAM_NOT_AVAILABLE = 6;

  static String uri;
  static String httpUrl;
  static String prefix;
  static Environment env;
  static int passed;
  static int failed;
  static int skipped;

  /** A case throws to fail, returns normally to pass, throws Skip to be skipped. */
  interface Case {
    void run(String stream) throws Exception;
  }

  static final class Skip extends Exception {
    private static final long serialVersionUID = 1L;

    Skip(String reason) {
      super(reason);
    }
  }

  /** One delivered message: its offset, body and chunk timestamp. */
  record Delivery(long offset, String body, long timestamp) {}

  public static void main(String[] args) throws Exception {
    if (args.length < 1) {
      System.err.println("usage: java StreamInterop STREAM_URI [HTTP_URL]");
      System.exit(2);
    }
    uri = args[0];
    httpUrl = args.length > 1 && !args[1].isEmpty() ? args[1] : null;
    prefix = "stream-java-" + ProcessHandle.current().pid() + "-";
    try {
      env = Environment.builder().uri(uri).id(prefix + "env").rpcTimeout(WAIT).build();
    } catch (RuntimeException e) {
      System.out.printf("FAIL connect: %s%n", e);
      System.out.println("stream-java: 0 passed, 1 failed, 0 skipped");
      System.exit(1);
    }
    try {
      runAll();
    } finally {
      env.close();
    }
    System.out.printf("stream-java: %d passed, %d failed, %d skipped%n", passed, failed, skipped);
    System.exit(failed == 0 ? 0 : 1);
  }

  static void runAll() {
    run("connect", StreamInterop::connect);
    run("create-delete", StreamInterop::createDelete);
    run("publish-confirms", StreamInterop::publishConfirms);
    run("batch-publish", StreamInterop::batchPublish);
    run("sub-entry-publish", StreamInterop::subEntryPublish);
    run("deduplication", StreamInterop::deduplication);
    run("offset-first", s -> offsetSpec(s, "first"));
    run("offset-last", s -> offsetSpec(s, "last"));
    run("offset-next", s -> offsetSpec(s, "next"));
    run("offset-absolute", s -> offsetSpec(s, "offset"));
    run("offset-timestamp", s -> offsetSpec(s, "timestamp"));
    run("stored-offset", StreamInterop::storedOffset);
    run("credit", StreamInterop::credit);
    run("retention-size", StreamInterop::retentionSize);
    run("retention-age", StreamInterop::retentionAge);
    run("metadata", StreamInterop::metadata);
    run("stream-stats", StreamInterop::streamStats);
    run("reconnect", StreamInterop::reconnect);
    run("stream-deleted", StreamInterop::streamDeleted);
  }

  static void run(String name, Case body) {
    String stream = prefix + name;
    long started = System.nanoTime();
    try {
      body.run(stream);
      passed++;
      System.out.printf("PASS %s (%d ms)%n", name, (System.nanoTime() - started) / 1_000_000);
    } catch (Skip e) {
      skipped++;
      System.out.printf("SKIP %s: %s%n", name, e.getMessage());
    } catch (Throwable e) {
      failed++;
      System.out.printf("FAIL %s: %s%n", name, e);
    } finally {
      try {
        if (env.streamExists(stream)) {
          env.deleteStream(stream);
        }
      } catch (Exception e) {
        System.out.printf("  (cleanup of %s: %s)%n", stream, e);
      }
    }
  }

  // ---- cases ----

  static void connect(String stream) {
    // build() in main connected the locator; a create is the first round trip of this case.
    env.streamCreator().stream(stream).create();
    check(env.streamExists(stream), "streamExists(" + stream + ") after create");
  }

  static void createDelete(String stream) {
    env.streamCreator().stream(stream).maxLengthBytes(ByteCapacity.MB(10))
        .maxSegmentSizeBytes(ByteCapacity.MB(1)).maxAge(Duration.ofHours(1)).create();
    check(env.streamExists(stream), "stream missing after create");
    // Creating it again with the same arguments is accepted (the client ignores
    // STREAM_ALREADY_EXISTS), and it still holds what was published before.
    publish(stream, null, bodies("m", 0, 3));
    env.streamCreator().stream(stream).maxLengthBytes(ByteCapacity.MB(10))
        .maxSegmentSizeBytes(ByteCapacity.MB(1)).maxAge(Duration.ofHours(1)).create();
    expectRange(consume(stream, OffsetSpecification.first(), 3), 0, "m", 3);
    env.deleteStream(stream);
    check(!env.streamExists(stream), "stream still exists after delete");
    try {
      env.deleteStream(stream);
      throw new AssertionError("deleting a deleted stream did not fail");
    } catch (StreamException expected) {
      check(expected.getCode() == STREAM_DOES_NOT_EXIST,
          "deleting a deleted stream: code " + expected.getCode() + ", expected 2");
    }
  }

  static void publishConfirms(String stream) {
    env.streamCreator().stream(stream).create();
    int confirmed = publish(stream, null, bodies("msg-", 0, 1000));
    check(confirmed == 1000, "confirmed " + confirmed + " of 1000");
    expectRange(consume(stream, OffsetSpecification.first(), 1000), 0, "msg-", 1000);
  }

  static void batchPublish(String stream) throws Exception {
    env.streamCreator().stream(stream).create();
    // batchSize 100: the producer accumulates up to 100 messages per Publish frame.
    try (Producer producer = env.producerBuilder().stream(stream).batchSize(100)
        .batchPublishingDelay(Duration.ofMillis(20)).build()) {
      int confirmed = sendAll(producer, bodies("batch-", 0, 2000), 0);
      check(confirmed == 2000, "confirmed " + confirmed + " of 2000");
    }
    // And a batch written by the client's Client class: 10 messages in one Publish frame,
    // each confirmed with the publishing id the client gave it.
    List<Long> confirmedIds = Collections.synchronizedList(new ArrayList<>());
    AtomicReference<String> error = new AtomicReference<>();
    Client client = client(new Client.ClientParameters()
        .publishConfirmListener((publisher, id) -> confirmedIds.add(id))
        .publishErrorListener((publisher, id, code) -> error.set("id " + id + " code " + code)));
    try {
      Client.Response declared = client.declarePublisher((byte) 1, null, stream);
      check(declared.isOk(), "declarePublisher: code " + declared.getResponseCode());
      List<Message> batch = new ArrayList<>();
      for (String body : bodies("batch-", 2000, 10)) {
        batch.add(client.messageBuilder().addData(body.getBytes(StandardCharsets.UTF_8)).build());
      }
      List<Long> sentIds = client.publish((byte) 1, batch);
      waitFor(() -> confirmedIds.size() >= 10 || error.get() != null, "10 confirms");
      check(error.get() == null, "publish error: " + error.get());
      List<Long> sorted = new ArrayList<>(confirmedIds);
      Collections.sort(sorted);
      check(sorted.equals(sentIds), "confirmed ids " + sorted + ", sent " + sentIds);
    } finally {
      client.close();
    }
    expectRange(consume(stream, OffsetSpecification.first(), 2010), 0, "batch-", 2010);
  }

  static void subEntryPublish(String stream) throws Exception {
    env.streamCreator().stream(stream).create();
    // 105 = ten full sub-entries of 10 and a last one of 5, uncompressed.
    try (Producer producer = env.producerBuilder().stream(stream).subEntrySize(10)
        .compression(Compression.NONE).build()) {
      int confirmed = sendAll(producer, bodies("sub-", 0, 105), 0);
      check(confirmed == 105, "confirmed " + confirmed + " of 105");
    }
    expectRange(consume(stream, OffsetSpecification.first(), 105), 0, "sub-", 105);
  }

  static void deduplication(String stream) throws Exception {
    env.streamCreator().stream(stream).create();
    String reference = prefix + "producer";
    try (Producer producer = env.producerBuilder().stream(stream).name(reference).build()) {
      // QueryPublisherSequence answers 0 for a reference the stream has never seen.
      check(producer.getLastPublishingId() == 0, "new reference: last id "
          + producer.getLastPublishingId() + ", expected 0 (none)");
      int confirmed = sendAll(producer, bodies("first-", 0, 10), 0);
      check(confirmed == 10, "first producer: confirmed " + confirmed + " of 10");
    }
    // A second producer with the same name, on a new connection, learns the last id and
    // re-sends ids 5..9 (duplicates: confirmed, not stored) and 10..14 (new).
    try (Producer producer = env.producerBuilder().stream(stream).name(reference).build()) {
      check(producer.getLastPublishingId() == 9,
          "last publishing id " + producer.getLastPublishingId() + ", expected 9");
      int confirmed = sendAll(producer, bodies("second-", 5, 10), 5);
      check(confirmed == 10, "second producer: confirmed " + confirmed + " of 10 (5 duplicates)");
    }
    List<Delivery> got = consumeFor(stream, OffsetSpecification.first(), 16,
        Duration.ofSeconds(1));
    check(got.size() == 15, "stream holds " + got.size() + " messages, expected 15: " + got);
    expectRange(got.subList(0, 10), 0, "first-", 10);
    for (int i = 10; i < 15; i++) {
      check(got.get(i).offset() == i && got.get(i).body().equals("second-" + i),
          "offset " + i + ": " + got.get(i));
    }
  }

  static void offsetSpec(String stream, String spec) throws Exception {
    env.streamCreator().stream(stream).create();
    // Two rounds of 50, each confirmed before the next: at least two chunks, and every
    // chunk of round two is timestamped after `between`.
    publish(stream, null, bodies("m", 0, 50));
    Thread.sleep(1100);
    long between = System.currentTimeMillis();
    Thread.sleep(200);
    publish(stream, null, bodies("m", 50, 50));
    switch (spec) {
      case "first" -> expectRange(consume(stream, OffsetSpecification.first(), 100), 0, "m", 100);
      case "last" -> offsetLast(stream);
      case "next" -> offsetNext(stream);
      case "offset" ->
          expectRange(consume(stream, OffsetSpecification.offset(42), 58), 42, "m", 58);
      case "timestamp" -> {
        List<Delivery> got = consume(stream, OffsetSpecification.timestamp(between), 50);
        expectRange(got, 50, "m", 50);
        check(got.get(0).timestamp() >= between, "chunk timestamp " + got.get(0).timestamp()
            + " before the requested " + between);
      }
      default -> throw new IllegalArgumentException(spec);
    }
  }

  /** `last` starts at the last chunk: inside round two, running to offset 99. */
  static void offsetLast(String stream) {
    List<Delivery> got = consumeFor(stream, OffsetSpecification.last(), 101, Duration.ofSeconds(1));
    check(!got.isEmpty(), "nothing delivered from last");
    long start = got.get(0).offset();
    check(start >= 50 && start <= 99, "last started at offset " + start + ", expected 50..99");
    expectRange(got, start, "m", (int) (100 - start));
  }

  /** `next` delivers nothing already stored, then the next message published. */
  static void offsetNext(String stream) throws Exception {
    List<Delivery> got = Collections.synchronizedList(new ArrayList<>());
    try (Consumer consumer = consumerInto(stream, OffsetSpecification.next(), got).build()) {
      Thread.sleep(500);
      check(got.isEmpty(), "next delivered stored messages: " + got);
      publish(stream, null, List.of("m100"));
      waitFor(() -> !got.isEmpty(), "the message published after subscribing");
      Thread.sleep(200);
      expectRange(got, 100, "m", 1);
    }
  }

  static void storedOffset(String stream) throws Exception {
    env.streamCreator().stream(stream).create();
    publish(stream, null, bodies("m", 0, 100));
    String reference = prefix + "tracker";
    List<Delivery> got = Collections.synchronizedList(new ArrayList<>());
    try (Consumer consumer = consumerInto(stream, OffsetSpecification.first(), got)
        .name(reference).manualTrackingStrategy().builder().build()) {
      waitFor(() -> got.size() >= 100, "100 deliveries");
      consumer.store(37);
      waitFor(() -> storedOrMinusOne(consumer) == 37, "stored offset 37 queried back");
    }
    // A consumer with the same name and no offset spec resumes after the stored offset.
    got.clear();
    try (Consumer consumer = consumerInto(stream, null, got).name(reference)
        .manualTrackingStrategy().builder().build()) {
      waitFor(() -> got.size() >= 62, "62 deliveries after the stored offset");
      expectRange(got, 38, "m", 62);
    }
  }

  static void credit(String stream) throws Exception {
    env.streamCreator().stream(stream).create();
    // 20 rounds, each confirmed before the next: at least 20 chunks, each needing a credit.
    for (int round = 0; round < 20; round++) {
      publish(stream, null, bodies("c", round * 25, 25));
    }
    List<Delivery> got = Collections.synchronizedList(new ArrayList<>());
    try (Consumer consumer = consumerInto(stream, OffsetSpecification.first(), got)
        .flow().initialCredits(1).builder().build()) {
      waitFor(() -> got.size() >= 500, "500 deliveries with an initial credit of 1");
      expectRange(got, 0, "c", 500);
    }
    creditOnTheWire(stream);
  }

  /** A Client that grants credit by hand: one chunk per credit, none without. */
  static void creditOnTheWire(String stream) throws Exception {
    List<Long> chunks = Collections.synchronizedList(new ArrayList<>());
    AtomicInteger messages = new AtomicInteger();
    Client client = client(new Client.ClientParameters()
        .chunkListener((c, subscription, offset, count, size) -> {
          chunks.add(offset);
          return null;
        })
        .messageListener((subscription, offset, chunkTs, committed, ctx, m) ->
            messages.incrementAndGet()));
    try {
      Client.Response subscribed = client.subscribe((byte) 0, stream,
          OffsetSpecification.first(), 1);
      check(subscribed.isOk(), "subscribe: code " + subscribed.getResponseCode());
      waitFor(() -> !chunks.isEmpty(), "the first chunk");
      Thread.sleep(500);
      check(chunks.size() == 1, chunks.size() + " chunks with a credit of 1: " + chunks);
      client.credit((byte) 0, 2);
      waitFor(() -> chunks.size() >= 3, "two more chunks after a credit of 2");
      Thread.sleep(500);
      check(chunks.size() == 3, chunks.size() + " chunks after credits 1+2: " + chunks);
      client.credit((byte) 0, 1000);
      waitFor(() -> messages.get() >= 500, "all 500 messages after a credit of 1000");
      check(chunks.get(0) == 0 && chunks.size() >= 20, chunks.size()
          + " chunks starting at " + chunks.get(0) + ", expected 20 or more from 0");
    } finally {
      client.close();
    }
  }

  static void retentionSize(String stream) throws Exception {
    env.streamCreator().stream(stream).maxLengthBytes(ByteCapacity.B(20_000))
        .maxSegmentSizeBytes(ByteCapacity.B(5_000)).create();
    String pad = "x".repeat(100);
    for (int round = 0; round < 20; round++) {
      publish(stream, null, bodies(pad, round * 50, 50));
    }
    long first = firstOffsetEventually(stream, 999);
    List<Delivery> tail = consume(stream, OffsetSpecification.first(), (int) (1000 - first));
    expectRange(tail, first, pad, (int) (1000 - first));
    check(1000 - first < 500, "retention kept " + (1000 - first) + " of 1000 messages of ~100 B"
        + " under max-length-bytes 20000");
  }

  static void retentionAge(String stream) throws Exception {
    env.streamCreator().stream(stream).maxAge(Duration.ofSeconds(1))
        .maxSegmentSizeBytes(ByteCapacity.B(5_000)).create();
    String pad = "y".repeat(100);
    for (int round = 0; round < 10; round++) {
      publish(stream, null, bodies(pad, round * 50, 50));
    }
    Thread.sleep(2500);
    // New segments after the old ones aged out: retention runs when a segment fills.
    for (int round = 10; round < 20; round++) {
      publish(stream, null, bodies(pad, round * 50, 50));
    }
    long first = firstOffsetEventually(stream, 999);
    check(first >= 100, "first offset " + first + " after max-age 1s: old segments kept");
    expectRange(consume(stream, OffsetSpecification.first(), (int) (1000 - first)), first, pad,
        (int) (1000 - first));
  }

  static void metadata(String stream) {
    env.streamCreator().stream(stream).create();
    String missing = prefix + "missing";
    URI parsed = URI.create(uri);
    Client client = client(new Client.ClientParameters());
    try {
      Map<String, Client.StreamMetadata> metadata = client.metadata(stream, missing);
      Client.StreamMetadata found = metadata.get(stream);
      check(found != null && found.isResponseOk(), "metadata of " + stream + ": " + found);
      Client.Broker leader = found.getLeader();
      check(leader != null && leader.getHost().equals(parsed.getHost())
          && leader.getPort() == parsed.getPort(),
          "leader " + leader + ", expected the advertised " + parsed.getHost() + ":"
          + parsed.getPort());
      Client.StreamMetadata absent = metadata.get(missing);
      check(absent != null && absent.getResponseCode() == STREAM_DOES_NOT_EXIST,
          "metadata of a missing stream: " + absent + ", expected code 2");
    } finally {
      client.close();
    }
    check(!env.streamExists(missing), "streamExists of a missing stream");
    try {
      env.consumerBuilder().stream(missing).messageHandler((c, m) -> {}).build().close();
      throw new AssertionError("a consumer of a missing stream was created");
    } catch (StreamDoesNotExistException expected) {
      // the client asked for metadata and got stream-does-not-exist
    }
  }

  /** StreamStats (RabbitMQ 3.11+): osiris's first and committed chunk ids, -1 when empty. */
  static void streamStats(String stream) throws Exception {
    env.streamCreator().stream(stream).create();
    StreamStats empty;
    try {
      empty = env.queryStreamStats(stream);
    } catch (RuntimeException e) {
      // The locator operation wraps the client's refusal to send a command the broker
      // did not list (PeerProperties version before 3.11).
      for (Throwable cause = e; cause != null; cause = cause.getCause()) {
        if (cause instanceof UnsupportedOperationException) {
          throw new Skip("the broker has no StreamStats command (RabbitMQ 3.11 and later): "
              + cause.getMessage());
        }
      }
      throw e;
    }
    check(noOffset(empty::firstOffset), "an empty stream has a first offset");
    check(noOffset(empty::committedChunkId), "an empty stream has a committed chunk");
    publish(stream, null, bodies("m", 0, 50));
    publish(stream, null, bodies("m", 50, 50));
    StreamStats stats = env.queryStreamStats(stream);
    check(stats.firstOffset() == 0, "first offset " + stats.firstOffset() + ", expected 0");
    long committed = stats.committedChunkId();
    check(committed >= 50 && committed <= 99,
        "committed chunk id " + committed + ", expected the last chunk's first offset, 50..99");
    try {
      env.queryStreamStats(prefix + "missing");
      throw new AssertionError("StreamStats of a missing stream answered");
    } catch (StreamDoesNotExistException expected) {
      // response code 2
    }
  }

  /** True when the value is absent: the client throws NoOffsetException for -1. */
  static boolean noOffset(java.util.function.LongSupplier value) {
    try {
      value.getAsLong();
      return false;
    } catch (NoOffsetException expected) {
      return true;
    }
  }

  static void reconnect(String stream) throws Exception {
    if (httpUrl == null) {
      throw new Skip("no HTTP API URL given (second argument / WARREN_HTTP_URL)");
    }
    env.streamCreator().stream(stream).create();
    publish(stream, null, bodies("r", 0, 100));
    String envId = prefix + "reconnect";
    List<Delivery> got = Collections.synchronizedList(new ArrayList<>());
    AtomicInteger recoveries = new AtomicInteger();
    try (Environment own = Environment.builder().uri(uri).id(envId).rpcTimeout(WAIT)
        .recoveryBackOffDelayPolicy(attempt -> Duration.ofMillis(500)).build();
        Consumer consumer = own.consumerBuilder().stream(stream)
            .offset(OffsetSpecification.first())
            .listeners(ctx -> {
              if (ctx.currentState() == Resource.State.RECOVERING) {
                recoveries.incrementAndGet();
              }
            })
            .messageHandler((ctx, m) -> got.add(delivery(ctx, m))).build()) {
      waitFor(() -> got.size() >= 100, "100 deliveries before the connection is closed");
      int closed = new ManagementApi(httpUrl, uri)
          .closeConnections(envId + "-consumer", WAIT);
      waitFor(() -> recoveries.get() > 0, "the consumer noticing its closed connection");
      publish(stream, null, bodies("r", 100, 100));
      waitFor(() -> got.size() >= 200, "200 deliveries across the reconnect");
      Thread.sleep(200);
      // At least once: a message in flight when the socket closed may come again.
      expectRange(distinctOffsets(got), 0, "r", 200);
      check(closed >= 1, "closed " + closed + " connections");
    }
  }

  static void streamDeleted(String stream) throws Exception {
    env.streamCreator().stream(stream).create();
    publish(stream, null, bodies("d", 0, 10));
    // The wire event: a subscribed Client gets MetadataUpdate (stream, STREAM_NOT_AVAILABLE).
    AtomicReference<String> update = new AtomicReference<>();
    CountDownLatch updated = new CountDownLatch(1);
    Client client = client(new Client.ClientParameters().metadataListener((name, code) -> {
      update.set(name + " code " + code);
      updated.countDown();
    }));
    // And what applications see: an Environment consumer closes for good.
    CountDownLatch consumerClosed = new CountDownLatch(1);
    List<Delivery> got = Collections.synchronizedList(new ArrayList<>());
    Consumer consumer = consumerInto(stream, OffsetSpecification.first(), got)
        .listeners(ctx -> {
          if (ctx.currentState() == Resource.State.CLOSED) {
            consumerClosed.countDown();
          }
        }).build();
    try {
      Client.Response subscribed = client.subscribe((byte) 0, stream,
          OffsetSpecification.first(), 10);
      check(subscribed.isOk(), "subscribe: code " + subscribed.getResponseCode());
      waitFor(() -> got.size() >= 10, "10 deliveries before the delete");
      env.deleteStream(stream);
      check(updated.await(WAIT.toMillis(), TimeUnit.MILLISECONDS), "no MetadataUpdate");
      check((stream + " code " + STREAM_NOT_AVAILABLE).equals(update.get()),
          "MetadataUpdate " + update.get() + ", expected " + stream + " code 6");
      check(consumerClosed.await(WAIT.toMillis(), TimeUnit.MILLISECONDS),
          "the Environment consumer did not reach CLOSED");
    } finally {
      consumer.close();
      client.close();
    }
  }

  // ---- helpers ----

  static void check(boolean condition, String what) {
    if (!condition) {
      throw new AssertionError(what);
    }
  }

  static List<String> bodies(String prefix, int from, int count) {
    List<String> out = new ArrayList<>(count);
    for (int i = from; i < from + count; i++) {
      out.add(prefix + i);
    }
    return out;
  }

  /** Publishes with a fresh producer (named when reference is given); returns confirms. */
  static int publish(String stream, String reference, List<String> bodies) {
    try (Producer producer = env.producerBuilder().stream(stream).name(reference).build()) {
      int confirmed = sendAll(producer, bodies, -1);
      check(confirmed == bodies.size(), "confirmed " + confirmed + " of " + bodies.size());
      return confirmed;
    }
  }

  /**
   * Sends every body and waits for all outcomes; with firstId >= 0 the messages carry
   * publishing ids firstId, firstId+1, ... (a named producer). Returns the confirmed count;
   * a nack or a missing outcome fails.
   */
  static int sendAll(Producer producer, List<String> bodies, long firstId) {
    CountDownLatch outcomes = new CountDownLatch(bodies.size());
    AtomicInteger confirmed = new AtomicInteger();
    AtomicReference<String> nack = new AtomicReference<>();
    for (int i = 0; i < bodies.size(); i++) {
      var builder = producer.messageBuilder();
      if (firstId >= 0) {
        builder.publishingId(firstId + i);
      }
      Message message = builder.addData(bodies.get(i).getBytes(StandardCharsets.UTF_8)).build();
      producer.send(message, status -> {
        if (status.isConfirmed()) {
          confirmed.incrementAndGet();
        } else {
          nack.compareAndSet(null, "nacked with code " + status.getCode());
        }
        outcomes.countDown();
      });
    }
    try {
      check(outcomes.await(WAIT.toMillis(), TimeUnit.MILLISECONDS),
          (bodies.size() - outcomes.getCount()) + " of " + bodies.size() + " outcomes in " + WAIT);
    } catch (InterruptedException e) {
      throw new AssertionError(e);
    }
    check(nack.get() == null, String.valueOf(nack.get()));
    return confirmed.get();
  }

  static Client client(Client.ClientParameters parameters) {
    URI parsed = URI.create(uri);
    String[] credentials = parsed.getUserInfo().split(":", 2);
    String vhost = parsed.getPath().length() > 1 ? parsed.getPath().substring(1) : "/";
    return new Client(parameters.host(parsed.getHost()).port(parsed.getPort())
        .username(credentials[0]).password(credentials[1]).virtualHost(vhost));
  }

  static Delivery delivery(com.rabbitmq.stream.MessageHandler.Context ctx, Message message) {
    return new Delivery(ctx.offset(), new String(message.getBodyAsBinary(),
        StandardCharsets.UTF_8), ctx.timestamp());
  }

  /** A consumer builder whose messages go into `into`; spec null leaves the offset unset. */
  static ConsumerBuilder consumerInto(String stream, OffsetSpecification spec,
      List<Delivery> into) {
    ConsumerBuilder builder = env.consumerBuilder().stream(stream)
        .messageHandler((ctx, m) -> into.add(delivery(ctx, m)));
    return spec == null ? builder : builder.offset(spec);
  }

  /** Consumes until `count` deliveries arrived (fails after WAIT). */
  static List<Delivery> consume(String stream, OffsetSpecification spec, int count) {
    List<Delivery> got = Collections.synchronizedList(new ArrayList<>());
    try (Consumer consumer = consumerInto(stream, spec, got).build()) {
      waitFor(() -> got.size() >= count, count + " deliveries");
      return new ArrayList<>(got);
    }
  }

  /** Consumes for `quiet` after the last delivery (at most `max`, bounded by WAIT). */
  static List<Delivery> consumeFor(String stream, OffsetSpecification spec, int max,
      Duration quiet) {
    List<Delivery> got = Collections.synchronizedList(new ArrayList<>());
    try (Consumer consumer = consumerInto(stream, spec, got).build()) {
      long deadline = System.nanoTime() + WAIT.toNanos();
      int seen = -1;
      while (got.size() != seen && got.size() < max && System.nanoTime() < deadline) {
        seen = got.size();
        sleep(quiet.toMillis());
      }
      return new ArrayList<>(got);
    }
  }

  /** The deliveries in order, each offset kept once (its first delivery). */
  static List<Delivery> distinctOffsets(List<Delivery> got) {
    List<Delivery> out = new ArrayList<>();
    java.util.Set<Long> seen = new java.util.HashSet<>();
    synchronized (got) {
      for (Delivery d : got) {
        if (seen.add(d.offset())) {
          out.add(d);
        }
      }
    }
    return out;
  }

  /** Checks deliveries are exactly offsets from..from+count-1 with bodies prefix+offset. */
  static void expectRange(List<Delivery> got, long from, String prefix, int count) {
    check(got.size() == count, got.size() + " deliveries, expected " + count + " from " + from
        + (got.isEmpty() ? "" : "; first " + got.get(0) + ", last " + got.get(got.size() - 1)));
    for (int i = 0; i < count; i++) {
      Delivery d = got.get(i);
      long offset = from + i;
      check(d.offset() == offset && d.body().equals(prefix + offset),
          "delivery " + i + " is " + d + ", expected offset " + offset + " body " + prefix
          + offset);
    }
  }

  /** The first offset a consumer from `first` sees, once retention moved it past 0. */
  static long firstOffsetEventually(String stream, long lastOffset) {
    AtomicReference<Long> first = new AtomicReference<>(0L);
    waitFor(() -> {
      List<Delivery> got = consumeFor(stream, OffsetSpecification.first(), 1,
          Duration.ofMillis(300));
      first.set(got.isEmpty() ? -1 : got.get(0).offset());
      return first.get() > 0;
    }, "retention to move the first offset past 0");
    check(first.get() <= lastOffset, "first offset " + first.get() + " beyond the last "
        + lastOffset + ": the newest segment must stay");
    return first.get();
  }

  static long storedOrMinusOne(Consumer consumer) {
    try {
      return consumer.storedOffset();
    } catch (RuntimeException e) {
      return -1; // NoOffsetException until the broker has the stored offset
    }
  }

  static void waitFor(BooleanSupplier condition, String what) {
    long deadline = System.nanoTime() + WAIT.toNanos();
    while (!condition.getAsBoolean()) {
      check(System.nanoTime() < deadline, "timed out after " + WAIT + " waiting for " + what);
      sleep(50);
    }
  }

  static void sleep(long millis) {
    try {
      Thread.sleep(millis);
    } catch (InterruptedException e) {
      throw new AssertionError(e);
    }
  }
}
