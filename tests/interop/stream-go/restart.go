package main

import (
	"fmt"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
)

// The two halves of "deduplication and stored offsets survive a broker restart", run by
// `stream-go --restart-phase write|check` on either side of a restart that the caller
// (.ci/run's stream-restart stage) performs. Fixed names, since the halves run in two
// processes; the write half removes what an interrupted earlier run left.
const (
	restartStream    = "stream-go-restart"
	restartProducer  = "stream-go-restart-producer"
	restartTracker   = "stream-go-restart-tracker"
	restartWritten   = 100 // publishing ids 0..99
	restartStored    = 42  // the tracker's stored offset
	restartResentMin = 90  // the check half re-sends 90..109: 10 duplicates, 10 new
)

func restartPhases() []testCase {
	return []testCase{
		{"restart-write", func(string) error { return restartWrite() }},
		{"restart-check", func(string) error { return restartCheck() }},
	}
}

func restartWrite() error {
	if exists, err := env.StreamExists(restartStream); err == nil && exists {
		if err := env.DeleteStream(restartStream); err != nil {
			return fmt.Errorf("removing an earlier run's stream: %w", err)
		}
	}
	if err := env.DeclareStream(restartStream, nil); err != nil {
		return err
	}
	err := namedPublish(restartStream, restartProducer, bodies("w", 0, restartWritten), 0, 0)
	if err != nil {
		return err
	}
	if err := env.StoreOffset(restartTracker, restartStream, restartStored); err != nil {
		return fmt.Errorf("store offset: %w", err)
	}
	return waitUntil(func() bool {
		stored, err := env.QueryOffset(restartTracker, restartStream)
		return err == nil && stored == restartStored
	}, fmt.Sprintf("the stored offset %d queried back", restartStored))
}

// restartCheck: after the restart the broker still knows the producer's last id and the
// tracker's offset, confirms re-sent ids without storing them, and holds every message.
func restartCheck() error {
	defer func() { _ = env.DeleteStream(restartStream) }()
	stored, err := env.QueryOffset(restartTracker, restartStream)
	if err != nil || stored != restartStored {
		return fmt.Errorf("stored offset after the restart: %d, %v; expected %d", stored, err,
			restartStored)
	}
	resent := bodies("c", restartResentMin, 20)
	err = namedPublish(restartStream, restartProducer, resent, restartResentMin,
		restartWritten-1)
	if err != nil {
		return fmt.Errorf("after the restart: %w", err)
	}
	got, err := consumeQuiet(restartStream, from(stream.OffsetSpecification{}.First()),
		time.Second)
	if err != nil {
		return err
	}
	total := restartResentMin + 20
	if len(got) != total {
		return fmt.Errorf("the stream holds %d messages, expected %d (duplicates stored?)",
			len(got), total)
	}
	if err := expectRange(got[:restartWritten], 0, "w", restartWritten); err != nil {
		return err
	}
	// The stored offset went into the log after message 99: RabbitMQ's tracking chunk takes
	// an offset there, so the new messages' offsets need only increase, not be contiguous.
	previous := int64(restartWritten - 1)
	for i, d := range got[restartWritten:] {
		want := fmt.Sprintf("c%d", restartWritten+i)
		if d.body != want || d.offset <= previous {
			return fmt.Errorf("message %d after the restart is %+v, expected %q after offset %d",
				i, d, want, previous)
		}
		previous = d.offset
	}
	return nil
}
