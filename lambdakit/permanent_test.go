package lambdakit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
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

var errBadFormat = errors.New("bad format")

type panicSender struct{}

func (panicSender) SendDeadLetter(context.Context, *events.SQSMessage, error) error {
	panic("sender broke")
}

// failPoison fails bodies starting with "poison" permanently, and "flaky"
// ones normally.
var failPoison = lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
	switch {
	case strings.HasPrefix(msg.Body, "poison"):
		return nil, lambdakit.Permanent(fmt.Errorf("%w: %s", errBadFormat, msg.Body))
	case strings.HasPrefix(msg.Body, "flaky"):
		return nil, errors.New("try again")
	}
	return nil, nil
})

func TestPermanentWraps(t *testing.T) {
	err := lambdakit.Permanent(errBadFormat)
	if !errors.Is(err, lambdakit.ErrPermanent) || !lambdakit.IsPermanent(err) {
		t.Errorf("Permanent(err): errors.Is(ErrPermanent) = false; want true")
	}
	if !errors.Is(err, errBadFormat) {
		t.Errorf("Permanent(err): errors.Is(err) = false; want true")
	}
	if got := err.Error(); got != errBadFormat.Error() {
		t.Errorf("Permanent(err).Error() = %q; want %q", got, errBadFormat.Error())
	}
	if wrapped := fmt.Errorf("context: %w", err); !lambdakit.IsPermanent(wrapped) {
		t.Errorf("IsPermanent of a wrapped Permanent error = false; want true")
	}
	if lambdakit.Permanent(nil) != nil {
		t.Errorf("Permanent(nil) = non-nil; want nil")
	}
	if lambdakit.IsPermanent(errBadFormat) {
		t.Errorf("IsPermanent(plain error) = true; want false")
	}
}

func TestBatchSendsPermanentFailuresToTheDeadLetterQueue(t *testing.T) {
	t.Run("sent: the record succeeds, others fail as usual", func(t *testing.T) {
		dlq := &deadLetters{}
		batch, log := newBatch(failPoison, func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq })
		ok, poison, flaky := lambdakittest.Message("ok"), lambdakittest.Message("poison 1"), lambdakittest.Message("flaky")
		resp, err := batch(batchCtx(t), lambdakittest.Event(ok, poison, flaky))
		if err != nil {
			t.Fatalf("batch error %v; want none", err)
		}
		wantFailed(t, resp, flaky.MessageId)
		if got := dlq.ids(); !slices.Equal(got, []string{poison.MessageId}) {
			t.Errorf("dead letters %q; want %q", got, poison.MessageId)
		}
		if !errors.Is(dlq.reasons[0], errBadFormat) {
			t.Errorf("reason %v; want the handler's error", dlq.reasons[0])
		}
		lines := log.byMessageID(t)
		if line := lines[poison.MessageId]; line == nil || !strings.Contains(line["msg"].(string), "dead-letter queue") || line["reason"] != "bad format: poison 1" {
			t.Errorf("log line for the poison message %v; want one saying it went to the dead-letter queue, with the reason", line)
		}
		if lines[flaky.MessageId] == nil {
			t.Errorf("no log line for the failed record")
		}
	})

	t.Run("send fails: the record fails and comes back", func(t *testing.T) {
		dlq := &deadLetters{fail: errors.New("queue unreachable")}
		batch, log := newBatch(failPoison, func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq })
		ok, poison := lambdakittest.Message("ok"), lambdakittest.Message("poison 2")
		resp, err := batch(batchCtx(t), lambdakittest.Event(ok, poison))
		if err != nil {
			t.Fatalf("batch error %v; want none", err)
		}
		wantFailed(t, resp, poison.MessageId)
		reason := log.reason(t, poison.MessageId)
		if !strings.Contains(reason, "bad format: poison 2") || !strings.Contains(reason, "queue unreachable") {
			t.Errorf("reason %q; want the handler's error and the send's", reason)
		}

		// Redelivered, once the queue is back: now it goes.
		dlq.mu.Lock()
		dlq.fail = nil
		dlq.mu.Unlock()
		again := lambdakittest.Redelivery(poison)
		resp, err = batch(batchCtx(t), lambdakittest.Event(again))
		if err != nil {
			t.Fatalf("batch error %v on the redelivery; want none", err)
		}
		wantFailed(t, resp)
		if got := dlq.ids(); !slices.Equal(got, []string{poison.MessageId}) {
			t.Errorf("dead letters %q; want %q", got, poison.MessageId)
		}
	})

	t.Run("a failed send is a DeadLetterError that keeps both errors", func(t *testing.T) {
		sendErr := errors.New("access denied")
		dlq := &deadLetters{fail: sendErr}
		batch, log := newBatch(failPoison, func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq })
		m := lambdakittest.Message("poison 5")
		if _, err := batch(batchCtx(t), lambdakittest.Event(m)); !errors.Is(err, lambdakit.ErrAllFailed) {
			t.Fatalf("batch error %v; want ErrAllFailed", err)
		}
		want := &lambdakit.DeadLetterError{Err: lambdakit.Permanent(fmt.Errorf("%w: poison 5", errBadFormat)), SendErr: sendErr}
		if got := log.reason(t, m.MessageId); got != want.Error() {
			t.Errorf("logged reason %q; want %q", got, want.Error())
		}
		if !errors.Is(want, sendErr) || !errors.Is(want, errBadFormat) || !errors.Is(want, lambdakit.ErrPermanent) {
			t.Errorf("DeadLetterError does not unwrap to both errors")
		}
	})

	t.Run("a sender that panics fails only the record", func(t *testing.T) {
		batch, log := newBatch(failPoison, func(o *lambdakit.BatchOptions) { o.DeadLetters = panicSender{} })
		ok, poison := lambdakittest.Message("ok"), lambdakittest.Message("poison 6")
		resp, err := batch(batchCtx(t), lambdakittest.Event(ok, poison))
		if err != nil {
			t.Fatalf("batch error %v; want none", err)
		}
		wantFailed(t, resp, poison.MessageId)
		if reason := log.reason(t, poison.MessageId); !strings.Contains(reason, "sender broke") {
			t.Errorf("reason %q; want the panic", reason)
		}
	})

	t.Run("without a sender, a permanent failure fails as usual", func(t *testing.T) {
		batch, _ := newBatch(failPoison)
		ok, poison := lambdakittest.Message("ok"), lambdakittest.Message("poison 3")
		resp, _ := batch(batchCtx(t), lambdakittest.Event(ok, poison))
		wantFailed(t, resp, poison.MessageId)
	})

	t.Run("a plain failure is not sent", func(t *testing.T) {
		dlq := &deadLetters{}
		batch, _ := newBatch(failPoison, func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq })
		flaky := lambdakittest.Message("flaky")
		resp, _ := batch(batchCtx(t), lambdakittest.Event(flaky))
		wantFailed(t, resp, flaky.MessageId)
		if got := dlq.ids(); len(got) != 0 {
			t.Errorf("dead letters %q; want none", got)
		}
	})

	t.Run("IsPermanent chooses which errors are permanent", func(t *testing.T) {
		dlq := &deadLetters{}
		batch, _ := newBatch(failPoison, func(o *lambdakit.BatchOptions) {
			o.DeadLetters = dlq
			o.IsPermanent = func(err error) bool { return err.Error() == "try again" }
		})
		poison, flaky := lambdakittest.Message("poison 4"), lambdakittest.Message("flaky")
		resp, _ := batch(batchCtx(t), lambdakittest.Event(poison, flaky))
		wantFailed(t, resp, poison.MessageId)
		if got := dlq.ids(); !slices.Equal(got, []string{flaky.MessageId}) {
			t.Errorf("dead letters %q; want %q", got, flaky.MessageId)
		}
	})

	t.Run("FIFO: the group goes on after a message sent to the dead-letter queue", func(t *testing.T) {
		dlq := &deadLetters{}
		var c calls
		h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			c.add(msg.Body)
			return failPoison.Handle(ctx, msg)
		})
		batch, _ := newBatch(h, func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq })
		a1, a2, a3 := lambdakittest.Message("a1", lambdakittest.InGroup("A")), lambdakittest.Message("poison a2", lambdakittest.InGroup("A")), lambdakittest.Message("a3", lambdakittest.InGroup("A"))
		resp, err := batch(batchCtx(t), lambdakittest.Event(a1, a2, a3))
		if err != nil {
			t.Fatalf("batch error %v; want none", err)
		}
		wantFailed(t, resp)
		if got, want := c.list(), []string{"a1", "poison a2", "a3"}; !slices.Equal(got, want) {
			t.Errorf("handled %q; want %q, in order", got, want)
		}
	})

	t.Run("FIFO: a failed send holds the rest of the group back", func(t *testing.T) {
		dlq := &deadLetters{fail: errors.New("down")}
		batch, _ := newBatch(failPoison, func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq })
		a1, a2 := lambdakittest.Message("poison a1", lambdakittest.InGroup("A")), lambdakittest.Message("a2", lambdakittest.InGroup("A"))
		resp, _ := batch(batchCtx(t), lambdakittest.Event(a1, a2))
		wantFailed(t, resp, a1.MessageId, a2.MessageId)
	})
}

// The idempotency middleware releases the lock after a permanent failure,
// as after any other, and leaves the error permanent.
func TestIdempotentReleasesAfterPermanentFailure(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	dlq := &deadLetters{}
	runs := 0
	h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		runs++
		if runs == 1 {
			return nil, lambdakit.Permanent(errBadFormat)
		}
		return []byte("done"), nil
	})
	idem := lambdakit.Idempotent(store, lambdakit.KeyFromField("id"))(h)
	var seen error
	spy := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		out, err := idem.Handle(ctx, msg)
		seen = err
		return out, err
	})
	batch, _ := newBatch(spy, func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq })
	m := lambdakittest.Message(`{"id":"k1"}`)
	resp, err := batch(batchCtx(t), lambdakittest.Event(m))
	if err != nil {
		t.Fatalf("batch error %v; want none", err)
	}
	wantFailed(t, resp)
	if !lambdakit.IsPermanent(seen) {
		t.Errorf("the middleware returned %v; want the permanent error", seen)
	}
	if n := len(store.Records()); n != 0 {
		t.Errorf("store holds %d records after the permanent failure; want 0 (released)", n)
	}
	// A redrive of the same message runs it at once.
	resp, err = batch(batchCtx(t), lambdakittest.Event(lambdakittest.Redelivery(m)))
	if err != nil || len(resp.BatchItemFailures) != 0 || runs != 2 {
		t.Errorf("redriven message: error %v, failures %v, %d runs; want it to run and succeed", err, resp.BatchItemFailures, runs)
	}
}

// A message that waited for an earlier one with its key in the container
// did not run: the earlier one's permanent failure is not its own, so it
// must not follow it into the dead-letter queue unrun. It runs on its own
// once the earlier one has failed, and only its own failure counts: here
// its own run fails permanently too, so it goes there after running.
func TestWaiterOfAPermanentFailureIsNotPermanent(t *testing.T) {
	// In a bubble, synctest.Wait tells when the second message is
	// waiting for the first.
	synctest.Test(t, func(t *testing.T) {
		store := &lambdakittest.MemoryStore{}
		dlq := &deadLetters{}
		release := make(chan struct{})
		var runs atomic.Int32
		h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			runs.Add(1)
			<-release
			return nil, lambdakit.Permanent(errBadFormat)
		})
		idem := lambdakit.Idempotent(store, lambdakit.KeyFromField("id"), func(o *lambdakit.Options) { o.DisableValidation = true })(h)
		batch, _ := newBatch(idem, func(o *lambdakit.BatchOptions) { o.DeadLetters = dlq })
		first, second := lambdakittest.Message(`{"id":"k2","n":1}`), lambdakittest.Message(`{"id":"k2","n":2}`)
		var firstResp, secondResp events.SQSEventResponse
		var firstErr error
		var wg sync.WaitGroup
		wg.Go(func() { firstResp, firstErr = batch(batchCtx(t), lambdakittest.Event(first)) })
		synctest.Wait() // the first runs its handler
		wg.Go(func() { secondResp, _ = batch(batchCtx(t), lambdakittest.Event(second)) })
		synctest.Wait() // the second waits for the first
		close(release)
		wg.Wait()
		if firstErr != nil || len(firstResp.BatchItemFailures) != 0 {
			t.Errorf("first message: error %v, failures %v; want it sent to the dead-letter queue", firstErr, firstResp.BatchItemFailures)
		}
		wantFailed(t, secondResp)
		// Both are dead-lettered, each after its own run (runs below). In
		// either order: they are two invocations, and the second's run may
		// end before the first's batch sends its dead letter.
		got, want := dlq.ids(), []string{first.MessageId, second.MessageId}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("dead letters %q; want the first and the second", got)
		}
		if n := runs.Load(); n != 2 {
			t.Errorf("handler ran %d times; want 2 (the second ran on its own after waiting)", n)
		}
	})
}

// A message that waited in the container for an earlier one with its key
// is not sent along when that one fails permanently (it did not run: it runs on its own, and only its own failure counts), whatever
// decides what is permanent: the batch's own BatchOptions.IsPermanent as
// well as lambdakit.IsPermanent. The waiter must not carry the earlier
// error in a form a custom IsPermanent would call permanent, or it would
// follow it into the dead-letter queue and be reported succeeded, never run.
//
// A natural setting: IsPermanent counting lambdakit.ErrDecode (a body that
// does not decode never will), and a producer that sent a payment with a
// string amount, then the corrected payment with the same payment_id. The
// corrected payment must be charged, once, and stay out of the DLQ.
func TestWaiterFollowsCustomPermanentFailureIntoDLQ(t *testing.T) {
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
		// The fixed payment did not run while it waited: it runs on its
		// own once the bad one has failed, and is charged, once, instead
		// of following the bad one into the DLQ.
		wantFailed(t, fixedResp)
		if n := fx.Count("pay-9"); n != 1 {
			t.Errorf("payment charged %d times; want 1", n)
		}
	})
}

// BatchOptions.IsPermanent is the function's own code, like a handler or a
// dead-letter sender, and a panic in it fails only its record, as a
// handler's or a sender's does (a panicking IsPermanent fails its record like any error). An unrecovered one would kill the whole process:
// an IsPermanent that dereferences a nil *HTTPError for an error of another
// kind would crash the function on every batch holding such a record, and
// every record of those batches would come back (on a FIFO queue, until
// maxReceiveCount moved them all to the dead-letter queue).
//
// The batch runs in a child process, so that a panic would end only that.
func TestPanickingIsPermanentDoesNotCrashTheProcess(t *testing.T) {
	if os.Getenv("LAMBDAKIT_TEST_ISPERMANENT_CHILD") == "1" {
		dlq := &deadLetters{}
		batch, _ := newBatch(failPoison, func(o *lambdakit.BatchOptions) {
			o.DeadLetters = dlq
			o.IsPermanent = func(err error) bool {
				var he *statusError
				errors.As(err, &he)
				return he.Code == 400 // nil for other errors: panics
			}
		})
		ok, flaky := lambdakittest.Message("fine"), lambdakittest.Message("flaky")
		resp, _ := batch(batchCtx(t), lambdakittest.Event(ok, flaky))
		wantFailed(t, resp, flaky.MessageId)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPanickingIsPermanentDoesNotCrashTheProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LAMBDAKIT_TEST_ISPERMANENT_CHILD=1")
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

// statusError is an error type a function might mark permanent by its
// status code.
type statusError struct{ Code int }

func (e *statusError) Error() string { return "HTTP error" }

// A dead-letter send in flight when the deadline guard cancels the records
// is not cut short: it runs until the batch answers. Cut short, a send SQS
// had already taken failed its record, and the message came back to be
// dead-lettered a second time (before the fix: reported failed, and in the
// dead-letter queue).
func TestDeadLetterSendInFlightAtTheGuardFinishes(t *testing.T) {
	recordDone := make(chan (<-chan struct{}), 1)
	h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		recordDone <- ctx.Done()
		return nil, lambdakit.Permanent(errBadFormat)
	})
	dlq := &landingDLQ{guard: recordDone}
	batch, _ := newBatch(h, func(o *lambdakit.BatchOptions) {
		o.DeadLetters, o.AllowAllFailed = dlq, true
		o.DeadlineMargin = time.Second // the guard cancels at 1 s, the batch answers at 1.5 s
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m := lambdakittest.Message(`poison`)
	resp, err := batch(ctx, lambdakittest.Event(m))
	if err != nil {
		t.Fatalf("batch error %v", err)
	}
	if got := dlq.landed.Load(); got != 1 {
		t.Fatalf("%d copies landed in the dead-letter queue; want 1", got)
	}
	wantFailed(t, resp) // in the dead-letter queue: not to come back
}

// landingDLQ is a send that SQS takes at once and answers only after the
// record's context has ended (the deadline guard): as the SDK does, it
// reports its context's error if that context ended before the answer.
type landingDLQ struct {
	guard  chan (<-chan struct{})
	landed atomic.Int32
}

func (d *landingDLQ) SendDeadLetter(ctx context.Context, msg *events.SQSMessage, reason error) error {
	d.landed.Add(1)
	select {
	case <-<-d.guard:
	case <-time.After(5 * time.Second):
		return errors.New("the guard never fired")
	}
	return ctx.Err()
}

// A dead-letter sender or an IsPermanent that calls runtime.Goexit (a
// test's t.FailNow) fails its record with ErrHandlerExited, not with
// ErrStillRunning as if the deadline had come, and the message comes back.
func TestGoexitInTheDeadLetterPathFailsTheRecord(t *testing.T) {
	for name, opt := range map[string]func(*lambdakit.BatchOptions){
		"DeadLetters": func(o *lambdakit.BatchOptions) { o.DeadLetters = goexitSender{} },
		"IsPermanent": func(o *lambdakit.BatchOptions) {
			o.DeadLetters = &deadLetters{}
			o.IsPermanent = func(error) bool { runtime.Goexit(); return false }
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
				return nil, lambdakit.Permanent(errBadFormat)
			})
			batch, log := newBatch(h, opt, func(o *lambdakit.BatchOptions) { o.AllowAllFailed = true })
			m := lambdakittest.Message(`poison`)
			resp, err := batch(batchCtx(t), lambdakittest.Event(m))
			if err != nil {
				t.Fatal(err)
			}
			wantFailed(t, resp, m.MessageId)
			if got := log.byMessageID(t)[m.MessageId]["reasonCode"]; got == string(lambdakit.ReasonOf(lambdakit.ErrStillRunning)) {
				t.Errorf("reasonCode %v; want the Goexit named, not the deadline", got)
			}
			if reason := fmt.Sprint(log.byMessageID(t)[m.MessageId]["reason"]); !strings.Contains(reason, "runtime.Goexit") {
				t.Errorf("reason %q; want it to say Goexit", reason)
			}
		})
	}
}

type goexitSender struct{}

func (goexitSender) SendDeadLetter(context.Context, *events.SQSMessage, error) error {
	runtime.Goexit()
	return nil
}
