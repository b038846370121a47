package lambdakit_test

// Tests from the third adversarial review of the idempotency path (after
// the read ahead, the dead-letter path and the per-record notes). The ones
// marked "Found by review 2" failed on the code they were written against
// and pass since their fix;
// the others are regression tests of attacks that did not get through.

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// Found by review 2: the read ahead runs the middleware's KeyFunc on every
// record of the batch, including records the function routes elsewhere
// and that never reach this Idempotent. A KeyFunc written for the records
// that do reach it may panic on the others; that panic then happens in the
// goroutine of whichever record made the read ahead, and fails that
// record, a good one, instead of nobody (the other record never calls the
// KeyFunc). Batch promises that a panic fails only its record. On a FIFO
// queue the failed record also stops its group, so the pair comes back
// together, again and again, until maxReceiveCount moves the good
// payment to the dead-letter queue, never charged.
func TestReview2ReadAheadPanicOfAnotherRecordsKeyFailsAGoodRecord(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	// Payments carry "payment": {"id": ...}; refunds are routed to a
	// handler of their own and have no "payment" object at all.
	paymentKey := func(msg *events.SQSMessage) (string, error) {
		var body struct {
			Payment *struct {
				ID string `json:"id"`
			} `json:"payment"`
		}
		if err := json.Unmarshal([]byte(msg.Body), &body); err != nil {
			return "", errors.Join(lambdakit.ErrInvalidKey, err)
		}
		return body.Payment.ID, nil // only payments get here: no nil check
	}
	fx := &testenv.Counter{}
	charge := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		fx.Add(msg.Body)
		return []byte(`"charged"`), nil
	})
	payments := lambdakit.Idempotent(store, paymentKey, quiet)(charge)
	refunds := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		return nil, nil
	})
	router := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		if strings.Contains(msg.Body, `"refund"`) {
			return refunds.Handle(ctx, msg)
		}
		return payments.Handle(ctx, msg)
	})

	// Both come back after an earlier failed batch: receive count 2.
	pay := lambdakittest.Redelivery(lambdakittest.Message(`{"payment":{"id":"pay-1"},"amount":100}`, lambdakittest.InGroup("customer-1")))
	refund := lambdakittest.Redelivery(lambdakittest.Message(`{"refund":{"id":"ref-1"},"amount":100}`, lambdakittest.InGroup("customer-1")))
	b, logs := newBatch(router)
	resp, err := b(batchCtx(t), lambdakittest.Event(pay, refund))
	if err != nil {
		t.Errorf("got batch error %v; want none", err)
	}
	wantFailed(t, resp)
	if n := fx.Count(pay.Body); n != 1 {
		t.Errorf("payment charged %d times; want 1", n)
	}
	for id, line := range logs.byMessageID(t) {
		t.Logf("message %s failed: %v", id, line["reason"])
	}
}

// Found by review 2: a message that waited in the container for an earlier
// one with its key, which then failed with an error the batch's own
// BatchOptions.IsPermanent calls permanent, follows it into the
// dead-letter queue and is reported succeeded, though it never ran. The
// waiter's error is kept permanent-free only for lambdakit.IsPermanent
// (ErrPermanent); for any other error it wraps the earlier one with %w,
// so a custom IsPermanent sees the same error in both. The README promises
// the opposite (fixed): such a message "is not sent along when that one fails
// permanently (it did not run), but comes back to run on its own".
//
// A natural setting shows it: IsPermanent counting lambdakit.ErrDecode
// (a body that does not decode never will), and a producer that sent a
// payment with a string amount, then the corrected payment with the same
// payment_id. The corrected payment goes to the DLQ, never charged.
func TestReview2WaiterFollowsCustomPermanentFailureIntoDLQ(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &lambdakittest.MemoryStore{}
		dlq := &deadLetters{}
		fx := &testenv.Counter{}
		entered := make(chan struct{})
		release := make(chan struct{})
		var runs atomic.Int32
		typed := charger(fx) // lambdakit.TypedResult: fails with ErrDecode on a string amount
		slow := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			if runs.Add(1) == 1 {
				close(entered)
				<-release
			}
			return typed.Handle(ctx, msg)
		})
		idem := idempotent(store, slow)
		batch, _ := newBatch(idem, func(o *lambdakit.BatchOptions) {
			o.DeadLetters = dlq
			o.IsPermanent = func(err error) bool {
				return errors.Is(err, lambdakit.ErrDecode) || lambdakit.IsPermanent(err)
			}
		})
		bad := lambdakittest.Message(`{"payment_id":"pay-9","amount":"100"}`)
		fixed := lambdakittest.Message(`{"payment_id":"pay-9","amount":100}`)
		var badResp, fixedResp events.SQSEventResponse
		var wg sync.WaitGroup
		wg.Go(func() { badResp, _ = batch(batchCtx(t), lambdakittest.Event(bad)) })
		<-entered
		wg.Go(func() { fixedResp, _ = batch(batchCtx(t), lambdakittest.Event(fixed)) })
		synctest.Wait() // the fixed payment waits for the bad one
		close(release)
		wg.Wait()

		wantFailed(t, badResp) // in the DLQ: reported succeeded
		if got := dlq.ids(); !slices.Equal(got, []string{bad.MessageId}) {
			t.Errorf("dead letters %q; want only the undecodable message %q", got, bad.MessageId)
		}
		// The fixed payment did not run while it waited: since the fix
		// it runs on its own once the bad one has failed, and is charged,
		// once; before the fix it followed the bad one into the DLQ.
		wantFailed(t, fixedResp)
		if n := fx.Count("pay-9"); n != 1 {
			t.Errorf("payment charged %d times; want 1", n)
		}
	})
}

// Found by review 2: BatchOptions.IsPermanent is the function's own code,
// like a handler or a dead-letter sender, but a panic in it is not
// recovered: it runs in the record's goroutine outside runRecord's and
// sendDeadLetter's recovers, so it kills the whole process. A handler's
// panic fails only its record and so does a sender's; an IsPermanent that
// dereferences a nil *HTTPError for an error of another kind crashes the
// function instead, on every batch holding such a record, and every record
// of those batches comes back (on a FIFO queue, until maxReceiveCount moves
// them all to the dead-letter queue).
//
// The batch runs in a child process, since the panic would end this one.
func TestReview2PanickingIsPermanentCrashesTheProcess(t *testing.T) {
	if os.Getenv("REVIEW2_ISPERMANENT_CHILD") == "1" {
		dlq := &deadLetters{}
		batch, _ := newBatch(failPoison, func(o *lambdakit.BatchOptions) {
			o.DeadLetters = dlq
			o.IsPermanent = func(err error) bool {
				var he *review2HTTPError
				errors.As(err, &he)
				return he.Code == 400 // nil for other errors: panics
			}
		})
		ok, flaky := lambdakittest.Message("fine"), lambdakittest.Message("flaky")
		resp, _ := batch(batchCtx(t), lambdakittest.Event(ok, flaky))
		wantFailed(t, resp, flaky.MessageId)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReview2PanickingIsPermanentCrashesTheProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "REVIEW2_ISPERMANENT_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("the batch with a panicking IsPermanent: got %v; want the flaky record failed and the process alive\n%s", err, firstLines(string(out), 12))
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// review2HTTPError is an error type a function might mark permanent by its
// status code.
type review2HTTPError struct{ Code int }

func (e *review2HTTPError) Error() string { return "HTTP error" }

// swappingStore is a MemoryStore whose batch read answers every ID with the
// record of another ID (a broken BatchGetter, or one keyed by something
// else): the read ahead must not replay one payment's result for another.
type swappingStore struct{ *lambdakittest.MemoryStore }

func (s swappingStore) GetRecords(ctx context.Context, ids []string) (map[string]lambdakit.IdempotencyRecord, error) {
	all := s.Records()
	out := map[string]lambdakit.IdempotencyRecord{}
	for _, id := range ids {
		for other, rec := range all {
			if other != id {
				out[id] = rec // the map key is id, the record another's
				break
			}
		}
	}
	return out, nil
}

// Attacks on the read ahead that did not get through: they pass.
func TestReview2ReadAheadRegressions(t *testing.T) {
	t.Run("records under other IDs are not replayed", func(t *testing.T) {
		mem := &lambdakittest.MemoryStore{}
		a, b := lambdakittest.Message(paymentBody("swap-a", 100)), lambdakittest.Message(paymentBody("swap-b", 200))
		completeAll(t, mem, []events.SQSMessage{a})
		fx := &testenv.Counter{}
		h := idempotent(swappingStore{mem}, charger(fx))
		batch, _ := newBatch(h)
		resp, err := batch(batchCtx(t), lambdakittest.Event(lambdakittest.Redelivery(a), lambdakittest.Redelivery(b)))
		if err != nil {
			t.Fatal(err)
		}
		wantFailed(t, resp)
		if fx.Count("swap-b") != 1 || fx.Count("swap-a") != 0 {
			t.Errorf("got %d runs of swap-a and %d of swap-b; want 0 and 1", fx.Count("swap-a"), fx.Count("swap-b"))
		}
	})

	t.Run("an expired completed record is run again, once", func(t *testing.T) {
		mem := &lambdakittest.MemoryStore{}
		now := time.Now()
		clock := func() time.Time { return now }
		msg := lambdakittest.Message(paymentBody("expired-1", 100))
		first := idempotent(mem, charger(&testenv.Counter{}), func(o *lambdakit.IdempotencyOptions) { o.Now = clock; o.TTL = time.Minute })
		if _, err := handle(t, first, msg); err != nil {
			t.Fatal(err)
		}
		later := func() time.Time { return now.Add(2 * time.Minute) }
		fx := &testenv.Counter{}
		h := idempotent(mem, charger(fx), func(o *lambdakit.IdempotencyOptions) { o.Now = later; o.TTL = time.Minute })
		batch, _ := newBatch(h)
		again := lambdakittest.Redelivery(msg)
		resp, err := batch(batchCtx(t), lambdakittest.Event(again, lambdakittest.Redelivery(again)))
		if err != nil {
			t.Fatal(err)
		}
		wantFailed(t, resp)
		if n := fx.Count("expired-1"); n != 1 {
			t.Errorf("handler ran %d times; want 1", n)
		}
	})

	t.Run("a batch read that fails leaves every record to the lock", func(t *testing.T) {
		mem := &lambdakittest.MemoryStore{}
		done := payments("readfail", 3)
		completeAll(t, mem, done)
		fx := &testenv.Counter{}
		h := idempotent(failingGetter{mem}, charger(fx))
		batch, _ := newBatch(h)
		resp, err := batch(batchCtx(t), lambdakittest.Event(redelivered(done)...))
		if err != nil {
			t.Fatal(err)
		}
		wantFailed(t, resp)
		if n := fx.Total(); n != 0 {
			t.Errorf("handler ran %d times; want 0 (duplicates found by the lock)", n)
		}
	})
}

type failingGetter struct{ *lambdakittest.MemoryStore }

func (failingGetter) GetRecords(context.Context, []string) (map[string]lambdakit.IdempotencyRecord, error) {
	return nil, errors.New("read failed")
}
