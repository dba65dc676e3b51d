// Command stream-go drives a broker's stream port with RabbitMQ's Go stream client
// (github.com/rabbitmq/rabbitmq-stream-go-client, pinned in go.mod), the way applications
// use it: an Environment, producers, consumers, and the ha package's ReliableConsumer for
// reconnection.
//
//	go run . STREAM_URI [HTTP_URL]
//	go run . --restart-phase write|check STREAM_URI
//
// Prints `PASS NAME`, `FAIL NAME: why` or `SKIP NAME: why` per case (cases.go) and
// `stream-go: N passed, M failed, K skipped` last; exits 1 on a failure. Every stream it
// creates is named stream-go-<pid>-<case> and deleted afterwards. With --restart-phase it
// runs one half of the restart check instead (restart.go).
package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/logs"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
)

// wait bounds every wait for confirms, deliveries or a broker-side effect.
const wait = 20 * time.Second

var (
	streamURI string
	httpURL   string
	prefix    string
	env       *stream.Environment
)

// errSkip marks a case that cannot run against this broker; the reason follows it.
var errSkip = errors.New("skip")

type testCase struct {
	name string
	run  func(streamName string) error
}

// quietLogger drops the client's own log lines: each case prints one line of its own.
type quietLogger struct{}

func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}
func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Warn(string, ...any)  {}

func main() {
	args := os.Args[1:]
	selected := cases()
	if len(args) >= 2 && args[0] == "--restart-phase" {
		phase, ok := map[string]int{"write": 0, "check": 1}[args[1]]
		if !ok {
			fmt.Fprintf(os.Stderr, "stream-go: --restart-phase %q: write or check\n", args[1])
			os.Exit(2)
		}
		selected = restartPhases()[phase : phase+1]
		args = args[2:]
	}
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "usage: stream-go [--restart-phase write|check] STREAM_URI"+
			" [HTTP_URL]")
		os.Exit(2)
	}
	streamURI = args[0]
	if len(args) > 1 {
		httpURL = args[1]
	}
	prefix = fmt.Sprintf("stream-go-%d-", os.Getpid())
	logs.SetLogger(quietLogger{})
	var err error
	env, err = newEnvironment()
	if err != nil {
		fmt.Printf("FAIL connect: %v\n", err)
		fmt.Println("stream-go: 0 passed, 1 failed, 0 skipped")
		os.Exit(1)
	}
	passed, failed, skipped := 0, 0, 0
	for _, c := range selected {
		switch outcome := runCase(c); {
		case outcome == nil:
			passed++
		case errors.Is(outcome, errSkip):
			skipped++
		default:
			failed++
		}
	}
	_ = env.Close()
	fmt.Printf("stream-go: %d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if failed > 0 {
		os.Exit(1)
	}
}

func newEnvironment() (*stream.Environment, error) {
	return stream.NewEnvironment(stream.NewEnvironmentOptions().SetUri(streamURI).
		SetRPCTimeout(wait))
}

func runCase(c testCase) (outcome error) {
	name := prefix + c.name
	started := time.Now()
	defer func() {
		if exists, err := env.StreamExists(name); err == nil && exists {
			if err := env.DeleteStream(name); err != nil {
				fmt.Printf("  (cleanup of %s: %v)\n", name, err)
			}
		}
	}()
	defer func() {
		// A panic inside the client or a case is a failure of that case, not of the run.
		if r := recover(); r != nil {
			outcome = fmt.Errorf("panic: %v", r)
			fmt.Printf("FAIL %s: %v\n", c.name, outcome)
		}
	}()
	outcome = c.run(name)
	switch {
	case outcome == nil:
		fmt.Printf("PASS %s (%d ms)\n", c.name, time.Since(started).Milliseconds())
	case errors.Is(outcome, errSkip):
		reason := strings.TrimPrefix(outcome.Error(), errSkip.Error()+": ")
		fmt.Printf("SKIP %s: %s\n", c.name, reason)
	default:
		fmt.Printf("FAIL %s: %v\n", c.name, outcome)
	}
	return outcome
}

// ---- publishing ----

func bodies(prefix string, from, count int) []string {
	out := make([]string, 0, count)
	for i := from; i < from+count; i++ {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

// publish sends bodies with a fresh producer, one Send each, and waits for every confirm.
func publish(streamName string, texts []string) error {
	producer, err := env.NewProducer(streamName, stream.NewProducerOptions())
	if err != nil {
		return fmt.Errorf("new producer: %w", err)
	}
	defer producer.Close()
	return sendAll(producer, texts, -1, false)
}

// sendAll sends every body (with publishing ids firstID, firstID+1, ... when firstID >= 0;
// in one BatchSend when batch is set) and waits until each is confirmed; a nack or a
// missing confirm is an error.
func sendAll(producer *stream.Producer, texts []string, firstID int64, batch bool) error {
	confirms := producer.NotifyPublishConfirmation()
	messages := make([]message.StreamMessage, 0, len(texts))
	for i, text := range texts {
		m := amqp.NewMessage([]byte(text))
		if firstID >= 0 {
			m.SetPublishingId(firstID + int64(i))
		}
		messages = append(messages, m)
	}
	if batch {
		if err := producer.BatchSend(messages); err != nil {
			return fmt.Errorf("batch send: %w", err)
		}
	} else {
		for _, m := range messages {
			if err := producer.Send(m); err != nil {
				return fmt.Errorf("send: %w", err)
			}
		}
	}
	return awaitConfirms(confirms, len(texts))
}

func awaitConfirms(confirms stream.ChannelPublishConfirm, count int) error {
	confirmed := 0
	deadline := time.After(wait)
	for confirmed < count {
		select {
		case statuses, ok := <-confirms:
			if !ok {
				return fmt.Errorf("confirm channel closed after %d of %d", confirmed, count)
			}
			for _, s := range statuses {
				if !s.IsConfirmed() {
					return fmt.Errorf("publishing id %d nacked: code %d %v",
						s.GetPublishingId(), s.GetErrorCode(), s.GetError())
				}
				confirmed++
			}
		case <-deadline:
			return fmt.Errorf("%d of %d confirms in %v", confirmed, count, wait)
		}
	}
	return nil
}

// ---- consuming ----

type delivery struct {
	offset int64
	body   string
}

// collector gathers deliveries from a consumer's handler goroutine.
type collector struct {
	mu  sync.Mutex
	got []delivery
}

func (c *collector) handle(ctx stream.ConsumerContext, m *amqp.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, delivery{ctx.Consumer.GetOffset(), string(m.GetData())})
}

func (c *collector) snapshot() []delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]delivery(nil), c.got...)
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

func (c *collector) waitFor(count int) error {
	return waitUntil(func() bool { return c.count() >= count },
		fmt.Sprintf("%d deliveries", count))
}

// consume subscribes with `options` and returns the first `count` deliveries.
func consume(streamName string, options *stream.ConsumerOptions, count int) ([]delivery, error) {
	var c collector
	consumer, err := env.NewConsumer(streamName, c.handle, options)
	if err != nil {
		return nil, fmt.Errorf("new consumer: %w", err)
	}
	defer consumer.Close()
	if err := c.waitFor(count); err != nil {
		return c.snapshot(), err
	}
	return c.snapshot(), nil
}

// consumeQuiet subscribes and returns what arrived once `quiet` passed with nothing new.
func consumeQuiet(streamName string, options *stream.ConsumerOptions,
	quiet time.Duration) ([]delivery, error) {
	var c collector
	consumer, err := env.NewConsumer(streamName, c.handle, options)
	if err != nil {
		return nil, fmt.Errorf("new consumer: %w", err)
	}
	defer consumer.Close()
	deadline := time.Now().Add(wait)
	seen := -1
	for c.count() != seen && time.Now().Before(deadline) {
		seen = c.count()
		time.Sleep(quiet)
	}
	return c.snapshot(), nil
}

func from(spec stream.OffsetSpecification) *stream.ConsumerOptions {
	return stream.NewConsumerOptions().SetOffset(spec)
}

// expectRange checks the deliveries are exactly offsets first..first+count-1, each with
// the body prefix+offset.
func expectRange(got []delivery, first int64, prefix string, count int) error {
	if len(got) != count {
		detail := ""
		if len(got) > 0 {
			detail = fmt.Sprintf("; first %v, last %v", got[0], got[len(got)-1])
		}
		return fmt.Errorf("%d deliveries, expected %d from offset %d%s", len(got), count, first,
			detail)
	}
	for i, d := range got {
		offset := first + int64(i)
		if want := fmt.Sprintf("%s%d", prefix, offset); d.offset != offset || d.body != want {
			return fmt.Errorf("delivery %d is %+v, expected offset %d body %q", i, d, offset, want)
		}
	}
	return nil
}

// distinctOffsets keeps the first delivery of each offset, in order.
func distinctOffsets(got []delivery) []delivery {
	seen := map[int64]bool{}
	out := make([]delivery, 0, len(got))
	for _, d := range got {
		if !seen[d.offset] {
			seen[d.offset] = true
			out = append(out, d)
		}
	}
	return out
}

func waitUntil(condition func() bool, what string) error {
	deadline := time.Now().Add(wait)
	for !condition() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", wait, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// firstOffsetEventually polls a consumer from `first` until retention moved the first
// offset past 0; the newest message must still be there.
func firstOffsetEventually(streamName string, lastOffset int64) (int64, error) {
	first := int64(-1)
	err := waitUntil(func() bool {
		got, err := consumeQuiet(streamName, from(stream.OffsetSpecification{}.First()),
			300*time.Millisecond)
		if err != nil || len(got) == 0 {
			return false
		}
		first = got[0].offset
		return first > 0
	}, "retention to move the first offset past 0")
	if err != nil {
		return first, err
	}
	if first > lastOffset {
		return first, fmt.Errorf("first offset %d beyond the last %d: the newest segment must stay",
			first, lastOffset)
	}
	return first, nil
}

// uriHostPort is the host and port of the stream URI, which the broker must advertise.
func uriHostPort() (string, string, error) {
	parsed, err := url.Parse(streamURI)
	if err != nil {
		return "", "", fmt.Errorf("stream URI %q: %w", streamURI, err)
	}
	return parsed.Hostname(), parsed.Port(), nil
}
