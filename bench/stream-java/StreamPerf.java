// The independent reference for `warren perf stream`: the same load on RabbitMQ's own Java
// stream client (com.rabbitmq:stream-client), with the same flags (a subset) and the same
// lines, so that the two tools can be compared against one broker (bench/README.md).
//
// Each producer is a thread with its own Producer (one connection each: maxProducersByConnection
// 1), sending messages whose body starts as warren perf's do: a u32 sequence, then a u64
// System.nanoTime() stamp (big-endian). Each consumer has its own connection and measures
// latency from that stamp. The client's default codec (qpid-proton-j) encodes each message
// as an AMQP 1.0 data section, as warren perf does. Latencies go into a log-linear histogram
// (64 sub-buckets per power of two: percentiles within 1.6%).

import com.rabbitmq.stream.ByteCapacity;
import com.rabbitmq.stream.ConfirmationHandler;
import com.rabbitmq.stream.Consumer;
import com.rabbitmq.stream.Environment;
import com.rabbitmq.stream.OffsetSpecification;
import com.rabbitmq.stream.Producer;
import com.rabbitmq.stream.StreamException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.LongAdder;

public final class StreamPerf {

  /** Latencies in µs, 64 sub-buckets per power of two. */
  static final class Histogram {
    static final int SUB = 64;
    final AtomicLongArray counts = new AtomicLongArray(64 * SUB);

    static int index(long v) {
      if (v < SUB) {
        return (int) Math.max(v, 0);
      }
      int msb = 63 - Long.numberOfLeadingZeros(v);
      int shift = msb - 6;
      return (shift + 1) * SUB + (int) ((v >> shift) - SUB);
    }

    static long lowest(int index) {
      if (index < SUB) {
        return index;
      }
      int shift = index / SUB - 1;
      return ((long) (index % SUB) + SUB) << shift;
    }

    void record(long v) {
      counts.incrementAndGet(index(v));
    }

    /** Moves this histogram's counts into a snapshot array and clears it. */
    long[] drain() {
      long[] out = new long[counts.length()];
      for (int i = 0; i < out.length; i++) {
        out[i] = counts.getAndSet(i, 0);
      }
      return out;
    }

    static long[] percentiles(long[] counts, double... quantiles) {
      long total = Arrays.stream(counts).sum();
      long[] out = new long[quantiles.length];
      if (total == 0) {
        return out;
      }
      for (int q = 0; q < quantiles.length; q++) {
        long rank = quantiles[q] == 0 ? 1 : (long) Math.ceil(quantiles[q] * total);
        long seen = 0;
        for (int i = 0; i < counts.length; i++) {
          seen += counts[i];
          if (seen >= rank) {
            out[q] = lowest(i);
            break;
          }
        }
      }
      return out;
    }
  }

  static final class Options {
    int producers = 1;
    int consumers = 1;
    int size = 12;
    int batchSize = 100;
    int subEntrySize = 1;
    int confirms = 10_000;
    List<String> streams = List.of("stream");
    String offset = "next";
    int timeSeconds = 3600;
    double rate = 0;
    List<String> uris = List.of("rabbitmq-stream://guest:guest@localhost:5552/%2f");
    boolean deleteStreams = false;
    long maxLengthBytes = 20_000_000_000L;
    long segmentBytesMax = 500_000_000L;
  }

  static Options parse(String[] args) {
    Options o = new Options();
    for (int i = 0; i < args.length; i++) {
      String flag = args[i];
      if (flag.equals("--delete-streams") || flag.equals("-ds")) {
        o.deleteStreams = true;
        continue;
      }
      if (i + 1 >= args.length) {
        throw new IllegalArgumentException("flag '" + flag + "' needs a value");
      }
      String v = args[++i];
      switch (flag) {
        case "--producers", "-x" -> o.producers = Integer.parseInt(v);
        case "--consumers", "-y" -> o.consumers = Integer.parseInt(v);
        case "--size", "-s" -> o.size = Math.max(12, Integer.parseInt(v));
        case "--batch-size", "-bs" -> o.batchSize = Integer.parseInt(v);
        case "--sub-entry-size", "-sbs" -> o.subEntrySize = Integer.parseInt(v);
        case "--confirms", "-c" -> o.confirms = Integer.parseInt(v);
        case "--streams", "-st" -> o.streams = List.of(v.split(","));
        case "--offset", "-o" -> o.offset = v;
        case "--time", "-z" -> o.timeSeconds = Integer.parseInt(v);
        case "--rate", "-r" -> o.rate = Double.parseDouble(v);
        case "--uris", "-u" -> o.uris = List.of(v.split(","));
        case "--max-length-bytes", "-amlb" -> o.maxLengthBytes = ByteCapacity.from(v).toBytes();
        case "--stream-max-segment-size-bytes", "-smssb" ->
            o.segmentBytesMax = ByteCapacity.from(v).toBytes();
        default -> throw new IllegalArgumentException(
            "unknown flag '" + flag + "' (the harness takes warren perf stream's flags for "
                + "producers, consumers, size, batch-size, sub-entry-size, confirms, streams, "
                + "offset, rate, time, uris, delete-streams, max-length-bytes, "
                + "stream-max-segment-size-bytes)");
      }
    }
    return o;
  }

  static OffsetSpecification offset(String spec) {
    return switch (spec) {
      case "first" -> OffsetSpecification.first();
      case "last" -> OffsetSpecification.last();
      case "next" -> OffsetSpecification.next();
      default -> OffsetSpecification.offset(Long.parseLong(spec));
    };
  }

  static String n(long v) {
    return String.format("%,d", v);
  }

  final LongAdder published = new LongAdder();
  final LongAdder confirmed = new LongAdder();
  final LongAdder errors = new LongAdder();
  final LongAdder consumed = new LongAdder();
  final Histogram interval = new Histogram();
  final long[] total = new long[64 * Histogram.SUB];
  final AtomicBoolean stop = new AtomicBoolean();
  long cpuAtStart;

  public static void main(String[] args) throws Exception {
    Options o;
    try {
      o = parse(args);
    } catch (IllegalArgumentException e) {
      System.err.println("stream-java: " + e.getMessage());
      System.exit(2);
      return;
    }
    new StreamPerf().run(o);
  }

  void run(Options o) throws Exception {
    Environment env = Environment.builder().uris(o.uris).maxProducersByConnection(1)
        .maxConsumersByConnection(1).build();
    for (String stream : o.streams) {
      try {
        env.streamCreator().stream(stream).maxLengthBytes(ByteCapacity.B(o.maxLengthBytes))
            .maxSegmentSizeBytes(ByteCapacity.B(o.segmentBytesMax)).create();
        System.out.println("stream '" + stream + "' created");
      } catch (StreamException e) {
        System.out.println("stream '" + stream + "' exists already (" + e.getMessage() + ")");
      }
    }
    List<Consumer> consumers = new ArrayList<>();
    for (int i = 0; i < o.consumers; i++) {
      consumers.add(env.consumerBuilder().stream(o.streams.get(i % o.streams.size()))
          .offset(offset(o.offset)).messageHandler((context, message) -> {
            byte[] body = message.getBodyAsBinary();
            long sent = 0;
            for (int b = 4; b < 12; b++) {
              sent = (sent << 8) | (body[b] & 0xff);
            }
            interval.record(Math.max(1, (System.nanoTime() - sent) / 1000));
            consumed.increment();
          }).build());
    }
    List<Thread> threads = new ArrayList<>();
    List<Producer> producers = new ArrayList<>();
    for (int i = 0; i < o.producers; i++) {
      Producer producer = env.producerBuilder().stream(o.streams.get(i % o.streams.size()))
          .batchSize(o.batchSize).subEntrySize(o.subEntrySize)
          .maxUnconfirmedMessages(o.confirms).build();
      producers.add(producer);
      Thread thread = new Thread(() -> publish(producer, o.size, o.rate), "producer-" + i);
      threads.add(thread);
    }
    cpuAtStart = ((com.sun.management.OperatingSystemMXBean)
        java.lang.management.ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    long start = System.nanoTime();
    threads.forEach(Thread::start);
    report(o, start);
    stop.set(true);
    for (Thread thread : threads) {
      thread.join(10_000);
    }
    producers.forEach(Producer::close);
    consumers.forEach(Consumer::close);
    if (o.deleteStreams) {
      for (String stream : o.streams) {
        env.deleteStream(stream);
        System.out.println("stream '" + stream + "' deleted");
      }
    }
    env.close();
  }

  /** Publishes until stop; with a rate (msg/s), message n waits for start + n / rate. */
  void publish(Producer producer, int size, double rate) {
    long start = System.nanoTime();
    ConfirmationHandler handler = status -> {
      if (status.isConfirmed()) {
        confirmed.increment();
      } else {
        errors.increment();
      }
    };
    int sequence = 0;
    while (!stop.get()) {
      byte[] body = new byte[size];
      long now = System.nanoTime();
      for (int b = 0; b < 4; b++) {
        body[b] = (byte) (sequence >>> (24 - 8 * b));
      }
      for (int b = 0; b < 8; b++) {
        body[4 + b] = (byte) (now >>> (56 - 8 * b));
      }
      sequence++;
      if (rate > 0 && sequence % 16 == 0) {
        long due = start + (long) (sequence * 1e9 / rate);
        while (System.nanoTime() < due && !stop.get()) {
          java.util.concurrent.locks.LockSupport.parkNanos(due - System.nanoTime());
        }
      }
      producer.send(producer.messageBuilder().addData(body).build(), handler);
      published.increment();
    }
  }

  /** A line a second for --time seconds, then the summary. */
  void report(Options o, long start) throws InterruptedException {
    long[] last = new long[3];
    long lastAt = start;
    for (int second = 1; second <= o.timeSeconds; second++) {
      long due = start + second * 1_000_000_000L;
      Thread.sleep(Math.max(0, (due - System.nanoTime()) / 1_000_000));
      long now = System.nanoTime();
      long[] counts = {published.sum(), confirmed.sum(), consumed.sum()};
      long[] drained = interval.drain();
      for (int i = 0; i < drained.length; i++) {
        total[i] += drained[i];
      }
      long[] p = Histogram.percentiles(drained, 0, 0.5, 0.75, 0.95, 0.99);
      double seconds = (now - lastAt) / 1e9;
      System.out.printf("%d, published %s msg/s, confirmed %s msg/s, consumed %s msg/s, "
              + "latency min/median/75th/95th/99th %s/%s/%s/%s/%s µs, chunk size n/a%n", second,
          n(Math.round((counts[0] - last[0]) / seconds)),
          n(Math.round((counts[1] - last[1]) / seconds)),
          n(Math.round((counts[2] - last[2]) / seconds)), n(p[0]), n(p[1]), n(p[2]), n(p[3]),
          n(p[4]));
      last = counts;
      lastAt = now;
    }
    double elapsed = (lastAt - start) / 1e9;
    long pub = Math.round(last[0] / elapsed);
    long conf = Math.round(last[1] / elapsed);
    long cons = Math.round(last[2] / elapsed);
    long[] p = Histogram.percentiles(total, 0, 0.5, 0.75, 0.95, 0.99);
    System.out.printf("Summary: published %s msg/s, confirmed %s msg/s, consumed %s msg/s, "
        + "latency 95th %s µs, chunk size n/a%n", n(pub), n(conf), n(cons), n(p[3]));
    System.out.printf("id: stream, sending rate avg: %d msg/s%n", pub);
    System.out.printf("id: stream, receiving rate avg: %d msg/s%n", cons);
    System.out.printf("id: stream, consumer latency min/median/75th/95th/99th %d/%d/%d/%d/%d µs%n",
        p[0], p[1], p[2], p[3], p[4]);
    // the JVM's CPU over the run: a harness near one whole core limits the rate, not the broker
    double cpu = (((com.sun.management.OperatingSystemMXBean)
        java.lang.management.ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime()
        - cpuAtStart) / 1e9;
    System.out.printf("stream-summary elapsed_s=%.3f published=%d confirmed=%d errors=%d "
            + "consumed=%d published_rate=%d confirmed_rate=%d consumed_rate=%d "
            + "latency_us_p50=%d latency_us_p95=%d latency_us_p99=%d tool_cpu_s=%.2f%n", elapsed,
        last[0], last[1], errors.sum(), last[2], pub, conf, cons, p[1], p[3], p[4], cpu);
    System.out.flush();
  }
}
