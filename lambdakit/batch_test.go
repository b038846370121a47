package lambdakit_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

func ids(msgs ...events.SQSMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.MessageId
	}
	return out
}

// inFlight measures how many handlers run at once.
type inFlight struct {
	cur, max atomic.Int32
}

func (f *inFlight) enter() {
	n := f.cur.Add(1)
	for {
		m := f.max.Load()
		if n <= m || f.max.CompareAndSwap(m, n) {
			return
		}
	}
}

func (f *inFlight) leave() { f.cur.Add(-1) }

// failBodies returns a handler that records its calls and fails the records
// whose body starts with "fail".
func failBodies(c *calls) lambdakit.Handler {
	return lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		c.add(msg.Body)
		if strings.HasPrefix(msg.Body, "fail") {
			return nil, errors.New("handler refused " + msg.Body)
		}
		return nil, nil
	})
}

func TestBatchPartialFailure(t *testing.T) {
	c := &calls{}
	fn, log := newBatch(failBodies(c))
	msgs := []events.SQSMessage{
		lambdakittest.Message("ok-1"),
		lambdakittest.Message("fail-2"),
		lambdakittest.Message("ok-3"),
		lambdakittest.Message("fail-4"),
		lambdakittest.Message("ok-5"),
	}
	resp, err := fn(batchCtx(t), lambdakittest.Event(msgs...))

	t.Run("reports exactly the failed records", func(t *testing.T) {
		if err != nil {
			t.Errorf("got error %v; want nil", err)
		}
		wantFailed(t, resp, msgs[1].MessageId, msgs[3].MessageId)
	})
	t.Run("runs the handler once for every record", func(t *testing.T) {
		got := c.list()
		slices.Sort(got)
		if want := []string{"fail-2", "fail-4", "ok-1", "ok-3", "ok-5"}; !slices.Equal(got, want) {
			t.Errorf("got calls %q; want %q", got, want)
		}
	})
	t.Run("logs one JSON line per failed record", func(t *testing.T) {
		lines := log.failures(t)
		if len(lines) != 2 {
			t.Fatalf("got %d log lines; want 2", len(lines))
		}
		byID := log.byMessageID(t)
		for _, m := range []events.SQSMessage{msgs[1], msgs[3]} {
			line, ok := byID[m.MessageId]
			if !ok {
				t.Errorf("message %s: got no log line; want one", m.MessageId)
				continue
			}
			if got, want := line["reason"], "handler refused "+m.Body; got != want {
				t.Errorf("message %s: got reason %q; want %q", m.MessageId, got, want)
			}
			if got := line["level"]; got != "ERROR" {
				t.Errorf("message %s: got level %v; want ERROR", m.MessageId, got)
			}
		}
	})
}

func TestBatchSuccess(t *testing.T) {
	t.Run("all records succeed: no failures, no failure line", func(t *testing.T) {
		c := &calls{}
		fn, log := newBatch(failBodies(c))
		resp, err := fn(batchCtx(t), lambdakittest.Event(
			lambdakittest.Message("ok-1"), lambdakittest.Message("ok-2"), lambdakittest.Message("ok-3")))
		if err != nil {
			t.Errorf("got error %v; want nil", err)
		}
		wantFailed(t, resp)
		if resp.BatchItemFailures == nil {
			// Lambda reads a null list as success too, but an empty one
			// is what the docs show; either is fine, so only note it.
			t.Log("batchItemFailures is null, not []")
		}
		if got := len(c.list()); got != 3 {
			t.Errorf("got %d calls; want 3", got)
		}
		if lines := log.failures(t); len(lines) != 0 {
			t.Errorf("got log lines %v; want none", lines)
		}
	})
	t.Run("empty event: empty response and no call", func(t *testing.T) {
		for _, event := range []events.SQSEvent{{}, lambdakittest.Event()} {
			c := &calls{}
			fn, log := newBatch(failBodies(c))
			resp, err := fn(batchCtx(t), event)
			if err != nil {
				t.Errorf("got error %v; want nil", err)
			}
			wantFailed(t, resp)
			if got := c.list(); len(got) != 0 {
				t.Errorf("got calls %q; want none", got)
			}
			if lines := log.failures(t); len(lines) != 0 {
				t.Errorf("got log lines %v; want none", lines)
			}
		}
	})
}

func TestBatchPanic(t *testing.T) {
	boom := errors.New("boom")
	var ran atomic.Int32
	h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		ran.Add(1)
		if msg.Body == "panic" {
			panic(fmt.Errorf("charging: %w", boom))
		}
		return nil, nil
	})
	fn, log := newBatch(h)
	msgs := []events.SQSMessage{
		lambdakittest.Message("ok-1"), lambdakittest.Message("panic"), lambdakittest.Message("ok-3"),
	}
	resp, err := fn(batchCtx(t), lambdakittest.Event(msgs...))

	t.Run("only the panicking record fails", func(t *testing.T) {
		if err != nil {
			t.Errorf("got error %v; want nil", err)
		}
		wantFailed(t, resp, msgs[1].MessageId)
		if got := ran.Load(); got != 3 {
			t.Errorf("got %d calls; want 3", got)
		}
	})
	t.Run("log line carries the panic value and a stack", func(t *testing.T) {
		lines := log.failures(t)
		if len(lines) != 1 {
			t.Fatalf("got %d log lines; want 1", len(lines))
		}
		line := log.byMessageID(t)[msgs[1].MessageId]
		if reason, _ := line["reason"].(string); !strings.Contains(reason, "panicked") || !strings.Contains(reason, "charging: boom") {
			t.Errorf("got reason %q; want it to say the handler panicked with charging: boom", reason)
		}
		stack, _ := line["stack"].(string)
		if !strings.Contains(stack, "batch_test.go") || !strings.Contains(stack, "panic") {
			t.Errorf("got stack %q; want the panicking frame in batch_test.go", stack)
		}
	})
	t.Run("a single panicking record fails the whole batch", func(t *testing.T) {
		fn, _ := newBatch(h)
		resp, err := fn(batchCtx(t), lambdakittest.Event(lambdakittest.Message("panic")))
		if !errors.Is(err, lambdakit.ErrAllFailed) {
			t.Errorf("got error %v; want ErrAllFailed", err)
		}
		if len(resp.BatchItemFailures) != 1 {
			t.Errorf("got %d failures; want 1", len(resp.BatchItemFailures))
		}
	})
}

func TestPanicError(t *testing.T) {
	boom := errors.New("boom")
	t.Run("found with errors.As and unwraps to an error value", func(t *testing.T) {
		err := fmt.Errorf("record m-1: %w", &lambdakit.PanicError{Value: boom, Stack: []byte("goroutine 1")})
		var pe *lambdakit.PanicError
		if ok := errors.As(err, &pe); !ok || pe.Value != boom {
			t.Fatalf("got %v; want the PanicError with value boom", pe)
		}
		if !errors.Is(err, boom) {
			t.Errorf("errors.Is(%v, boom) = false; want true", err)
		}
		if got := pe.Error(); !strings.Contains(got, "panicked") || !strings.Contains(got, "boom") {
			t.Errorf("got %q; want the panic and its value", got)
		}
	})
	t.Run("non-error value unwraps to nil", func(t *testing.T) {
		pe := &lambdakit.PanicError{Value: "text"}
		if got := pe.Unwrap(); got != nil {
			t.Errorf("got %v; want nil", got)
		}
	})
}

func TestBatchAllFailed(t *testing.T) {
	msgs := []events.SQSMessage{lambdakittest.Message("fail-1"), lambdakittest.Message("fail-2")}

	t.Run("returns ErrAllFailed by default and still lists the records", func(t *testing.T) {
		fn, log := newBatch(failBodies(&calls{}))
		resp, err := fn(batchCtx(t), lambdakittest.Event(msgs...))
		if !errors.Is(err, lambdakit.ErrAllFailed) {
			t.Errorf("got error %v; want ErrAllFailed", err)
		}
		wantFailed(t, resp, ids(msgs...)...)
		if got := len(log.byMessageID(t)); got != 2 {
			t.Errorf("got %d records logged; want 2", got)
		}
	})
	t.Run("AllowAllFailed answers with no error", func(t *testing.T) {
		fn, _ := newBatch(failBodies(&calls{}), func(o *lambdakit.BatchOptions) { o.AllowAllFailed = true })
		resp, err := fn(batchCtx(t), lambdakittest.Event(msgs...))
		if err != nil {
			t.Errorf("got error %v; want nil", err)
		}
		wantFailed(t, resp, ids(msgs...)...)
	})
}

func TestBatchItemIdentifiers(t *testing.T) {
	t.Run("failed record without messageId fails the batch", func(t *testing.T) {
		noID := lambdakittest.Message("fail-no-id")
		noID.MessageId = ""
		other := lambdakittest.Message("fail-other")
		fn, log := newBatch(failBodies(&calls{}), func(o *lambdakit.BatchOptions) { o.AllowAllFailed = true })
		resp, err := fn(batchCtx(t), lambdakittest.Event(lambdakittest.Message("ok"), noID, other))
		if err == nil {
			t.Error("got nil error; want an error for the record without messageId")
		}
		for _, f := range resp.BatchItemFailures {
			if f.ItemIdentifier == "" {
				t.Errorf("got an empty itemIdentifier in %+v; want none", resp.BatchItemFailures)
			}
		}
		wantFailed(t, resp, other.MessageId)
		if lines := log.failures(t); len(lines) != 2 {
			t.Errorf("got %d log lines; want 2, one per failed record", len(lines))
		}
	})
	t.Run("successful record without messageId is fine", func(t *testing.T) {
		noID := lambdakittest.Message("ok-no-id")
		noID.MessageId = ""
		fn, _ := newBatch(failBodies(&calls{}))
		resp, err := fn(batchCtx(t), lambdakittest.Event(noID, lambdakittest.Message("ok")))
		if err != nil {
			t.Errorf("got error %v; want nil", err)
		}
		wantFailed(t, resp)
	})
	t.Run("duplicate messageIds are reported once", func(t *testing.T) {
		first := lambdakittest.Message("fail-first")
		second := lambdakittest.Message("fail-second")
		second.MessageId = first.MessageId
		c := &calls{}
		fn, log := newBatch(failBodies(c))
		resp, err := fn(batchCtx(t), lambdakittest.Event(first, lambdakittest.Message("ok"), second))
		if err != nil {
			t.Errorf("got error %v; want nil", err)
		}
		wantFailed(t, resp, first.MessageId)
		if got := len(c.list()); got != 3 {
			t.Errorf("got %d calls; want 3", got)
		}
		if lines := log.failures(t); len(lines) != 2 {
			t.Errorf("got %d log lines; want 2, one per failed record", len(lines))
		}
	})
	t.Run("duplicate messageIds all failing count as all failed", func(t *testing.T) {
		first := lambdakittest.Message("fail-first")
		second := lambdakittest.Message("fail-second")
		second.MessageId = first.MessageId
		fn, _ := newBatch(failBodies(&calls{}))
		resp, err := fn(batchCtx(t), lambdakittest.Event(first, second))
		if !errors.Is(err, lambdakit.ErrAllFailed) {
			t.Errorf("got error %v; want ErrAllFailed", err)
		}
		wantFailed(t, resp, first.MessageId)
	})
}

func TestBatchConcurrency(t *testing.T) {
	t.Run("standard queue runs at most Concurrency records at once", func(t *testing.T) {
		const n, limit = 12, 3
		ctx := batchCtx(t)
		fl := &inFlight{}
		arrived := make(chan struct{}, n)
		release := make(chan struct{}, n)
		h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			fl.enter()
			defer fl.leave()
			arrived <- struct{}{}
			select {
			case <-release:
				return nil, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		fn, _ := newBatch(h, func(o *lambdakit.BatchOptions) { o.Concurrency = limit })
		var msgs []events.SQSMessage
		for i := range n {
			msgs = append(msgs, lambdakittest.Message(fmt.Sprintf("r-%d", i)))
		}
		type result struct {
			resp events.SQSEventResponse
			err  error
		}
		done := make(chan result, 1)
		go func() {
			resp, err := fn(ctx, lambdakittest.Event(msgs...))
			done <- result{resp, err}
		}()

		arrive := func() {
			t.Helper()
			select {
			case <-arrived:
			case <-ctx.Done():
				t.Fatalf("got %d records in flight and no more arriving; want up to %d", fl.cur.Load(), limit)
			}
		}
		// Fill every slot before releasing anything, then release one
		// record for each that arrives, so that a broken limit would
		// have every chance to start more.
		for range limit {
			arrive()
		}
		for range n - limit {
			release <- struct{}{}
			arrive()
		}
		for range limit {
			release <- struct{}{}
		}
		var res result
		select {
		case res = <-done:
		case <-ctx.Done():
			t.Fatal("batch did not answer; want it to answer once every record was released")
		}
		if res.err != nil {
			t.Errorf("got error %v; want nil", res.err)
		}
		wantFailed(t, res.resp)
		if got := fl.max.Load(); got != limit {
			t.Errorf("got at most %d records in flight; want %d", got, limit)
		}
	})

	t.Run("default runs a batch of SQS's usual size at once", func(t *testing.T) {
		const n = 8
		ctx, cancel := context.WithTimeout(batchCtx(t), 10*time.Second)
		defer cancel()
		fl := &inFlight{}
		var count atomic.Int32
		all := make(chan struct{})
		h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			fl.enter()
			defer fl.leave()
			if count.Add(1) == n {
				close(all)
			}
			select {
			case <-all:
				return nil, nil
			case <-ctx.Done():
				return nil, fmt.Errorf("barrier: %d of %d records arrived: %w", count.Load(), n, ctx.Err())
			}
		})
		fn, log := newBatch(h)
		var msgs []events.SQSMessage
		for i := range n {
			msgs = append(msgs, lambdakittest.Message(fmt.Sprintf("r-%d", i)))
		}
		resp, err := fn(ctx, lambdakittest.Event(msgs...))
		if err != nil {
			t.Errorf("got error %v; want nil", err)
		}
		wantFailed(t, resp)
		if got := fl.max.Load(); got != n {
			t.Errorf("got at most %d records in flight; want %d; log: %v", got, n, log.Lines(t))
		}
	})

	t.Run("a batch of 10,000 runs at most DefaultConcurrency records at once", func(t *testing.T) {
		const n = 10_000
		ctx, cancel := context.WithTimeout(batchCtx(t), 60*time.Second)
		defer cancel()
		fl := &inFlight{}
		var ran atomic.Int32
		h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			fl.enter()
			defer fl.leave()
			ran.Add(1)
			time.Sleep(100 * time.Microsecond) // long enough for records to overlap
			return nil, nil
		})
		fn, _ := newBatch(h)
		msgs := make([]events.SQSMessage, n)
		for i := range msgs {
			msgs[i] = lambdakittest.Message(fmt.Sprintf("r-%d", i))
		}
		resp, err := fn(ctx, lambdakittest.Event(msgs...))
		if err != nil || len(resp.BatchItemFailures) != 0 || ran.Load() != n {
			t.Fatalf("got %d failures, %v, %d runs; want none failed and %d runs", len(resp.BatchItemFailures), err, ran.Load(), n)
		}
		if got := fl.max.Load(); got > lambdakit.DefaultConcurrency {
			t.Errorf("got %d records in flight; want at most %d", got, lambdakit.DefaultConcurrency)
		}
	})

	// In a synctest bubble, as the deadline tests are: time is simulated,
	// so the deadline is exact and the answer is not raced against the
	// machine's speed. Under the race detector, logging 10,000 failed
	// records takes about 250 ms of CPU; on a loaded machine that once
	// passed the real deadline, which says nothing of the batch.
	t.Run("a batch of 10,000 still answers before the deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const n = 10_000
			h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
				<-ctx.Done() // never finishes on its own
				return nil, ctx.Err()
			})
			fn, _ := newBatch(h)
			msgs := make([]events.SQSMessage, n)
			for i := range msgs {
				msgs[i] = lambdakittest.Message(fmt.Sprintf("r-%d", i))
			}
			deadline := time.Now().Add(2 * time.Second)
			ctx, cancel := context.WithDeadline(t.Context(), deadline)
			defer cancel()
			resp, err := fn(ctx, lambdakittest.Event(msgs...))
			if answered := time.Now(); !answered.Before(deadline) {
				t.Errorf("answered %v after the deadline; want before it", answered.Sub(deadline))
			}
			if len(resp.BatchItemFailures) != n || err == nil {
				t.Errorf("got %d failures, %v; want all %d reported failed and ErrAllFailed", len(resp.BatchItemFailures), err, n)
			}
		})
	})
}

// groupCalls records, per FIFO message group, the order handlers started.
type groupCalls struct {
	mu     sync.Mutex
	groups map[string][]string
}

func (g *groupCalls) add(msg *events.SQSMessage) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.groups == nil {
		g.groups = map[string][]string{}
	}
	group := msg.Attributes["MessageGroupId"]
	g.groups[group] = append(g.groups[group], msg.Body)
}

func (g *groupCalls) of(group string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.groups[group])
}

func TestBatchFIFO(t *testing.T) {
	inA, inB := lambdakittest.InGroup("A"), lambdakittest.InGroup("B")

	t.Run("records of a group run in order", func(t *testing.T) {
		g := &groupCalls{}
		h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			g.add(msg)
			return nil, nil
		})
		var msgs []events.SQSMessage
		var wantA, wantB []string
		for i := range 6 {
			a, b := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
			msgs = append(msgs, lambdakittest.Message(a, inA), lambdakittest.Message(b, inB))
			wantA, wantB = append(wantA, a), append(wantB, b)
		}
		fn, _ := newBatch(h)
		resp, err := fn(batchCtx(t), lambdakittest.Event(msgs...))
		if err != nil {
			t.Errorf("got error %v; want nil", err)
		}
		wantFailed(t, resp)
		if got := g.of("A"); !slices.Equal(got, wantA) {
			t.Errorf("group A: got order %q; want %q", got, wantA)
		}
		if got := g.of("B"); !slices.Equal(got, wantB) {
			t.Errorf("group B: got order %q; want %q", got, wantB)
		}
	})

	t.Run("failure skips the rest of its group only", func(t *testing.T) {
		g := &groupCalls{}
		h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			g.add(msg)
			if strings.HasPrefix(msg.Body, "fail") {
				return nil, errors.New("handler refused " + msg.Body)
			}
			return nil, nil
		})
		a1 := lambdakittest.Message("a1", inA)
		b1 := lambdakittest.Message("b1", inB)
		a2 := lambdakittest.Message("fail-a2", inA)
		b2 := lambdakittest.Message("b2", inB)
		a3 := lambdakittest.Message("a3", inA)
		a4 := lambdakittest.Message("a4", inA)
		b3 := lambdakittest.Message("b3", inB)
		fn, log := newBatch(h)
		resp, err := fn(batchCtx(t), lambdakittest.Event(a1, b1, a2, b2, a3, a4, b3))
		if err != nil {
			t.Errorf("got error %v; want nil", err)
		}
		wantFailed(t, resp, a2.MessageId, a3.MessageId, a4.MessageId)
		if got, want := g.of("A"), []string{"a1", "fail-a2"}; !slices.Equal(got, want) {
			t.Errorf("group A: got calls %q; want %q, none after the failure", got, want)
		}
		if got, want := g.of("B"), []string{"b1", "b2", "b3"}; !slices.Equal(got, want) {
			t.Errorf("group B: got calls %q; want %q", got, want)
		}
		if got, want := log.reason(t, a2.MessageId), "handler refused fail-a2"; got != want {
			t.Errorf("failed record: got reason %q; want %q", got, want)
		}
		for _, m := range []events.SQSMessage{a3, a4} {
			line := log.byMessageID(t)[m.MessageId]
			if got, want := line["reason"], lambdakit.ErrSkipped.Error(); got != want {
				t.Errorf("record %s after the failure: got reason %q; want %q", m.Body, got, want)
			}
			if got := line["messageGroupId"]; got != "A" {
				t.Errorf("record %s: got messageGroupId %v; want A", m.Body, got)
			}
		}
		if lines := log.failures(t); len(lines) != 3 {
			t.Errorf("got %d log lines; want 3", len(lines))
		}
	})

	t.Run("groups run concurrently", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(batchCtx(t), 10*time.Second)
		defer cancel()
		var count atomic.Int32
		both := make(chan struct{})
		h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			if !strings.HasSuffix(msg.Body, "1") {
				return nil, nil
			}
			if count.Add(1) == 2 {
				close(both)
			}
			select {
			case <-both:
				return nil, nil
			case <-ctx.Done():
				return nil, fmt.Errorf("barrier: only group %s arrived: %w", msg.Attributes["MessageGroupId"], ctx.Err())
			}
		})
		fn, log := newBatch(h)
		resp, err := fn(ctx, lambdakittest.Event(
			lambdakittest.Message("a1", inA), lambdakittest.Message("a2", inA),
			lambdakittest.Message("b1", inB), lambdakittest.Message("b2", inB)))
		if err != nil {
			t.Errorf("got error %v; want nil", err)
		}
		wantFailed(t, resp)
		if lines := log.failures(t); len(lines) != 0 {
			t.Errorf("got log lines %v; want none", lines)
		}
	})

	t.Run("Concurrency bounds the groups in flight", func(t *testing.T) {
		fl := &inFlight{}
		h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			fl.enter()
			defer fl.leave()
			return nil, nil
		})
		var msgs []events.SQSMessage
		for i := range 4 {
			for _, grp := range []string{"A", "B", "C", "D"} {
				msgs = append(msgs, lambdakittest.Message(fmt.Sprintf("%s%d", grp, i), lambdakittest.InGroup(grp)))
			}
		}
		fn, _ := newBatch(h, func(o *lambdakit.BatchOptions) { o.Concurrency = 1 })
		resp, err := fn(batchCtx(t), lambdakittest.Event(msgs...))
		if err != nil {
			t.Errorf("got error %v; want nil", err)
		}
		wantFailed(t, resp)
		if got := fl.max.Load(); got != 1 {
			t.Errorf("got at most %d records in flight; want 1", got)
		}
	})
}

func TestBatchFIFOStopOnFirstFailure(t *testing.T) {
	c := &calls{}
	fl := &inFlight{}
	h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		fl.enter()
		defer fl.leave()
		return failBodies(c).Handle(ctx, msg)
	})
	a1 := lambdakittest.Message("a1", lambdakittest.InGroup("A"))
	b1 := lambdakittest.Message("b1", lambdakittest.InGroup("B"))
	a2 := lambdakittest.Message("fail-a2", lambdakittest.InGroup("A"))
	b2 := lambdakittest.Message("b2", lambdakittest.InGroup("B"))
	c1 := lambdakittest.Message("c1", lambdakittest.InGroup("C"))
	a3 := lambdakittest.Message("a3", lambdakittest.InGroup("A"))
	fn, log := newBatch(h, func(o *lambdakit.BatchOptions) { o.FIFOStopOnFirstFailure = true })
	resp, err := fn(batchCtx(t), lambdakittest.Event(a1, b1, a2, b2, c1, a3))

	t.Run("reports the failure and every later record", func(t *testing.T) {
		if err != nil {
			t.Errorf("got error %v; want nil", err)
		}
		wantFailed(t, resp, a2.MessageId, b2.MessageId, c1.MessageId, a3.MessageId)
	})
	t.Run("runs records one at a time in batch order, none after the failure", func(t *testing.T) {
		if got, want := c.list(), []string{"a1", "b1", "fail-a2"}; !slices.Equal(got, want) {
			t.Errorf("got calls %q; want %q", got, want)
		}
		if got := fl.max.Load(); got != 1 {
			t.Errorf("got at most %d records in flight; want 1", got)
		}
	})
	t.Run("logs later records as skipped", func(t *testing.T) {
		for _, m := range []events.SQSMessage{b2, c1, a3} {
			if got, want := log.reason(t, m.MessageId), lambdakit.ErrSkipped.Error(); got != want {
				t.Errorf("record %s: got reason %q; want %q", m.Body, got, want)
			}
		}
		if lines := log.failures(t); len(lines) != 4 {
			t.Errorf("got %d log lines; want 4", len(lines))
		}
	})
}

// The deadline tests run in a synctest bubble: time is simulated, so the
// deadline is exact and the tests neither wait nor depend on the machine's
// speed. A record that waits for a deadline that never comes would make the
// bubble report a deadlock instead of hanging.
func TestBatchDeadlineGuard(t *testing.T) {
	t.Run("cancels the running record and reports the rest not started", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := &calls{}
			h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
				c.add(msg.Body)
				if msg.Body == "slow" {
					<-ctx.Done()
					// Not wrapping ctx.Err(): the batch must say why.
					return nil, errors.New("charging: gave up")
				}
				return nil, nil
			})
			fn, log := newBatch(h, func(o *lambdakit.BatchOptions) {
				o.Concurrency = 1
				o.DeadlineMargin = 200 * time.Millisecond
			})
			quick := lambdakittest.Message("quick")
			slow := lambdakittest.Message("slow")
			late1 := lambdakittest.Message("late-1")
			late2 := lambdakittest.Message("late-2")
			deadline := time.Now().Add(600 * time.Millisecond)
			ctx, cancel := context.WithDeadline(t.Context(), deadline)
			defer cancel()

			resp, err := fn(ctx, lambdakittest.Event(quick, slow, late1, late2))
			if now := time.Now(); !now.Before(deadline) {
				t.Errorf("answered at deadline%+v; want before the deadline", now.Sub(deadline))
			}
			if err != nil {
				t.Errorf("got error %v; want nil (one record succeeded)", err)
			}
			wantFailed(t, resp, slow.MessageId, late1.MessageId, late2.MessageId)
			if got, want := c.list(), []string{"quick", "slow"}; !slices.Equal(got, want) {
				t.Errorf("got calls %q; want %q", got, want)
			}
			if got := log.reason(t, slow.MessageId); !strings.Contains(got, "cancel") || !strings.Contains(got, "charging: gave up") {
				t.Errorf("slow record: got reason %q; want the handler's error and that it was cancelled", got)
			}
			for _, m := range []events.SQSMessage{late1, late2} {
				if got, want := log.reason(t, m.MessageId), lambdakit.ErrNotStarted.Error(); got != want {
					t.Errorf("record %s: got reason %q; want %q", m.Body, got, want)
				}
			}
			if lines := log.failures(t); len(lines) != 3 {
				t.Errorf("got %d log lines; want 3", len(lines))
			}
		})
	})

	t.Run("handler ignoring cancellation is reported still running", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			release := make(chan struct{})
			var once sync.Once
			unblock := func() { once.Do(func() { close(release) }) }
			t.Cleanup(unblock)
			var stuckReturned atomic.Bool
			c := &calls{}
			h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
				c.add(msg.Body)
				if msg.Body == "stuck" {
					<-release // ignores ctx
					stuckReturned.Store(true)
					return nil, nil // a late success must not undo the failure
				}
				return nil, nil
			})
			fn, log := newBatch(h, func(o *lambdakit.BatchOptions) {
				o.Concurrency = 1
				o.DeadlineMargin = 200 * time.Millisecond
			})
			quick := lambdakittest.Message("quick")
			stuck := lambdakittest.Message("stuck")
			late := lambdakittest.Message("late")
			deadline := time.Now().Add(600 * time.Millisecond)
			ctx, cancel := context.WithDeadline(t.Context(), deadline)
			defer cancel()

			resp, err := fn(ctx, lambdakittest.Event(quick, stuck, late))
			if now := time.Now(); !now.Before(deadline) {
				t.Errorf("answered at deadline%+v; want before the deadline", now.Sub(deadline))
			}
			if err != nil {
				t.Errorf("got error %v; want nil (one record succeeded)", err)
			}
			wantFailed(t, resp, stuck.MessageId, late.MessageId)
			if got, want := log.reason(t, stuck.MessageId), lambdakit.ErrStillRunning.Error(); got != want {
				t.Errorf("stuck record: got reason %q; want %q", got, want)
			}
			if got, want := log.reason(t, late.MessageId), lambdakit.ErrNotStarted.Error(); got != want {
				t.Errorf("late record: got reason %q; want %q", got, want)
			}
			linesAtAnswer := len(log.failures(t))
			if stuckReturned.Load() {
				t.Fatal("stuck handler returned before release; want it blocked")
			}

			// Let the stuck handler finish after the answer: nothing may
			// change (and -race checks that nothing is written unguarded).
			unblock()
			synctest.Wait()
			if !stuckReturned.Load() {
				t.Error("stuck handler still blocked after release; want it returned")
			}
			if got := len(log.failures(t)); got != linesAtAnswer {
				t.Errorf("got %d log lines after the late result; want %d as at the answer", got, linesAtAnswer)
			}
			if got, want := c.list(), []string{"quick", "stuck"}; !slices.Equal(got, want) {
				t.Errorf("got calls %q; want %q", got, want)
			}
		})
	})

	t.Run("margin is never more than half the time left", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := &calls{}
			fn, log := newBatch(failBodies(c), func(o *lambdakit.BatchOptions) { o.Concurrency = 1 })
			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond) // default margin 1s
			defer cancel()
			msgs := []events.SQSMessage{lambdakittest.Message("ok-1"), lambdakittest.Message("ok-2"), lambdakittest.Message("ok-3")}
			resp, err := fn(ctx, lambdakittest.Event(msgs...))
			if err != nil {
				t.Errorf("got error %v; want nil", err)
			}
			wantFailed(t, resp)
			if got := len(c.list()); got != 3 {
				t.Errorf("got %d calls; want 3; log: %v", got, log.Lines(t))
			}
		})
	})

	t.Run("records still running at the margin are cancelled in a FIFO group", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := &calls{}
			h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
				c.add(msg.Body)
				if msg.Body == "slow" {
					<-ctx.Done()
					return nil, ctx.Err()
				}
				return nil, nil
			})
			fn, _ := newBatch(h, func(o *lambdakit.BatchOptions) { o.DeadlineMargin = 200 * time.Millisecond })
			a1 := lambdakittest.Message("a1", lambdakittest.InGroup("A"))
			slow := lambdakittest.Message("slow", lambdakittest.InGroup("A"))
			a3 := lambdakittest.Message("a3", lambdakittest.InGroup("A"))
			b1 := lambdakittest.Message("b1", lambdakittest.InGroup("B"))
			deadline := time.Now().Add(time.Second)
			ctx, cancel := context.WithDeadline(t.Context(), deadline)
			defer cancel()
			resp, err := fn(ctx, lambdakittest.Event(a1, slow, a3, b1))
			if now := time.Now(); !now.Before(deadline) {
				t.Errorf("answered at deadline%+v; want before the deadline", now.Sub(deadline))
			}
			if err != nil {
				t.Errorf("got error %v; want nil", err)
			}
			wantFailed(t, resp, slow.MessageId, a3.MessageId)
			got := c.list()
			slices.Sort(got)
			if want := []string{"a1", "b1", "slow"}; !slices.Equal(got, want) {
				t.Errorf("got calls %q; want %q", got, want)
			}
		})
	})

	t.Run("no deadline: batch waits for every record", func(t *testing.T) {
		c := &calls{}
		fn, _ := newBatch(failBodies(c))
		resp, err := fn(context.Background(), lambdakittest.Event(lambdakittest.Message("ok-1"), lambdakittest.Message("ok-2")))
		if err != nil {
			t.Errorf("got error %v; want nil", err)
		}
		wantFailed(t, resp)
		if got := len(c.list()); got != 2 {
			t.Errorf("got %d calls; want 2", got)
		}
	})
}

type batchCtxKey struct{}

func TestBatchRecordContext(t *testing.T) {
	t.Run("descends from the invocation context", func(t *testing.T) {
		ctx := context.WithValue(batchCtx(t), batchCtxKey{}, "invocation-1")
		deadline, _ := ctx.Deadline()
		var seen sync.Map
		h := lambdakit.HandlerFunc(func(rctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			seen.Store(msg.MessageId, rctx.Value(batchCtxKey{}))
			if d, ok := rctx.Deadline(); !ok || d.After(deadline) {
				return nil, fmt.Errorf("record deadline %v, %v; want at or before %v", d, ok, deadline)
			}
			return nil, nil
		})
		fn, log := newBatch(h)
		msgs := []events.SQSMessage{lambdakittest.Message("a"), lambdakittest.Message("b")}
		resp, err := fn(ctx, lambdakittest.Event(msgs...))
		if err != nil {
			t.Errorf("got error %v; want nil; log: %v", err, log.Lines(t))
		}
		wantFailed(t, resp)
		for _, m := range msgs {
			if got, _ := seen.Load(m.MessageId); got != "invocation-1" {
				t.Errorf("record %s: got context value %v; want invocation-1", m.Body, got)
			}
		}
	})
	t.Run("cancelled invocation starts no record", func(t *testing.T) {
		c := &calls{}
		fn, log := newBatch(failBodies(c))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		msgs := []events.SQSMessage{lambdakittest.Message("ok-1"), lambdakittest.Message("ok-2")}
		resp, err := fn(ctx, lambdakittest.Event(msgs...))
		if !errors.Is(err, lambdakit.ErrAllFailed) {
			t.Errorf("got error %v; want ErrAllFailed", err)
		}
		wantFailed(t, resp, ids(msgs...)...)
		if got := c.list(); len(got) != 0 {
			t.Errorf("got calls %q; want none", got)
		}
		for _, m := range msgs {
			if got, want := log.reason(t, m.MessageId), lambdakit.ErrNotStarted.Error(); got != want {
				t.Errorf("record %s: got reason %q; want %q", m.Body, got, want)
			}
		}
	})
}

// A handler that calls runtime.Goexit (as t.FailNow does) fails its record
// with ErrHandlerExited and releases the lock, like a panic. That holds
// under Batch, though Batch's per-record goroutine is unwound by the Goexit
// too: the record fails with ErrHandlerExited, not ErrStillRunning (reason
// deadline), since the batch was nowhere near its deadline and the handler
// is not running; the next message of its FIFO group is ErrSkipped, not
// ErrNotStarted. Otherwise the log line, reason code and metrics would
// blame the deadline. The same holds when the handler's deferred code
// panics while Goexit unwinds it: the panic is recovered, but the
// goroutine still exits.
func TestGoexitUnderBatchFailsWithErrHandlerExited(t *testing.T) {
	for _, tc := range []struct {
		name string
		exit func()
	}{
		{"Goexit", runtime.Goexit},
		{"Goexit, then a deferred panic", func() {
			defer panic("while exiting")
			runtime.Goexit()
		}},
		{"a panic, then a deferred Goexit", func() {
			defer runtime.Goexit()
			panic("handler broke")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &lambdakittest.MemoryStore{}
			h := idempotent(store, lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
				if msg.Body == paymentBody("p-exit", 1) {
					tc.exit()
				}
				return []byte(`"ok"`), nil
			}))
			batch := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) { o.Logger = silentLogger() })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			exit := lambdakittest.Message(paymentBody("p-exit", 1), lambdakittest.InGroup("g"))
			after := lambdakittest.Message(paymentBody("p-after", 1), lambdakittest.InGroup("g"))
			_, err := batch(ctx, lambdakittest.Event(exit, after))
			var all *lambdakit.AllFailedError
			if !errors.As(err, &all) || len(all.Failures) != 2 {
				t.Fatalf("got %v; want both messages failed (an *AllFailedError)", err)
			}
			if e := all.Failures[0].Err; !errors.Is(e, lambdakit.ErrHandlerExited) {
				t.Errorf("message whose handler exited: got %v; want ErrHandlerExited", e)
			}
			if e := all.Failures[1].Err; !errors.Is(e, lambdakit.ErrSkipped) {
				t.Errorf("next message of its FIFO group: got %v; want ErrSkipped", e)
			}
			if n := len(store.Records()); n != 0 {
				t.Errorf("%d records left; want the lock released", n)
			}
			// The same key runs again at once: the flight was left too.
			resp, err := batch(ctx, lambdakittest.Event(lambdakittest.Message(paymentBody("p-exit", 1))))
			if err == nil || len(resp.BatchItemFailures) != 1 {
				t.Fatalf("retry: got %+v, %v; want the handler run again (and exit again)", resp, err)
			}
		})
	}
}
