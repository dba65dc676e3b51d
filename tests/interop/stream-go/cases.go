package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/ha"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
)

func cases() []testCase {
	return []testCase{
		{"connect", connect},
		{"create-delete", createDelete},
		{"publish-confirms", publishConfirms},
		{"batch-publish", batchPublish},
		{"sub-entry-publish", subEntryPublish},
		{"deduplication", deduplication},
		{"offset-first", func(s string) error { return offsetSpec(s, "first") }},
		{"offset-last", func(s string) error { return offsetSpec(s, "last") }},
		{"offset-next", func(s string) error { return offsetSpec(s, "next") }},
		{"offset-absolute", func(s string) error { return offsetSpec(s, "offset") }},
		{"offset-timestamp", func(s string) error { return offsetSpec(s, "timestamp") }},
		{"stored-offset", storedOffset},
		{"credit", credit},
		{"retention-size", retentionSize},
		{"retention-age", retentionAge},
		{"metadata", metadata},
		{"stream-stats", streamStats},
		{"reconnect", reconnect},
		{"stream-deleted", streamDeleted},
	}
}

var first = stream.OffsetSpecification{}.First()

func connect(name string) error {
	// main connected the locator; a create is this case's first round trip.
	if err := env.DeclareStream(name, nil); err != nil {
		return err
	}
	if exists, err := env.StreamExists(name); err != nil || !exists {
		return fmt.Errorf("StreamExists after create: %v, %v", exists, err)
	}
	return nil
}

func createDelete(name string) error {
	options := stream.NewStreamOptions().SetMaxLengthBytes(stream.ByteCapacity{}.MB(10)).
		SetMaxSegmentSizeBytes(stream.ByteCapacity{}.MB(1)).SetMaxAge(time.Hour)
	if err := env.DeclareStream(name, options); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	if err := publish(name, bodies("m", 0, 3)); err != nil {
		return err
	}
	// The same declaration again is accepted (the client ignores STREAM_ALREADY_EXISTS),
	// and the stream keeps what it held.
	if err := env.DeclareStream(name, options); err != nil {
		return fmt.Errorf("create again: %w", err)
	}
	got, err := consume(name, from(first), 3)
	if err != nil {
		return err
	}
	if err := expectRange(got, 0, "m", 3); err != nil {
		return err
	}
	if err := env.DeleteStream(name); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	if exists, err := env.StreamExists(name); err != nil || exists {
		return fmt.Errorf("StreamExists after delete: %v, %v", exists, err)
	}
	if err := env.DeleteStream(name); !errors.Is(err, stream.StreamDoesNotExist) {
		return fmt.Errorf("deleting a deleted stream: %v, expected stream does not exist", err)
	}
	return nil
}

func publishConfirms(name string) error {
	if err := env.DeclareStream(name, nil); err != nil {
		return err
	}
	if err := publish(name, bodies("msg-", 0, 1000)); err != nil {
		return err
	}
	got, err := consume(name, from(first), 1000)
	if err != nil {
		return err
	}
	return expectRange(got, 0, "msg-", 1000)
}

func batchPublish(name string) error {
	if err := env.DeclareStream(name, nil); err != nil {
		return err
	}
	producer, err := env.NewProducer(name, stream.NewProducerOptions())
	if err != nil {
		return err
	}
	defer producer.Close()
	// BatchSend writes each batch of 100 as Publish frames of its own.
	for round := 0; round < 20; round++ {
		if err := sendAll(producer, bodies("batch-", round*100, 100), -1, true); err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
	}
	got, err := consume(name, from(first), 2000)
	if err != nil {
		return err
	}
	return expectRange(got, 0, "batch-", 2000)
}

func subEntryPublish(name string) error {
	if err := env.DeclareStream(name, nil); err != nil {
		return err
	}
	// 105 = ten full sub-entries of 10 and one of 5, uncompressed.
	producer, err := env.NewProducer(name, stream.NewProducerOptions().SetSubEntrySize(10).
		SetCompression(stream.Compression{}.None()))
	if err != nil {
		return err
	}
	defer producer.Close()
	if err := sendAll(producer, bodies("sub-", 0, 105), -1, false); err != nil {
		return err
	}
	got, err := consume(name, from(first), 105)
	if err != nil {
		return err
	}
	return expectRange(got, 0, "sub-", 105)
}

func deduplication(name string) error {
	if err := env.DeclareStream(name, nil); err != nil {
		return err
	}
	reference := prefix + "producer"
	if err := namedPublish(name, reference, bodies("first-", 0, 10), 0, 0); err != nil {
		return fmt.Errorf("first producer: %w", err)
	}
	// A second producer with the same name re-sends ids 5..9 (duplicates: confirmed, not
	// stored) and 10..14 (new).
	if err := namedPublish(name, reference, bodies("second-", 5, 10), 5, 9); err != nil {
		return fmt.Errorf("second producer: %w", err)
	}
	if last, err := env.QuerySequence(reference, name); err != nil || last != 14 {
		return fmt.Errorf("QuerySequence after both: %d, %v; expected 14", last, err)
	}
	got, err := consumeQuiet(name, from(first), time.Second)
	if err != nil {
		return err
	}
	if len(got) != 15 {
		return fmt.Errorf("the stream holds %d messages, expected 15: %v", len(got), got)
	}
	if err := expectRange(got[:10], 0, "first-", 10); err != nil {
		return err
	}
	for i := 10; i < 15; i++ {
		if want := fmt.Sprintf("second-%d", i); got[i].offset != int64(i) || got[i].body != want {
			return fmt.Errorf("offset %d: %+v, expected %q", i, got[i], want)
		}
	}
	return nil
}

// namedPublish publishes with producer name `reference` and ids firstID.., after checking
// that the broker reports `lastBefore` as the reference's last publishing id.
func namedPublish(name, reference string, texts []string, firstID, lastBefore int64) error {
	producer, err := env.NewProducer(name, stream.NewProducerOptions().
		SetProducerName(reference))
	if err != nil {
		return err
	}
	defer producer.Close()
	last, err := producer.GetLastPublishingId()
	if err != nil || last != lastBefore {
		// QueryPublisherSequence answers 0 for a reference never seen.
		return fmt.Errorf("last publishing id %d, %v; expected %d", last, err, lastBefore)
	}
	return sendAll(producer, texts, firstID, false)
}

func offsetSpec(name, spec string) error {
	if err := env.DeclareStream(name, nil); err != nil {
		return err
	}
	// Two rounds of 50, each confirmed before the next: at least two chunks, and every
	// chunk of round two is timestamped after `between`.
	if err := publish(name, bodies("m", 0, 50)); err != nil {
		return err
	}
	time.Sleep(1100 * time.Millisecond)
	between := time.Now().UnixMilli()
	time.Sleep(200 * time.Millisecond)
	if err := publish(name, bodies("m", 50, 50)); err != nil {
		return err
	}
	var start int64
	var options *stream.ConsumerOptions
	switch spec {
	case "first":
		start, options = 0, from(first)
	case "offset":
		start, options = 42, from(stream.OffsetSpecification{}.Offset(42))
	case "timestamp":
		start, options = 50, from(stream.OffsetSpecification{}.Timestamp(between))
	case "last":
		return offsetLast(name)
	case "next":
		return offsetNext(name)
	}
	got, err := consume(name, options, int(100-start))
	if err != nil {
		return err
	}
	return expectRange(got, start, "m", int(100-start))
}

// offsetLast: `last` starts at the last chunk, inside round two, and runs to offset 99.
func offsetLast(name string) error {
	got, err := consumeQuiet(name, from(stream.OffsetSpecification{}.Last()), time.Second)
	if err != nil {
		return err
	}
	if len(got) == 0 {
		return errors.New("nothing delivered from last")
	}
	start := got[0].offset
	if start < 50 || start > 99 {
		return fmt.Errorf("last started at offset %d, expected 50..99", start)
	}
	return expectRange(got, start, "m", int(100-start))
}

// offsetNext: `next` delivers nothing already stored, then the next message published.
func offsetNext(name string) error {
	var c collector
	consumer, err := env.NewConsumer(name, c.handle,
		from(stream.OffsetSpecification{}.Next()))
	if err != nil {
		return err
	}
	defer consumer.Close()
	time.Sleep(500 * time.Millisecond)
	if got := c.snapshot(); len(got) != 0 {
		return fmt.Errorf("next delivered stored messages: %v", got)
	}
	if err := publish(name, []string{"m100"}); err != nil {
		return err
	}
	if err := c.waitFor(1); err != nil {
		return err
	}
	time.Sleep(200 * time.Millisecond)
	return expectRange(c.snapshot(), 100, "m", 1)
}

func storedOffset(name string) error {
	if err := env.DeclareStream(name, nil); err != nil {
		return err
	}
	if err := publish(name, bodies("m", 0, 100)); err != nil {
		return err
	}
	reference := prefix + "tracker"
	var c collector
	consumer, err := env.NewConsumer(name, c.handle, from(first).
		SetConsumerName(reference).SetManualCommit())
	if err != nil {
		return err
	}
	if err := c.waitFor(100); err != nil {
		consumer.Close()
		return err
	}
	if err := consumer.StoreCustomOffset(37); err != nil {
		consumer.Close()
		return fmt.Errorf("store offset: %w", err)
	}
	// StoreOffset has no response: poll QueryOffset until the broker has it.
	err = waitUntil(func() bool {
		stored, err := consumer.QueryOffset()
		return err == nil && stored == 37
	}, "QueryOffset to answer the stored 37")
	consumer.Close()
	if err != nil {
		return err
	}
	stored, err := env.QueryOffset(reference, name)
	if err != nil || stored != 37 {
		return fmt.Errorf("QueryOffset from the environment: %d, %v", stored, err)
	}
	// What an application does on restart: resume after the stored offset.
	got, err := consume(name, from(stream.OffsetSpecification{}.Offset(stored+1)).
		SetConsumerName(reference), 62)
	if err != nil {
		return err
	}
	return expectRange(got, 38, "m", 62)
}

func credit(name string) error {
	if err := env.DeclareStream(name, nil); err != nil {
		return err
	}
	// 20 rounds, each confirmed before the next: at least 20 chunks of at most 25.
	for round := 0; round < 20; round++ {
		if err := publish(name, bodies("c", round*25, 25)); err != nil {
			return err
		}
	}
	got, err := consume(name, from(first).SetInitialCredits(1), 500)
	if err != nil {
		return fmt.Errorf("automatic credit from an initial 1: %w", err)
	}
	if err := expectRange(got, 0, "c", 500); err != nil {
		return err
	}
	return manualCredit(name)
}

// manualCredit grants credit by hand: one chunk (at most 25 messages) per credit, none
// without.
func manualCredit(name string) error {
	var c collector
	consumer, err := env.NewConsumer(name, c.handle, from(first).SetInitialCredits(1).
		SetCreditStrategy(stream.ManualCreditStrategy))
	if err != nil {
		return err
	}
	defer consumer.Close()
	if err := c.waitFor(1); err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond)
	afterOne := c.count()
	if afterOne > 25 {
		return fmt.Errorf("%d messages with a credit of 1, at most one chunk (25) expected",
			afterOne)
	}
	if err := consumer.Credit(2); err != nil {
		return err
	}
	if err := waitUntil(func() bool { return c.count() > afterOne },
		"deliveries after a credit of 2"); err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond)
	if n := c.count(); n > 75 {
		return fmt.Errorf("%d messages after credits 1+2: at most 3 chunks (75) expected", n)
	}
	if err := consumer.Credit(1000); err != nil {
		return err
	}
	if err := c.waitFor(500); err != nil {
		return err
	}
	return expectRange(c.snapshot(), 0, "c", 500)
}

func retentionSize(name string) error {
	err := env.DeclareStream(name, stream.NewStreamOptions().
		SetMaxLengthBytes(stream.ByteCapacity{}.B(20_000)).
		SetMaxSegmentSizeBytes(stream.ByteCapacity{}.B(5_000)))
	if err != nil {
		return err
	}
	pad := strings.Repeat("x", 100)
	for round := 0; round < 20; round++ {
		if err := publish(name, bodies(pad, round*50, 50)); err != nil {
			return err
		}
	}
	start, err := firstOffsetEventually(name, 999)
	if err != nil {
		return err
	}
	if kept := 1000 - start; kept >= 500 {
		return fmt.Errorf("retention kept %d of 1000 messages of ~100 B under max-length-bytes"+
			" 20000", kept)
	}
	got, err := consume(name, from(first), int(1000-start))
	if err != nil {
		return err
	}
	return expectRange(got, start, pad, int(1000-start))
}

func retentionAge(name string) error {
	err := env.DeclareStream(name, stream.NewStreamOptions().SetMaxAge(time.Second).
		SetMaxSegmentSizeBytes(stream.ByteCapacity{}.B(5_000)))
	if err != nil {
		return err
	}
	pad := strings.Repeat("y", 100)
	for round := 0; round < 10; round++ {
		if err := publish(name, bodies(pad, round*50, 50)); err != nil {
			return err
		}
	}
	time.Sleep(2500 * time.Millisecond)
	// New segments after the old ones aged out: retention runs when a segment fills.
	for round := 10; round < 20; round++ {
		if err := publish(name, bodies(pad, round*50, 50)); err != nil {
			return err
		}
	}
	start, err := firstOffsetEventually(name, 999)
	if err != nil {
		return err
	}
	if start < 100 {
		return fmt.Errorf("first offset %d after max-age 1s: old segments kept", start)
	}
	got, err := consume(name, from(first), int(1000-start))
	if err != nil {
		return err
	}
	return expectRange(got, start, pad, int(1000-start))
}

func metadata(name string) error {
	if err := env.DeclareStream(name, nil); err != nil {
		return err
	}
	host, port, err := uriHostPort()
	if err != nil {
		return err
	}
	found, err := env.StreamMetaData(name)
	if err != nil {
		return fmt.Errorf("metadata of %s: %w", name, err)
	}
	if found.Leader == nil || found.Leader.Host != host || found.Leader.Port != port {
		return fmt.Errorf("leader %v, expected the advertised %s:%s", found.Leader, host, port)
	}
	missing := prefix + "missing"
	if _, err := env.StreamMetaData(missing); !errors.Is(err, stream.StreamDoesNotExist) {
		return fmt.Errorf("metadata of a missing stream: %v, expected stream does not exist", err)
	}
	if exists, err := env.StreamExists(missing); err != nil || exists {
		return fmt.Errorf("StreamExists of a missing stream: %v, %v", exists, err)
	}
	_, err = env.NewConsumer(missing, func(stream.ConsumerContext, *amqp.Message) {}, nil)
	if !errors.Is(err, stream.StreamDoesNotExist) {
		return fmt.Errorf("consumer of a missing stream: %v, expected stream does not exist", err)
	}
	return nil
}

// streamStats: StreamStats (RabbitMQ 3.11+) answers osiris's first and committed chunk ids,
// -1 (an error from the client) while the stream is empty.
func streamStats(name string) error {
	if err := env.DeclareStream(name, nil); err != nil {
		return err
	}
	// Its own environment: a broker without the command may close the connection.
	own, err := stream.NewEnvironment(stream.NewEnvironmentOptions().SetUri(streamURI).
		SetRPCTimeout(5 * time.Second))
	if err != nil {
		return err
	}
	defer own.Close()
	empty, err := own.StreamStats(name)
	if err != nil {
		if version, known := brokerVersion(); known && versionBefore(version, 3, 11) {
			return fmt.Errorf("%w: RabbitMQ %s has no StreamStats command (3.11 and later): %v",
				errSkip, version, err)
		}
		return fmt.Errorf("StreamStats: %w", err)
	}
	if first, err := empty.FirstOffset(); err == nil {
		return fmt.Errorf("an empty stream has first offset %d", first)
	}
	if committed, err := empty.CommittedChunkId(); err == nil {
		return fmt.Errorf("an empty stream has committed chunk id %d", committed)
	}
	if err := publish(name, bodies("m", 0, 50)); err != nil {
		return err
	}
	if err := publish(name, bodies("m", 50, 50)); err != nil {
		return err
	}
	stats, err := own.StreamStats(name)
	if err != nil {
		return fmt.Errorf("StreamStats: %w", err)
	}
	if first, err := stats.FirstOffset(); err != nil || first != 0 {
		return fmt.Errorf("first offset %d, %v; expected 0", first, err)
	}
	committed, err := stats.CommittedChunkId()
	if err != nil || committed < 50 || committed > 99 {
		return fmt.Errorf("committed chunk id %d, %v; expected the last chunk's, 50..99",
			committed, err)
	}
	return nil
}

func reconnect(name string) error {
	if httpURL == "" {
		return fmt.Errorf("%w: no HTTP API URL given (second argument / WARREN_HTTP_URL)", errSkip)
	}
	if err := env.DeclareStream(name, nil); err != nil {
		return err
	}
	if err := publish(name, bodies("r", 0, 100)); err != nil {
		return err
	}
	connectionName := prefix + "reconnect-consumer"
	var c collector
	consumer, err := ha.NewReliableConsumer(env, name,
		from(first).SetClientProvidedName(connectionName), c.handle)
	if err != nil {
		return err
	}
	defer consumer.Close()
	if err := c.waitFor(100); err != nil {
		return err
	}
	if err := closeConnections(connectionName); err != nil {
		return err
	}
	if err := waitUntil(func() bool { return consumer.GetStatus() != ha.StatusOpen },
		"the consumer noticing its closed connection"); err != nil {
		return err
	}
	if err := publish(name, bodies("r", 100, 100)); err != nil {
		return err
	}
	// ReliableConsumer waits 3 to 11 s before it reconnects.
	if err := waitUntil(func() bool { return len(distinctOffsets(c.snapshot())) >= 200 },
		"200 distinct offsets across the reconnect"); err != nil {
		return fmt.Errorf("%w (status %s)", err, consumer.GetStatusAsString())
	}
	time.Sleep(200 * time.Millisecond)
	// At least once: a message in flight when the socket closed may come again.
	return expectRange(distinctOffsets(c.snapshot()), 0, "r", 200)
}

func streamDeleted(name string) error {
	if err := env.DeclareStream(name, nil); err != nil {
		return err
	}
	if err := publish(name, bodies("d", 0, 10)); err != nil {
		return err
	}
	var c collector
	consumer, err := env.NewConsumer(name, c.handle, from(first))
	if err != nil {
		return err
	}
	defer consumer.Close()
	closed := consumer.NotifyClose()
	if err := c.waitFor(10); err != nil {
		return err
	}
	if err := env.DeleteStream(name); err != nil {
		return err
	}
	select {
	case event := <-closed:
		if event.Command != stream.CommandMetadataUpdate || event.StreamName != name {
			return fmt.Errorf("close event %+v, expected a MetadataUpdate for %s", event, name)
		}
	case <-time.After(wait):
		return fmt.Errorf("no MetadataUpdate closed the consumer within %v", wait)
	}
	return nil
}
