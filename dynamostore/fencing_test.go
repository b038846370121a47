package dynamostore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// Fencing: an owner whose lease ended while it was still working, and whose
// record another owner then took over and completed, must change nothing.
// Two "containers" share one table through two clients, each with its own
// middleware (its own cache and flights) and its own batch adapter. The
// first container's client goes through a proxy, which counts what really
// reached the table.

// container is one warm Lambda container: a batch handler and what it
// logged and saw.
type container struct {
	batch lambdakit.BatchFunc
	logs  *lambdakittest.LogBuffer
	proxy *testenv.Proxy // nil: straight to moto

	mu   sync.Mutex
	errs map[string]error // what the idempotent handler returned, by message ID
	done chan string      // message IDs, as the idempotent handler returns
}

// newContainer builds a container over f's table whose handler is h and
// whose clock runs skew ahead of the real one.
func newContainer(t *testing.T, f *fixture, h lambdakit.Handler, skew time.Duration, proxied bool, batchOpts ...func(*lambdakit.BatchOptions)) *container {
	t.Helper()
	c := &container{logs: &lambdakittest.LogBuffer{}, errs: map[string]error{}, done: make(chan string, 16)}
	db := local(t)
	client := db.Client(func(o *dynamodb.Options) {
		if proxied {
			c.proxy = testenv.NewProxy(t, db.URL)
			o.BaseEndpoint = aws.String(c.proxy.URL)
		}
	})
	idem := lambdakit.Idempotent(newStore(t, client, f.table), lambdakit.KeyFromField("id"), func(o *lambdakit.Options) {
		o.Prefix = "fencing"
		o.CacheSize = 10
		o.Logger = c.logs.Logger()
		o.Now = func() time.Time { return time.Now().Add(skew) }
	})
	// watch sits between the batch and the middleware: it sees what the
	// middleware returned, even after the batch has answered.
	watch := lambdakit.Middleware(func(next lambdakit.Handler) lambdakit.Handler {
		return lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			out, err := next.Handle(ctx, msg)
			c.mu.Lock()
			c.errs[msg.MessageId] = err
			c.mu.Unlock()
			c.done <- msg.MessageId
			return out, err
		})
	})
	opts := append([]func(*lambdakit.BatchOptions){func(o *lambdakit.BatchOptions) { o.Logger = c.logs.Logger() }}, batchOpts...)
	c.batch = lambdakit.Batch(lambdakit.Chain(h, watch, idem), opts...)
	return c
}

func (c *container) err(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.errs[id]
}

// waitDone waits until the middleware has returned for n messages.
func (c *container) waitDone(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for range n {
		select {
		case <-c.done:
		case <-timeout:
			t.Fatal("the idempotent handler did not return within 20 s")
		}
	}
}

// linesAbout returns the log lines about message id.
func (c *container) linesAbout(t *testing.T, id string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range c.logs.Lines(t) {
		if l["messageId"] == id {
			out = append(out, l)
		}
	}
	return out
}

// stubborn is a handler that ignores cancellation: it signals started,
// then works until proceed is closed (20 s at most), and returns result or,
// for a body with "fail": true, an error.
func stubborn(started chan<- string, proceed <-chan struct{}, result string) lambdakit.Handler {
	return lambdakit.TypedResult(func(ctx context.Context, in struct {
		ID   string `json:"id"`
		Fail bool   `json:"fail"`
	}) (string, error) {
		started <- in.ID
		select {
		case <-proceed:
		case <-time.After(20 * time.Second):
		}
		if in.Fail {
			return "", errors.New("the first owner failed late")
		}
		return result, nil
	})
}

// takeOver runs both messages through a second container, which completes
// them, and checks that the table holds its results.
func takeOver(t *testing.T, f *fixture, skew time.Duration, msgs ...events.SQSMessage) {
	t.Helper()
	b := newContainer(t, f, lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
		return []byte(`"B"`), nil
	}), skew, false)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var redelivered []events.SQSMessage
	for _, m := range msgs {
		redelivered = append(redelivered, lambdakittest.Redelivery(m))
	}
	resp, err := b.batch(ctx, lambdakittest.Event(redelivered...))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("second owner: got %+v, %v; want every record taken over and completed; logs:\n%s", resp, err, b.logs)
	}
}

// checkTakenOver checks that the record of key is the second owner's:
// completed, with its result.
func checkTakenOver(t *testing.T, f *fixture, key string) {
	t.Helper()
	item := f.record(t, "fencing#"+sha256Hex(key))
	if item == nil {
		t.Fatalf("record of %s: gone; want the second owner's completed record", key)
	}
	if s, d := str(t, item, "status"), str(t, item, "data"); s != "COMPLETED" || d != `"B"` {
		t.Errorf("record of %s: status %s, data %s; want COMPLETED with the second owner's result \"B\"", key, s, d)
	}
}

// The store's fence: the first owner still believes it holds the lease
// (its clock says so) and sends its completion and its release; the table
// refuses both, because the lease on the record is now the second owner's.
// The second owner's clock runs ahead, so it sees the first lease end while
// the first owner is working, as happens when clocks disagree or a request
// is delayed in flight.
func TestFencingTheTableRefusesAnOwnerThatWasTakenOver(t *testing.T) {
	f := setup(t)
	started, proceed := make(chan string, 2), make(chan struct{})
	a := newContainer(t, f, stubborn(started, proceed, "A"), 0, true)
	ok := lambdakittest.Message(`{"id":"k-complete"}`)
	bad := lambdakittest.Message(`{"id":"k-release","fail":true}`)

	// The first owner: a real deadline 10 s away, which is its lease.
	type answer struct {
		resp events.SQSEventResponse
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := a.batch(ctx, lambdakittest.Event(ok, bad))
		answered <- answer{resp, err}
	}()
	for range 2 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the first owner's handlers did not start")
		}
	}

	// The second owner, whose clock is 11 s ahead, finds both leases
	// over and takes both records over.
	takeOver(t, f, 11*time.Second, ok, bad)
	close(proceed)
	var got answer
	select {
	case got = <-answered:
	case <-time.After(20 * time.Second):
		t.Fatal("the first owner's batch did not answer")
	}

	t.Run("both records fail with a lost lease", func(t *testing.T) {
		if len(got.resp.BatchItemFailures) != 2 || !errors.Is(got.err, lambdakit.ErrAllFailed) {
			t.Fatalf("got %+v, %v; want both records reported failed", got.resp, got.err)
		}
		for id, op := range map[string]string{ok.MessageId: "complete", bad.MessageId: "release"} {
			err := a.err(id)
			lost := (*lambdakit.LeaseLostError)(nil)
			if !errors.As(err, &lost) || !errors.Is(err, lambdakit.ErrLeaseLost) || lost.Op != op {
				t.Errorf("%s: got %v; want a *LeaseLostError on %s", op, err, op)
			}
		}
		if err := a.err(bad.MessageId); err == nil || !errors.Is(err, lambdakit.ErrLeaseLost) ||
			!strings.Contains(err.Error(), "the first owner failed late") {
			t.Errorf("release: got %v; want the handler's error and the lost lease", err)
		}
	})
	t.Run("the table refused a completion and a release it received", func(t *testing.T) {
		if n, m := a.proxy.Count("UpdateItem"), a.proxy.Count("DeleteItem"); n != 1 || m != 1 {
			t.Errorf("got %d UpdateItem and %d DeleteItem requests from the first owner; want 1 and 1, both refused", n, m)
		}
		checkTakenOver(t, f, "k-complete")
		checkTakenOver(t, f, "k-release")
	})
	t.Run("each failure is logged once, with the LeaseLost metric", func(t *testing.T) {
		for _, id := range []string{ok.MessageId, bad.MessageId} {
			lines := a.linesAbout(t, id)
			if len(lines) != 1 || lines[0]["msg"] != "message failed" || lines[0]["LeaseLost"] != float64(1) ||
				lines[0]["prefix"] != "fencing" || lines[0]["_aws"] == nil {
				t.Errorf("got lines %v; want one \"message failed\" line with LeaseLost 1 and its EMF block", lines)
			}
		}
		if all := a.logs.Lines(t); len(all) != 2 {
			t.Errorf("got %d log lines in all; want 2: %s", len(all), a.logs)
		}
	})
	t.Run("a third container replays the second owner's result", func(t *testing.T) {
		c := newContainer(t, f, lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
			t.Error("the handler ran for a completed record")
			return nil, nil
		}), 0, false)
		again := lambdakittest.Redelivery(ok)
		resp, err := c.batch(t.Context(), lambdakittest.Event(again))
		c.waitDone(t, 1)
		if err != nil || len(resp.BatchItemFailures) != 0 || c.err(again.MessageId) != nil {
			t.Errorf("got %+v, %v, %v; want a duplicate", resp, err, c.err(again.MessageId))
		}
	})
}

// The owner's own fence: with clocks that agree, an owner whose handler
// ignores cancellation runs past its lease (its invocation deadline). The
// batch answers before the deadline with the record still running; after
// the lease another owner takes over and completes; when the first handler
// finally returns, its middleware sends nothing, because its lease has
// ended by its own clock.
func TestFencingAnOwnerPastItsLeaseSendsNothing(t *testing.T) {
	f := setup(t)
	started, proceed := make(chan string, 1), make(chan struct{})
	a := newContainer(t, f, stubborn(started, proceed, "A"), 0, true, func(o *lambdakit.BatchOptions) {
		o.DeadlineMargin = 400 * time.Millisecond
	})
	msg := lambdakittest.Message(`{"id":"k-late"}`)
	deadline := time.Now().Add(2 * time.Second)
	ctx, cancel := context.WithDeadline(t.Context(), deadline)
	defer cancel()
	resp, err := a.batch(ctx, lambdakittest.Event(msg))
	if len(resp.BatchItemFailures) != 1 || !errors.Is(err, lambdakit.ErrAllFailed) {
		t.Fatalf("got %+v, %v; want the record reported failed at the deadline", resp, err)
	}
	select {
	case <-started:
	default:
		t.Fatal("the handler never started")
	}

	// Once the lease has ended (by the same clock), a second owner takes
	// over; then the first handler returns.
	time.Sleep(time.Until(deadline) + 50*time.Millisecond)
	takeOver(t, f, 0, msg)
	close(proceed)
	a.waitDone(t, 1)

	if err := a.err(msg.MessageId); err == nil || errors.Is(err, lambdakit.ErrLeaseLost) {
		t.Errorf("late outcome: got %v; want an error of the owner's own expired lease, not a refusal from the table", err)
	}
	if n, m := a.proxy.Count("UpdateItem"), a.proxy.Count("DeleteItem"); n != 0 || m != 0 {
		t.Errorf("got %d UpdateItem and %d DeleteItem requests from the first owner; want none after its lease", n, m)
	}
	checkTakenOver(t, f, "k-late")
	lines := a.linesAbout(t, msg.MessageId)
	if len(lines) != 1 || lines[0]["reason"] != lambdakit.ErrStillRunning.Error() {
		t.Errorf("got lines %v; want one, \"%v\"", lines, lambdakit.ErrStillRunning)
	}
}
