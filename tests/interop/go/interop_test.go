// Package interop drives a running broker with RabbitMQ's Go client,
// github.com/rabbitmq/amqp091-go, unchanged. Every test asserts on what the broker
// answers, and every wait has a deadline. The broker is named by WARREN_AMQP_URL,
// e.g. amqp://guest:guest@127.0.0.1:5672/%2f.
//
// Each name a test declares is unique; queues are exclusive (gone with their
// connection) unless a test needs otherwise, and exchanges are deleted at cleanup,
// so the suite can share a broker, Warren or a reference RabbitMQ.
package interop

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

const (
	waitTimeout = 5 * time.Second        // the longest any single wait for the broker may take
	quietPeriod = 300 * time.Millisecond // how long a test watches for something that must not arrive
	testTimeout = 30 * time.Second       // after this the watchdog closes a test's sockets
)

// ---------------------------------------------------------------------------
// Publish and consume

// Deliveries keep publish order, and the body and every property, including a
// header table with each common field type, arrive as sent. basic.qos holds the
// consumer at prefetch_count unacknowledged deliveries.
func TestPublishConsumeWithPrefetchPreservesOrderBodyAndProperties(t *testing.T) {
	conn := dial(t)
	ch := conn.channel(t)
	queue := declareQueue(t, ch, "q")
	confirmMode(t, ch)
	const total, prefetch = 100, 10
	sent := fullPublishing(t)
	bodies := make([]string, total)
	for i := range bodies {
		bodies[i] = fmt.Sprintf("message-%03d", i)
	}
	publishAllConfirmed(t, ch, "", queue, sent, bodies)

	if err := ch.Qos(prefetch, 0, false); err != nil {
		t.Fatalf("basic.qos prefetch_count=%d: %v", prefetch, err)
	}
	consumerTag, deliveries := consume(t, ch, queue)
	next := 0
	check := func(d amqp.Delivery) {
		t.Helper()
		if got := string(d.Body); got != bodies[next] {
			t.Fatalf("delivery %d: body %q, want %q (order lost)", next, got, bodies[next])
		}
		if d.DeliveryTag != uint64(next+1) || d.Redelivered || d.ConsumerTag != consumerTag ||
			d.Exchange != "" || d.RoutingKey != queue {
			t.Fatalf("delivery %d: tag %d redelivered %v consumer %q exchange %q key %q",
				next, d.DeliveryTag, d.Redelivered, d.ConsumerTag, d.Exchange, d.RoutingKey)
		}
		checkProperties(t, d, sent)
		next++
	}

	for range prefetch {
		check(receive(t, deliveries, "delivery within prefetch"))
	}
	expectNothing(t, deliveries, "delivery beyond prefetch_count")

	ack(t, ch, 1, false) // one slot frees: exactly one more delivery
	check(receive(t, deliveries, "delivery after one ack"))
	expectNothing(t, deliveries, "second delivery after one ack")

	ack(t, ch, uint64(prefetch+1), true)
	for next < total {
		d := receive(t, deliveries, "remaining deliveries")
		check(d)
		ack(t, ch, d.DeliveryTag, false)
	}
	expectNothing(t, deliveries, "delivery after the last message")

	closeChannel(t, ch) // anything still unacked would now be requeued
	if got := messageCount(t, conn.channel(t), queue); got != 0 {
		t.Fatalf("queue holds %d messages after every delivery was acked", got)
	}
}

// Every delivery of a basic.get carries the remaining message count; an empty
// queue answers basic.get-empty, which the client reports as ok=false.
func TestGetOnEmptyQueueThenGetMessages(t *testing.T) {
	conn := dial(t)
	ch := conn.channel(t)
	queue := declareQueue(t, ch, "q")

	if msg, ok, err := ch.Get(queue, false); err != nil || ok {
		t.Fatalf("basic.get on an empty queue: ok=%v err=%v body=%q, want get-empty", ok, err, msg.Body)
	}

	confirmMode(t, ch)
	bodies := []string{"first", "second"}
	publishAllConfirmed(t, ch, "", queue, amqp.Publishing{MessageId: "id"}, bodies)

	first := get(t, ch, queue, false)
	if string(first.Body) != "first" || first.MessageCount != 1 || first.Redelivered ||
		first.MessageId != "id" || first.RoutingKey != queue {
		t.Fatalf("first get: body %q message_count %d redelivered %v message_id %q key %q",
			first.Body, first.MessageCount, first.Redelivered, first.MessageId, first.RoutingKey)
	}
	ack(t, ch, first.DeliveryTag, false)

	second := get(t, ch, queue, true)
	if string(second.Body) != "second" || second.MessageCount != 0 ||
		second.DeliveryTag != first.DeliveryTag+1 {
		t.Fatalf("second get: body %q message_count %d tag %d (first tag %d)",
			second.Body, second.MessageCount, second.DeliveryTag, first.DeliveryTag)
	}

	if _, ok, err := ch.Get(queue, true); err != nil || ok {
		t.Fatalf("basic.get after draining: ok=%v err=%v, want get-empty", ok, err)
	}
}

// A 1 MiB body spans many frames at the negotiated frame_max and must come back
// byte for byte, through basic.get and through a consumer.
func TestOneMebibyteBodyIsByteExact(t *testing.T) {
	conn := dial(t)
	ch := conn.channel(t)
	queue := declareQueue(t, ch, "q")
	confirmMode(t, ch)
	body := make([]byte, 1<<20)
	if _, err := rand.Read(body); err != nil {
		t.Fatal(err)
	}
	if conn.Config.FrameSize <= 0 || conn.Config.FrameSize >= len(body) {
		t.Fatalf("negotiated frame_max %d: the body would not be split", conn.Config.FrameSize)
	}
	publishConfirmed(t, ch, "", queue, false, amqp.Publishing{Body: body})
	publishConfirmed(t, ch, "", queue, false, amqp.Publishing{Body: body})

	if got := get(t, ch, queue, true); !bytes.Equal(got.Body, body) {
		t.Fatalf("basic.get: %d bytes back, want the %d sent, byte-exact", len(got.Body), len(body))
	}
	_, deliveries := consume(t, ch, queue)
	got := receive(t, deliveries, "1 MiB delivery")
	if !bytes.Equal(got.Body, body) {
		t.Fatalf("basic.deliver: %d bytes back, want the %d sent, byte-exact", len(got.Body), len(body))
	}
	ack(t, ch, got.DeliveryTag, false)
}

// ---------------------------------------------------------------------------
// Publisher confirms and returns

// In confirm mode every publish is acked; the client's deferred confirmations
// and its NotifyPublish listener both see 1,000 acks, tags 1 to 1,000 in order.
func TestPublisherConfirmsAckAThousandPublishes(t *testing.T) {
	const total = 1000
	conn := dial(t)
	ch := conn.channel(t)
	queue := declareQueue(t, ch, "q")
	if err := ch.Confirm(false); err != nil {
		t.Fatalf("confirm.select: %v", err)
	}
	confirmations := ch.NotifyPublish(make(chan amqp.Confirmation, total+1))

	ctx, cancel := context.WithTimeout(context.Background(), 4*waitTimeout)
	defer cancel()
	pending := make([]*amqp.DeferredConfirmation, 0, total)
	for i := range total {
		msg := amqp.Publishing{DeliveryMode: amqp.Persistent, Body: fmt.Appendf(nil, "m%d", i)}
		confirm, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, msg)
		if err != nil || confirm == nil {
			t.Fatalf("publish %d: confirmation %v, err %v", i, confirm, err)
		}
		if confirm.DeliveryTag != uint64(i+1) {
			t.Fatalf("publish %d got delivery tag %d, want %d", i, confirm.DeliveryTag, i+1)
		}
		pending = append(pending, confirm)
	}
	for i, confirm := range pending {
		acked, err := confirm.WaitContext(ctx)
		if err != nil {
			t.Fatalf("publish %d (tag %d): no confirm: %v", i, confirm.DeliveryTag, err)
		}
		if !acked {
			t.Fatalf("publish %d (tag %d): broker sent basic.nack", i, confirm.DeliveryTag)
		}
	}

	for tag := uint64(1); tag <= total; tag++ {
		c := receive(t, confirmations, "NotifyPublish confirmation")
		if c.DeliveryTag != tag || !c.Ack {
			t.Fatalf("confirmation %d: tag %d ack %v, want tag %d acked", tag, c.DeliveryTag, c.Ack, tag)
		}
	}
	expectNothing(t, confirmations, "confirmation beyond the 1,000 publishes")
	if got := messageCount(t, ch, queue); got != total {
		t.Fatalf("queue holds %d messages after %d confirmed publishes", got, total)
	}
}

// A mandatory message that no queue takes comes back as basic.return 312
// NO_ROUTE before its confirm, with body and properties; without mandatory it is
// dropped silently.
func TestMandatoryUnroutablePublishIsReturnedNoRoute(t *testing.T) {
	conn := dial(t)
	ch := conn.channel(t)
	confirmMode(t, ch)
	returns := ch.NotifyReturn(make(chan amqp.Return, 4))
	key := uniqueName(t, "nowhere")

	publishConfirmed(t, ch, "", key, true, amqp.Publishing{MessageId: "lost-1", Body: []byte("lost")})
	// The broker sends basic.return before basic.ack, and the client hands frames
	// over in order, so the return is already here.
	select {
	case ret := <-returns:
		if ret.ReplyCode != 312 || ret.ReplyText != "NO_ROUTE" || ret.Exchange != "" ||
			ret.RoutingKey != key || string(ret.Body) != "lost" || ret.MessageId != "lost-1" {
			t.Fatalf("basic.return: %d %q exchange %q key %q body %q message_id %q, "+
				"want 312 NO_ROUTE with the message", ret.ReplyCode, ret.ReplyText, ret.Exchange,
				ret.RoutingKey, ret.Body, ret.MessageId)
		}
	default:
		t.Fatal("mandatory unroutable publish was confirmed without a basic.return before the ack")
	}

	publishConfirmed(t, ch, "", key, false, amqp.Publishing{Body: []byte("dropped")})
	expectNothing(t, returns, "basic.return of a non-mandatory publish")
}

// ---------------------------------------------------------------------------
// Acknowledgements

// basic.nack with requeue puts the message back and redelivers it flagged
// redelivered; basic.reject without requeue drops it; basic.ack with multiple
// settles every outstanding tag up to the one given.
func TestNackRequeueRejectDropAckMultiple(t *testing.T) {
	conn := dial(t)
	ch := conn.channel(t)
	queue := declareQueue(t, ch, "q")
	confirmMode(t, ch)
	publishAllConfirmed(t, ch, "", queue, amqp.Publishing{}, []string{"a", "b", "c"})

	_, deliveries := consume(t, ch, queue)
	for i, want := range []string{"a", "b", "c"} {
		d := receive(t, deliveries, "first delivery")
		if string(d.Body) != want || d.DeliveryTag != uint64(i+1) || d.Redelivered {
			t.Fatalf("delivery %d: body %q tag %d redelivered %v", i, d.Body, d.DeliveryTag, d.Redelivered)
		}
	}

	if err := ch.Nack(1, false, true); err != nil {
		t.Fatalf("basic.nack requeue: %v", err)
	}
	again := receive(t, deliveries, "redelivery after nack")
	if string(again.Body) != "a" || !again.Redelivered || again.DeliveryTag != 4 {
		t.Fatalf("after nack(requeue): body %q redelivered %v tag %d, want \"a\" redelivered tag 4",
			again.Body, again.Redelivered, again.DeliveryTag)
	}

	if err := ch.Reject(2, false); err != nil {
		t.Fatalf("basic.reject: %v", err)
	}
	ack(t, ch, 4, true) // settles "c" (tag 3) and "a" (tag 4)
	expectNothing(t, deliveries, "redelivery after reject(requeue=false)")

	closeChannel(t, ch) // requeues whatever is still unacked
	if got := messageCount(t, conn.channel(t), queue); got != 0 {
		t.Fatalf("queue holds %d messages: reject(false) requeued or ack(multiple) missed a tag", got)
	}
}

// A transaction holds publishes and acks until tx.commit; tx.rollback discards
// them. tx.commit on a channel without tx.select is 406.
func TestTxCommitAndRollback(t *testing.T) {
	conn := dial(t)
	observer := conn.channel(t)
	ch := conn.channel(t)
	queue := declareQueue(t, ch, "q")
	if err := ch.Tx(); err != nil {
		t.Fatalf("tx.select: %v", err)
	}

	publish(t, ch, "", queue, amqp.Publishing{Body: []byte("committed")})
	if got := messageCount(t, observer, queue); got != 0 {
		t.Fatalf("uncommitted publish is visible: queue holds %d", got)
	}
	if err := ch.TxCommit(); err != nil {
		t.Fatalf("tx.commit: %v", err)
	}
	if got := messageCount(t, observer, queue); got != 1 {
		t.Fatalf("after tx.commit the queue holds %d messages, want 1", got)
	}
	publish(t, ch, "", queue, amqp.Publishing{Body: []byte("rolled-back")})
	if err := ch.TxRollback(); err != nil {
		t.Fatalf("tx.rollback: %v", err)
	}
	if got := messageCount(t, observer, queue); got != 1 {
		t.Fatalf("after tx.rollback the queue holds %d messages, want 1", got)
	}

	// A rolled-back ack does not settle: closing the channel requeues the message.
	d := get(t, ch, queue, false)
	ack(t, ch, d.DeliveryTag, false)
	if err := ch.TxRollback(); err != nil {
		t.Fatalf("tx.rollback of an ack: %v", err)
	}
	closeChannel(t, ch)
	if got := messageCount(t, observer, queue); got != 1 {
		t.Fatalf("after a rolled-back ack and channel close the queue holds %d, want 1", got)
	}

	// A committed ack settles: the message is gone after the channel closes.
	ch = conn.channel(t)
	if err := ch.Tx(); err != nil {
		t.Fatalf("tx.select: %v", err)
	}
	d = get(t, ch, queue, false)
	if string(d.Body) != "committed" || !d.Redelivered {
		t.Fatalf("after requeue: body %q redelivered %v", d.Body, d.Redelivered)
	}
	ack(t, ch, d.DeliveryTag, false)
	if err := ch.TxCommit(); err != nil {
		t.Fatalf("tx.commit of an ack: %v", err)
	}
	closeChannel(t, ch)
	if got := messageCount(t, observer, queue); got != 0 {
		t.Fatalf("after a committed ack the queue holds %d, want 0", got)
	}

	err := conn.channel(t).TxCommit()
	requireAMQPError(t, err, amqp.PreconditionFailed, "PRECONDITION_FAILED")
}

// ---------------------------------------------------------------------------
// Exchanges

// A direct exchange routes on the exact routing key; one queue may bind twice.
func TestDirectExchangeRoutesByExactKey(t *testing.T) {
	conn := dial(t)
	ch := conn.channel(t)
	exchange := declareExchange(t, conn, ch, "direct", nil)
	onlyA, onlyB, both := declareQueue(t, ch, "a"), declareQueue(t, ch, "b"), declareQueue(t, ch, "ab")
	bind(t, ch, onlyA, "a", exchange, nil)
	bind(t, ch, onlyB, "b", exchange, nil)
	bind(t, ch, both, "a", exchange, nil)
	bind(t, ch, both, "b", exchange, nil)
	confirmMode(t, ch)
	for _, key := range []string{"a", "b", "c", "A"} {
		publishConfirmed(t, ch, exchange, key, false, amqp.Publishing{Body: []byte(key)})
	}

	expectBodies(t, ch, onlyA, "a")
	expectBodies(t, ch, onlyB, "b")
	expectBodies(t, ch, both, "a", "b")
}

// A fanout exchange copies every message to every bound queue, whatever the keys.
func TestFanoutExchangeCopiesToEveryQueue(t *testing.T) {
	conn := dial(t)
	ch := conn.channel(t)
	exchange := declareExchange(t, conn, ch, "fanout", nil)
	first, second := declareQueue(t, ch, "one"), declareQueue(t, ch, "two")
	bind(t, ch, first, "", exchange, nil)
	bind(t, ch, second, "ignored", exchange, nil)
	confirmMode(t, ch)
	publishConfirmed(t, ch, exchange, "any.key", false, amqp.Publishing{Body: []byte("x")})
	publishConfirmed(t, ch, exchange, "", false, amqp.Publishing{Body: []byte("y")})

	expectBodies(t, ch, first, "x", "y")
	expectBodies(t, ch, second, "x", "y")
}

// Topic bindings: `*` is exactly one word, `#` is zero or more words, at the end,
// at the start or alone.
func TestTopicExchangeWildcards(t *testing.T) {
	conn := dial(t)
	ch := conn.channel(t)
	exchange := declareExchange(t, conn, ch, "topic", nil)
	star, hash := declareQueue(t, ch, "star"), declareQueue(t, ch, "hash")
	all, leading := declareQueue(t, ch, "all"), declareQueue(t, ch, "leading")
	bind(t, ch, star, "orders.*", exchange, nil)
	bind(t, ch, hash, "orders.#", exchange, nil)
	bind(t, ch, all, "#", exchange, nil)
	bind(t, ch, leading, "#.done", exchange, nil)
	confirmMode(t, ch)
	keys := []string{"orders", "orders.eu", "orders.eu.done", "done", "other.eu", "ordersx.eu"}
	for _, key := range keys {
		publishConfirmed(t, ch, exchange, key, false, amqp.Publishing{Body: []byte(key)})
	}

	expectBodies(t, ch, star, "orders.eu")
	expectBodies(t, ch, hash, "orders", "orders.eu", "orders.eu.done") // `#` matches zero words
	expectBodies(t, ch, all, keys...)
	expectBodies(t, ch, leading, "orders.eu.done", "done")
}

// A headers exchange matches message headers against binding arguments:
// x-match=all needs every pair, x-match=any needs one.
func TestHeadersExchangeMatchAllAndAny(t *testing.T) {
	conn := dial(t)
	ch := conn.channel(t)
	exchange := declareExchange(t, conn, ch, "headers", nil)
	matchAll, matchAny := declareQueue(t, ch, "all"), declareQueue(t, ch, "any")
	bind(t, ch, matchAll, "", exchange,
		amqp.Table{"x-match": "all", "format": "pdf", "type": "report"})
	bind(t, ch, matchAny, "", exchange,
		amqp.Table{"x-match": "any", "format": "pdf", "type": "report"})
	confirmMode(t, ch)
	messages := []struct {
		body    string
		headers amqp.Table
	}{
		{"both", amqp.Table{"format": "pdf", "type": "report", "extra": int32(1)}},
		{"format-only", amqp.Table{"format": "pdf"}},
		{"wrong-format", amqp.Table{"format": "zip", "type": "report"}},
		{"neither", amqp.Table{"other": "pdf"}},
		{"no-headers", nil},
	}
	for _, m := range messages {
		msg := amqp.Publishing{Headers: m.headers, Body: []byte(m.body)}
		publishConfirmed(t, ch, exchange, "", false, msg)
	}

	expectBodies(t, ch, matchAll, "both")
	expectBodies(t, ch, matchAny, "both", "format-only", "wrong-format")
}

// exchange.bind routes from one exchange to another (RabbitMQ's e2e extension);
// exchange.unbind stops it.
func TestExchangeToExchangeBinding(t *testing.T) {
	conn := dial(t)
	ch := conn.channel(t)
	source := declareExchange(t, conn, ch, "direct", nil)
	destination := declareExchange(t, conn, ch, "fanout", nil)
	viaDestination, direct := declareQueue(t, ch, "via"), declareQueue(t, ch, "direct")
	if err := ch.ExchangeBind(destination, "k", source, false, nil); err != nil {
		t.Fatalf("exchange.bind: %v", err)
	}
	bind(t, ch, viaDestination, "", destination, nil)
	bind(t, ch, direct, "other", source, nil)
	confirmMode(t, ch)
	publishConfirmed(t, ch, source, "k", false, amqp.Publishing{Body: []byte("k")})
	publishConfirmed(t, ch, source, "other", false, amqp.Publishing{Body: []byte("other")})
	expectBodies(t, ch, viaDestination, "k")
	expectBodies(t, ch, direct, "other")

	if err := ch.ExchangeUnbind(destination, "k", source, false, nil); err != nil {
		t.Fatalf("exchange.unbind: %v", err)
	}
	publishConfirmed(t, ch, source, "k", false, amqp.Publishing{Body: []byte("after-unbind")})
	expectBodies(t, ch, viaDestination)
}

// Messages an exchange cannot route go to its alternate-exchange, and a
// mandatory publish taken by the alternate exchange is not returned.
func TestAlternateExchangeTakesUnroutableMessages(t *testing.T) {
	conn := dial(t)
	ch := conn.channel(t)
	alternate := declareExchange(t, conn, ch, "fanout", nil)
	main := declareExchange(t, conn, ch, "direct", amqp.Table{"alternate-exchange": alternate})
	routed, unrouted := declareQueue(t, ch, "routed"), declareQueue(t, ch, "unrouted")
	bind(t, ch, routed, "known", main, nil)
	bind(t, ch, unrouted, "", alternate, nil)
	confirmMode(t, ch)
	returns := ch.NotifyReturn(make(chan amqp.Return, 4))

	publishConfirmed(t, ch, main, "known", true, amqp.Publishing{Body: []byte("known")})
	publishConfirmed(t, ch, main, "unknown", true, amqp.Publishing{Body: []byte("unknown")})

	expectNothing(t, returns, "basic.return of a message the alternate exchange took")
	expectBodies(t, ch, routed, "known")
	expectBodies(t, ch, unrouted, "unknown")
}

// ---------------------------------------------------------------------------
// Errors: each closes the channel with the spec's code and leaves the connection open

// queue.declare passive of a missing queue is 404 NOT_FOUND.
func TestPassiveDeclareOfMissingQueueIs404(t *testing.T) {
	conn := dial(t)
	ch := conn.channel(t)
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))

	_, err := ch.QueueDeclarePassive(uniqueName(t, "missing"), false, false, false, false, nil)

	requireAMQPError(t, err, amqp.NotFound, "NOT_FOUND")
	requireChannelClosed(t, conn, ch, closes, amqp.NotFound)
	declareQueue(t, conn.channel(t), "after") // the connection still works
}

// Redeclaring a queue with a different durable flag is 406 PRECONDITION_FAILED.
func TestRedeclareQueueWithDifferentDurableIs406(t *testing.T) {
	conn := dial(t)
	queue := declareQueue(t, conn.channel(t), "q")
	ch := conn.channel(t)
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))

	_, err := ch.QueueDeclare(queue, true, false, true, false, nil)

	requireAMQPError(t, err, amqp.PreconditionFailed, "PRECONDITION_FAILED")
	requireChannelClosed(t, conn, ch, closes, amqp.PreconditionFailed)
	if got := messageCount(t, conn.channel(t), queue); got != 0 {
		t.Fatalf("the original queue holds %d messages", got)
	}
}

// Another connection's exclusive queue is 405 RESOURCE_LOCKED to declare,
// passive-declare, consume from, get from or purge.
func TestExclusiveQueueOfAnotherConnectionIs405(t *testing.T) {
	owner := dial(t)
	queue := declareQueue(t, owner.channel(t), "q")
	intruder := dial(t)
	accesses := []struct {
		name   string
		access func(*amqp.Channel) error
	}{
		{"declare", func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(queue, false, false, true, false, nil)
			return err
		}},
		{"passive-declare", func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(queue, false, false, true, false, nil)
			return err
		}},
		{"consume", func(ch *amqp.Channel) error {
			_, err := ch.Consume(queue, "", false, false, false, false, nil)
			return err
		}},
		{"get", func(ch *amqp.Channel) error {
			_, _, err := ch.Get(queue, false)
			return err
		}},
		{"purge", func(ch *amqp.Channel) error {
			_, err := ch.QueuePurge(queue, false)
			return err
		}},
	}
	for _, a := range accesses {
		t.Run(a.name, func(t *testing.T) {
			ch := intruder.channel(t)
			closes := ch.NotifyClose(make(chan *amqp.Error, 1))
			requireAMQPError(t, a.access(ch), amqp.ResourceLocked, "RESOURCE_LOCKED")
			requireChannelClosed(t, intruder, ch, closes, amqp.ResourceLocked)
		})
	}
	messageCount(t, owner.channel(t), queue) // the owner is unaffected
}

// basic.ack of a delivery tag the channel never issued is 406 PRECONDITION_FAILED.
func TestAckOfUnknownDeliveryTagIs406(t *testing.T) {
	conn := dial(t)
	ch := conn.channel(t)
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))

	ack(t, ch, 999, false) // asynchronous: the answer is a channel.close

	closed := receive(t, closes, "channel.close after ack of unknown tag 999")
	if closed == nil || closed.Code != amqp.PreconditionFailed ||
		!strings.HasPrefix(closed.Reason, "PRECONDITION_FAILED") || !closed.Server {
		t.Fatalf("channel closed with %#v, want server 406 PRECONDITION_FAILED", closed)
	}
	if !ch.IsClosed() || conn.IsClosed() {
		t.Fatalf("channel closed %v, connection closed %v; want only the channel closed",
			ch.IsClosed(), conn.IsClosed())
	}
	if _, err := ch.QueueDeclare("", false, true, true, false, nil); !errors.Is(err, amqp.ErrClosed) {
		t.Fatalf("declare on the closed channel: %v, want ErrClosed", err)
	}
}

// ---------------------------------------------------------------------------
// Consumer cancel notification

// Deleting a queue cancels its consumers with a server-sent basic.cancel
// (consumer_cancel_notify); the consumer's channel stays open.
func TestQueueDeletedByAnotherConnectionCancelsConsumer(t *testing.T) {
	conn := dial(t)
	ch := conn.channel(t)
	queue := uniqueName(t, "q")
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		t.Fatalf("declare %s: %v", queue, err)
	}
	t.Cleanup(func() { deleteQueue(t, conn, queue) })
	cancels := ch.NotifyCancel(make(chan string, 1))
	consumerTag, deliveries := consume(t, ch, queue)

	deleter := dial(t).channel(t)
	if _, err := deleter.QueueDelete(queue, false, false, false); err != nil {
		t.Fatalf("delete %s from another connection: %v", queue, err)
	}

	if got := receive(t, cancels, "basic.cancel from the broker"); got != consumerTag {
		t.Fatalf("basic.cancel for consumer %q, want %q", got, consumerTag)
	}
	select {
	case d, open := <-deliveries:
		if open {
			t.Fatalf("unexpected delivery %q after the queue was deleted", d.Body)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the client did not close the deliveries of the cancelled consumer")
	}
	if ch.IsClosed() {
		t.Fatal("basic.cancel closed the consumer's channel")
	}
	declareQueue(t, ch, "after")
}

// ---------------------------------------------------------------------------
// Connection: capabilities and heartbeats

// connection.start advertises the RabbitMQ extensions clients look for,
// including connection.blocked; an unalarmed broker sends no connection.blocked.
func TestServerPropertiesAdvertiseCapabilities(t *testing.T) {
	conn := dial(t)
	blocked := conn.NotifyBlocked(make(chan amqp.Blocking, 1))
	capabilities, ok := conn.Properties["capabilities"].(amqp.Table)
	if !ok {
		t.Fatalf("server properties have no capabilities table: %#v", conn.Properties)
	}
	for _, name := range []string{
		"publisher_confirms", "consumer_cancel_notify", "basic.nack", "connection.blocked",
		"exchange_exchange_bindings", "per_consumer_qos", "direct_reply_to",
	} {
		if value, present := capabilities[name]; value != true {
			t.Errorf("capability %q = %#v (present %v), want true", name, value, present)
		}
	}
	expectNothing(t, blocked, "connection.blocked on an unalarmed broker")
}

// With heartbeat=1 s an idle connection stays open: the broker sends heartbeat
// frames often enough that the client's 1.5 s read deadline never expires.
func TestHeartbeatOneSecondKeepsIdleConnectionOpen(t *testing.T) {
	conn := dialWith(t, amqp.Config{Heartbeat: time.Second})
	if conn.Config.Heartbeat != time.Second {
		t.Fatalf("negotiated heartbeat %s, want 1s", conn.Config.Heartbeat)
	}
	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	before := conn.socket.received.Load()

	select {
	case err := <-closes:
		t.Fatalf("idle connection with heartbeat=1s closed: %v", err)
	case <-time.After(4 * time.Second):
	}

	const heartbeatFrameBytes = 8
	heartbeats := (conn.socket.received.Load() - before) / heartbeatFrameBytes
	if heartbeats < 3 {
		t.Fatalf("broker sent %d heartbeat frames in 4 idle seconds at heartbeat=1s, want >= 3",
			heartbeats)
	}
	ch := conn.channel(t)
	queue := declareQueue(t, ch, "q")
	confirmMode(t, ch)
	publishConfirmed(t, ch, "", queue, false, amqp.Publishing{Body: []byte("still alive")})
	if got := get(t, ch, queue, true); string(got.Body) != "still alive" {
		t.Fatalf("after the idle period got %q", got.Body)
	}
}

// ---------------------------------------------------------------------------
// Helpers: connections and names

// brokerConn is a connection plus the socket under it, whose reads are counted.
type brokerConn struct {
	*amqp.Connection
	socket *countingConn
}

// countingConn counts the bytes the broker sends.
type countingConn struct {
	net.Conn
	received atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.received.Add(int64(n))
	return n, err
}

func brokerURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("WARREN_AMQP_URL")
	if url == "" {
		t.Fatal("WARREN_AMQP_URL is not set; point it at the broker under test, " +
			"e.g. amqp://guest:guest@127.0.0.1:5672/%2f")
	}
	return url
}

func dial(t *testing.T) *brokerConn {
	t.Helper()
	return dialWith(t, amqp.Config{})
}

// dialWith opens a connection that is closed at cleanup. The client has no
// timeout on its RPCs, so a watchdog closes the socket after testTimeout: every
// pending call then fails instead of hanging.
func dialWith(t *testing.T, config amqp.Config) *brokerConn {
	t.Helper()
	url := brokerURL(t)
	var socket *countingConn
	config.Dial = func(network, address string) (net.Conn, error) {
		raw, err := net.DialTimeout(network, address, waitTimeout)
		if err != nil {
			return nil, err
		}
		// Bounds the handshake; the client clears the deadline once the connection is open.
		if err := raw.SetDeadline(time.Now().Add(waitTimeout)); err != nil {
			raw.Close()
			return nil, err
		}
		socket = &countingConn{Conn: raw}
		return socket, nil
	}
	config.Locale = "en_US"
	conn, err := amqp.DialConfig(url, config)
	if err != nil {
		t.Fatalf("connect to WARREN_AMQP_URL: %v", err)
	}
	var fired atomic.Bool
	watchdog := time.AfterFunc(testTimeout, func() {
		fired.Store(true)
		socket.Close()
	})
	t.Cleanup(func() {
		watchdog.Stop()
		if fired.Load() {
			t.Errorf("watchdog: test ran past %s; its socket was closed", testTimeout)
		}
		if !conn.IsClosed() {
			if err := conn.CloseDeadline(time.Now().Add(waitTimeout)); err != nil {
				t.Errorf("connection.close: %v", err)
			}
		}
	})
	return &brokerConn{Connection: conn, socket: socket}
}

func (c *brokerConn) channel(t *testing.T) *amqp.Channel {
	t.Helper()
	ch, err := c.Channel()
	if err != nil {
		t.Fatalf("channel.open: %v", err)
	}
	return ch
}

func closeChannel(t *testing.T, ch *amqp.Channel) {
	t.Helper()
	if err := ch.Close(); err != nil {
		t.Fatalf("channel.close: %v", err)
	}
}

// uniqueName is unique to this run and names the test, for the broker's logs.
func uniqueName(t *testing.T, suffix string) string {
	t.Helper()
	var random [4]byte
	if _, err := rand.Read(random[:]); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("interop-go.%s.%x.%s", t.Name(), random, suffix)
}

// declareQueue declares an exclusive queue, which goes away with the connection.
func declareQueue(t *testing.T, ch *amqp.Channel, suffix string) string {
	t.Helper()
	name := uniqueName(t, suffix)
	q, err := ch.QueueDeclare(name, false, false, true, false, nil)
	if err != nil {
		t.Fatalf("declare queue %s: %v", name, err)
	}
	if q.Name != name || q.Messages != 0 || q.Consumers != 0 {
		t.Fatalf("queue.declare-ok: %+v, want %s with 0 messages and 0 consumers", q, name)
	}
	return name
}

func deleteQueue(t *testing.T, conn *brokerConn, queue string) {
	t.Helper()
	if conn.IsClosed() {
		return
	}
	if _, err := conn.channel(t).QueueDelete(queue, false, false, false); err != nil {
		t.Errorf("cleanup: delete queue %s: %v", queue, err)
	}
}

// declareExchange declares a non-durable exchange that is deleted at cleanup.
func declareExchange(t *testing.T, conn *brokerConn, ch *amqp.Channel, kind string,
	args amqp.Table) string {
	t.Helper()
	name := uniqueName(t, kind)
	if err := ch.ExchangeDeclare(name, kind, false, false, false, false, args); err != nil {
		t.Fatalf("declare %s exchange %s: %v", kind, name, err)
	}
	t.Cleanup(func() {
		if conn.IsClosed() {
			return
		}
		if err := conn.channel(t).ExchangeDelete(name, false, false); err != nil {
			t.Errorf("cleanup: delete exchange %s: %v", name, err)
		}
	})
	return name
}

func bind(t *testing.T, ch *amqp.Channel, queue, key, exchange string, args amqp.Table) {
	t.Helper()
	if err := ch.QueueBind(queue, key, exchange, false, args); err != nil {
		t.Fatalf("bind %s to %s with key %q: %v", queue, exchange, key, err)
	}
}

func messageCount(t *testing.T, ch *amqp.Channel, queue string) int {
	t.Helper()
	q, err := ch.QueueDeclarePassive(queue, false, false, true, false, nil)
	if err != nil {
		t.Fatalf("passive declare %s: %v", queue, err)
	}
	return q.Messages
}

// ---------------------------------------------------------------------------
// Helpers: publishing and receiving

func confirmMode(t *testing.T, ch *amqp.Channel) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatalf("confirm.select: %v", err)
	}
}

func publish(t *testing.T, ch *amqp.Channel, exchange, key string, msg amqp.Publishing) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := ch.PublishWithContext(ctx, exchange, key, false, false, msg); err != nil {
		t.Fatalf("publish to %q with key %q: %v", exchange, key, err)
	}
}

// publishConfirmed publishes on a channel in confirm mode and waits for the ack,
// so that the message has been routed before the test looks at any queue.
func publishConfirmed(t *testing.T, ch *amqp.Channel, exchange, key string, mandatory bool,
	msg amqp.Publishing) {
	t.Helper()
	publishAndWait(t, ch, exchange, key, mandatory, []amqp.Publishing{msg})
}

// publishAllConfirmed publishes msg once per body and waits for every ack.
func publishAllConfirmed(t *testing.T, ch *amqp.Channel, exchange, key string, msg amqp.Publishing,
	bodies []string) {
	t.Helper()
	messages := make([]amqp.Publishing, 0, len(bodies))
	for _, body := range bodies {
		m := msg
		m.Body = []byte(body)
		messages = append(messages, m)
	}
	publishAndWait(t, ch, exchange, key, false, messages)
}

func publishAndWait(t *testing.T, ch *amqp.Channel, exchange, key string, mandatory bool,
	messages []amqp.Publishing) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	pending := make([]*amqp.DeferredConfirmation, 0, len(messages))
	for _, m := range messages {
		confirm, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, mandatory, false, m)
		if err != nil || confirm == nil {
			t.Fatalf("publish to %q with key %q: confirmation %v, err %v", exchange, key, confirm, err)
		}
		pending = append(pending, confirm)
	}
	for _, confirm := range pending {
		acked, err := confirm.WaitContext(ctx)
		if err != nil {
			t.Fatalf("publish to %q with key %q (tag %d): no confirm: %v",
				exchange, key, confirm.DeliveryTag, err)
		}
		if !acked {
			t.Fatalf("publish to %q with key %q (tag %d): broker sent basic.nack",
				exchange, key, confirm.DeliveryTag)
		}
	}
}

func consume(t *testing.T, ch *amqp.Channel, queue string) (string, <-chan amqp.Delivery) {
	t.Helper()
	tag := uniqueName(t, "consumer")
	deliveries, err := ch.Consume(queue, tag, false, false, false, false, nil)
	if err != nil {
		t.Fatalf("basic.consume on %s: %v", queue, err)
	}
	return tag, deliveries
}

func ack(t *testing.T, ch *amqp.Channel, tag uint64, multiple bool) {
	t.Helper()
	if err := ch.Ack(tag, multiple); err != nil {
		t.Fatalf("basic.ack %d multiple=%v: %v", tag, multiple, err)
	}
}

func get(t *testing.T, ch *amqp.Channel, queue string, autoAck bool) amqp.Delivery {
	t.Helper()
	msg, ok, err := ch.Get(queue, autoAck)
	if err != nil || !ok {
		t.Fatalf("basic.get on %s: ok=%v err=%v, want a message", queue, ok, err)
	}
	return msg
}

// expectBodies drains queue with basic.get and compares the bodies, in order.
func expectBodies(t *testing.T, ch *amqp.Channel, queue string, want ...string) {
	t.Helper()
	var got []string
	for range len(want) + 1 {
		msg, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("basic.get on %s: %v", queue, err)
		}
		if !ok {
			break
		}
		got = append(got, string(msg.Body))
	}
	if strings.Join(got, "|") != strings.Join(want, "|") || len(got) != len(want) {
		t.Fatalf("queue %s holds %q, want %q", queue, got, want)
	}
}

func receive[T any](t *testing.T, from <-chan T, what string) T {
	t.Helper()
	select {
	case value, open := <-from:
		if !open {
			t.Fatalf("%s: the client closed the channel (connection or channel closed?)", what)
		}
		return value
	case <-time.After(waitTimeout):
		t.Fatalf("%s: nothing within %s", what, waitTimeout)
	}
	var zero T
	return zero
}

func expectNothing[T any](t *testing.T, from <-chan T, what string) {
	t.Helper()
	select {
	case value, open := <-from:
		if open {
			t.Fatalf("unexpected %s: %s", what, describe(value))
		}
		t.Fatalf("waiting for no %s: the client closed the channel", what)
	case <-time.After(quietPeriod):
	}
}

// describe keeps failure messages short: a delivery by its tag and body.
func describe(value any) string {
	if d, ok := value.(amqp.Delivery); ok {
		return fmt.Sprintf("delivery tag %d redelivered %v body %q", d.DeliveryTag, d.Redelivered, d.Body)
	}
	return fmt.Sprintf("%+v", value)
}

func requireAMQPError(t *testing.T, err error, code int, textPrefix string) {
	t.Helper()
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) {
		t.Fatalf("got %T %v, want *amqp.Error %d %s", err, err, code, textPrefix)
	}
	if amqpErr.Code != code || !strings.HasPrefix(amqpErr.Reason, textPrefix) || !amqpErr.Server {
		t.Fatalf("got %#v, want a server error %d %s", amqpErr, code, textPrefix)
	}
}

// requireChannelClosed checks that only the channel closed, that its NotifyClose
// listener got the code, and that the connection still opens channels.
func requireChannelClosed(t *testing.T, conn *brokerConn, ch *amqp.Channel,
	closes <-chan *amqp.Error, code int) {
	t.Helper()
	closed := receive(t, closes, "NotifyClose after the channel error")
	if closed == nil || closed.Code != code {
		t.Fatalf("NotifyClose got %#v, want code %d", closed, code)
	}
	if !ch.IsClosed() {
		t.Fatal("the client still considers the channel open")
	}
	if conn.IsClosed() {
		t.Fatal("a channel error closed the connection")
	}
	closeChannel(t, conn.channel(t))
}

// ---------------------------------------------------------------------------
// Helpers: properties

// fullPublishing sets every basic property; its headers use the field types
// amqp091-go encodes: string, int32, int64, float64, bool, nested table, array,
// timestamp, byte array, decimal and void.
func fullPublishing(t *testing.T) amqp.Publishing {
	t.Helper()
	uri, err := amqp.ParseURI(brokerURL(t))
	if err != nil {
		t.Fatalf("parse WARREN_AMQP_URL: %v", err)
	}
	return amqp.Publishing{
		Headers: amqp.Table{
			"x-string":    "ünïcode text",
			"x-int32":     int32(-42),
			"x-int64":     int64(1) << 40,
			"x-float64":   3.25,
			"x-bool":      true,
			"x-false":     false,
			"x-table":     amqp.Table{"name": "inner", "nested": amqp.Table{"depth": int32(2)}},
			"x-array":     []any{int32(1), "two", []any{int64(3)}, true},
			"x-timestamp": time.Unix(1_700_000_000, 0),
			"x-bytes":     []byte{0x00, 0xff, 'r', 'a', 'w'},
			"x-decimal":   amqp.Decimal{Scale: 2, Value: 314},
			"x-void":      nil,
		},
		ContentType:     "application/octet-stream",
		ContentEncoding: "identity",
		DeliveryMode:    amqp.Persistent,
		Priority:        3,
		CorrelationId:   "corr-1",
		ReplyTo:         "reply-queue",
		Expiration:      "600000",
		MessageId:       "msg-1",
		Timestamp:       time.Unix(1_700_000_123, 0),
		Type:            "interop.test",
		UserId:          uri.Username, // the broker refuses any other user id
		AppId:           "warren-interop-go",
	}
}

func checkProperties(t *testing.T, got amqp.Delivery, want amqp.Publishing) {
	t.Helper()
	pairs := [][2]any{
		{got.ContentType, want.ContentType}, {got.ContentEncoding, want.ContentEncoding},
		{got.DeliveryMode, want.DeliveryMode}, {got.Priority, want.Priority},
		{got.CorrelationId, want.CorrelationId}, {got.ReplyTo, want.ReplyTo},
		{got.Expiration, want.Expiration}, {got.MessageId, want.MessageId},
		{got.Type, want.Type}, {got.UserId, want.UserId}, {got.AppId, want.AppId},
	}
	for i, pair := range pairs {
		if pair[0] != pair[1] {
			t.Fatalf("property %d: got %#v, want %#v", i, pair[0], pair[1])
		}
	}
	if !got.Timestamp.Equal(want.Timestamp) {
		t.Fatalf("timestamp: got %v, want %v", got.Timestamp, want.Timestamp)
	}
	if problem := diffField(want.Headers, got.Headers); problem != "" {
		t.Fatalf("headers: %s", problem)
	}
}

// diffField compares two decoded field values, Go types included (an int32 that
// comes back as an int64 is a change of wire type); "" means equal.
func diffField(want, got any) string {
	if fmt.Sprintf("%T", want) != fmt.Sprintf("%T", got) {
		return fmt.Sprintf("got %T %#v, want %T %#v", got, got, want, want)
	}
	switch w := want.(type) {
	case amqp.Table:
		g := got.(amqp.Table)
		if len(g) != len(w) {
			return fmt.Sprintf("table of %d fields, want %d: %#v", len(g), len(w), g)
		}
		for key, value := range w {
			if problem := diffField(value, g[key]); problem != "" {
				return fmt.Sprintf("field %q: %s", key, problem)
			}
		}
	case []any:
		g := got.([]any)
		if len(g) != len(w) {
			return fmt.Sprintf("array of %d items, want %d: %#v", len(g), len(w), g)
		}
		for i := range w {
			if problem := diffField(w[i], g[i]); problem != "" {
				return fmt.Sprintf("item %d: %s", i, problem)
			}
		}
	case []byte:
		if !bytes.Equal(w, got.([]byte)) {
			return fmt.Sprintf("got bytes %x, want %x", got, w)
		}
	case time.Time:
		if !w.Equal(got.(time.Time)) {
			return fmt.Sprintf("got time %v, want %v", got, w)
		}
	default:
		if want != got {
			return fmt.Sprintf("got %#v, want %#v", got, want)
		}
	}
	return ""
}
