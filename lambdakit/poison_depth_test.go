package lambdakit_test

// Poison is bound to the delivered message, found by attacking the first
// form of that rule (fcb02b3, which compared message pointers and read the
// delivered message from the context): each test below failed on it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakitotel"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// A middleware that copies the message (the only way to transform
// one, since handlers must not modify msg: an SNS envelope unwrapped, a
// decompressed body, a defensive copy) hides truly poison messages: the
// inner Typed decode and Idempotent's key errors are no longer poison, so
// the message comes back until maxReceiveCount (holding its FIFO group)
// instead of going to the DLQ on its first delivery.
func TestPoisonOfACopiedMessage(t *testing.T) {
	copyMW := func(next lambdakit.Handler) lambdakit.Handler {
		return lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			m := *msg // defensive copy
			return next.Handle(ctx, &m)
		})
	}
	snsUnwrap := func(next lambdakit.Handler) lambdakit.Handler {
		return lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			var env struct{ Message string }
			if err := json.Unmarshal([]byte(msg.Body), &env); err != nil {
				return nil, lambdakit.Permanent(err)
			}
			m := *msg
			m.Body = env.Message
			return next.Handle(ctx, &m)
		})
	}
	sns := func(inner string) string { b, _ := json.Marshal(map[string]string{"Message": inner}); return string(b) }
	for name, c := range map[string]struct {
		mw   lambdakit.Middleware
		h    func() lambdakit.Handler
		body string
	}{
		"copy/Typed decode":           {copyMW, func() lambdakit.Handler { return charger(&testenv.Counter{}) }, `{"payment_id":"p1","amount":"ten"}`},
		"copy/Idempotent no key":      {copyMW, func() lambdakit.Handler { return idempotent(&lambdakittest.MemoryStore{}, noop) }, `{"amount":1}`},
		"copy/Idempotent invalid key": {copyMW, func() lambdakit.Handler { return idempotent(&lambdakittest.MemoryStore{}, noop) }, `not json`},
		"SNS envelope/Typed decode":   {snsUnwrap, func() lambdakit.Handler { return charger(&testenv.Counter{}) }, sns(`{"payment_id":"p2","amount":"ten"}`)},
	} {
		t.Run(name, func(t *testing.T) {
			dlq := &deadLetters{}
			batch, _ := newBatch(c.mw(c.h()), func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq; o.AllowAllFailed = true })
			m := lambdakittest.Message(c.body)
			resp, _ := batch(batchCtx(t), lambdakittest.Event(m))
			if got := dlq.ids(); !slices.Equal(got, []string{m.MessageId}) {
				t.Errorf("dead letters %q, failures %v; want the poison message dead-lettered on its first delivery", got, resp.BatchItemFailures)
			}
		})
	}
}

// A Typed handler run on a downstream 503 reply, with a context of its own
// (a downstream call given its own context.Background() timeout, or a
// worker pool's context), is not poison either: the delivered message must
// come back, not be dead-lettered, since a retry succeeds.
func TestDownstreamDecodeWithItsOwnContextIsNotPoison(t *testing.T) {
	type quote struct {
		Rate float64 `json:"rate"`
	}
	var attempts atomic.Int32
	h := lambdakit.Typed(func(ctx context.Context, p payment) error {
		reply := &events.SQSMessage{Body: `{"rate":1.1}`}
		if attempts.Add(1) == 1 {
			reply.Body = "<html>503 Service Unavailable</html>" // transient
		}
		dctx, cancel := context.WithTimeout(context.Background(), time.Second) // the downstream call's own budget
		defer cancel()
		if _, err := lambdakit.Typed(func(context.Context, quote) error { return nil }).Handle(dctx, reply); err != nil {
			return fmt.Errorf("quote service: %w", err)
		}
		return nil
	})
	dlq := &deadLetters{}
	batch, _ := newBatch(h, func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq; o.AllowAllFailed = true })
	m := lambdakittest.Message(paymentBody("pay_q", 1))
	resp, _ := batch(batchCtx(t), lambdakittest.Event(m))
	if got := dlq.ids(); len(got) != 0 {
		t.Errorf("dead letters %q (failures %v); want none: the downstream reply failed, a retry succeeds", got, resp.BatchItemFailures)
	}
	wantFailed(t, resp, m.MessageId)
}

// A PayloadFunc of the user's that fails otherwise than on the body (a
// claim-check PayloadFunc reading the payload from S3) is retried: only the
// errors that say the message cannot be read are poison.
func TestTransientPayloadFuncErrorIsRetried(t *testing.T) {
	var calls atomic.Int32
	payloadFromS3 := func(msg *events.SQSMessage) (string, error) {
		if calls.Add(1) == 1 {
			return "", errors.New("s3: GetObject: 503 SlowDown") // transient
		}
		return lambdakit.PayloadBody(msg)
	}
	h := idempotent(&lambdakittest.MemoryStore{}, noop, func(o *lambdakit.Options) { o.Payload = payloadFromS3 })
	dlq := &deadLetters{}
	batch, _ := newBatch(h, func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq; o.AllowAllFailed = true })
	m := lambdakittest.Message(paymentBody("pay_s3", 1))
	resp, _ := batch(batchCtx(t), lambdakittest.Event(m))
	if got := dlq.ids(); len(got) != 0 {
		t.Errorf("dead letters %q (failures %v); want none: a transient PayloadFunc error must be retried", got, resp.BatchItemFailures)
	}
}

// Prefetch (read ahead) of a redelivery reusing a completed key with another
// payload: poison, dead-lettered.
func TestPoisonMismatchFoundByTheReadAhead(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	completeAll(t, store, []events.SQSMessage{lambdakittest.Message(paymentBody("pay_pf", 1))})
	h := idempotent(store, charger(&testenv.Counter{})) // fresh container: no cache
	dlq := &deadLetters{}
	batch, _ := newBatch(h, func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq })
	m := lambdakittest.Redelivery(lambdakittest.Message(paymentBody("pay_pf", 2)))
	resp, _ := batch(batchCtx(t), lambdakittest.Event(m))
	wantFailed(t, resp)
	if got := dlq.ids(); !slices.Equal(got, []string{m.MessageId}) {
		t.Errorf("dead letters %q; want %q", got, m.MessageId)
	}
}

// In-container waiter with another payload: dead-lettered when the leader
// completes; run (not dead-lettered) when the leader fails.
func TestPoisonMismatchOfAWaiter(t *testing.T) {
	for _, leaderFails := range []bool{false, true} {
		t.Run(fmt.Sprint("leaderFails=", leaderFails), func(t *testing.T) {
			entered, release := make(chan struct{}), make(chan struct{})
			var runs atomic.Int32
			h := idempotent(&lambdakittest.MemoryStore{}, lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
				if runs.Add(1) == 1 {
					close(entered)
					<-release
					if leaderFails {
						return nil, errors.New("503")
					}
				}
				return nil, nil
			}))
			dlq := &deadLetters{}
			batch, _ := newBatch(h, func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq; o.AllowAllFailed = true })
			a, b := lambdakittest.Message(paymentBody("pay_w", 1)), lambdakittest.Message(paymentBody("pay_w", 2))
			var wg sync.WaitGroup
			var respB events.SQSEventResponse
			wg.Go(func() { batch(batchCtx(t), lambdakittest.Event(a)) })
			select {
			case <-entered:
			case <-time.After(5 * time.Second):
				t.Fatal("leader never ran")
			}
			wg.Go(func() { respB, _ = batch(batchCtx(t), lambdakittest.Event(b)) })
			time.Sleep(50 * time.Millisecond)
			close(release)
			wg.Wait()
			wantFailed(t, respB)
			got := dlq.ids()
			if leaderFails && len(got) != 0 {
				t.Errorf("dead letters %q; want none: b ran on its own", got)
			}
			if !leaderFails && !slices.Equal(got, []string{b.MessageId}) {
				t.Errorf("dead letters %q; want b", got)
			}
		})
	}
}

// lambdakitotel.Middleware outside Idempotent(Typed): poison still found;
// POWERTOOLS_IDEMPOTENCY_DISABLED: Typed's decode still poison;
// ProcessWithoutKey: a nested Do's ErrNoKey is not poison.
func TestPoisonThroughOtherMiddleware(t *testing.T) {
	t.Run("otel", func(t *testing.T) {
		h := lambdakit.Chain(charger(&testenv.Counter{}), lambdakitotel.Middleware(),
			lambdakit.Idempotent(&lambdakittest.MemoryStore{}, lambdakit.KeyFromField("payment_id"), quiet))
		dlq := &deadLetters{}
		batch, _ := newBatch(h, func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq })
		m := lambdakittest.Message(`{"payment_id":"p","amount":"ten"}`)
		batch(batchCtx(t), lambdakittest.Event(m))
		if got := dlq.ids(); !slices.Equal(got, []string{m.MessageId}) {
			t.Errorf("dead letters %q; want %q", got, m.MessageId)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		t.Setenv("POWERTOOLS_IDEMPOTENCY_DISABLED", "true")
		h := idempotent(&lambdakittest.MemoryStore{}, charger(&testenv.Counter{}))
		dlq := &deadLetters{}
		batch, _ := newBatch(h, func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq })
		m := lambdakittest.Message(`{"amount":"ten"}`)
		batch(batchCtx(t), lambdakittest.Event(m))
		if got := dlq.ids(); !slices.Equal(got, []string{m.MessageId}) {
			t.Errorf("dead letters %q; want %q", got, m.MessageId)
		}
	})
	t.Run("ProcessWithoutKey", func(t *testing.T) {
		once := lambdakit.NewOnce(&lambdakittest.MemoryStore{}, quiet)
		h := idempotent(&lambdakittest.MemoryStore{}, lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			return once.Do(ctx, "", nil, func(context.Context) ([]byte, error) { return nil, nil })
		}), func(o *lambdakit.Options) { o.ProcessWithoutKey = true })
		dlq := &deadLetters{}
		batch, _ := newBatch(h, func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq; o.AllowAllFailed = true })
		m := lambdakittest.Message(`{"amount":1}`)
		resp, _ := batch(batchCtx(t), lambdakittest.Event(m))
		wantFailed(t, resp, m.MessageId)
		if got := dlq.ids(); len(got) != 0 {
			t.Errorf("dead letters %q; want none", got)
		}
	})
}
