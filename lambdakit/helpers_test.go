package lambdakit_test

// Helpers shared by the package's tests: payments and the handlers that
// charge them, the idempotent and batch wrappers the tests run them in,
// and in-memory stand-ins for a ledger and a dead-letter queue.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// TestMain removes the binaries the package's tests build.
func TestMain(m *testing.M) { testenv.Main(m) }

// payment is what the tests' typed handlers decode.
type payment struct {
	PaymentID string `json:"payment_id"`
	Amount    int    `json:"amount"`
}

// paymentBody is the JSON body of a payment.
func paymentBody(id string, amount int) string {
	return fmt.Sprintf(`{"payment_id":%q,"amount":%d}`, id, amount)
}

// nestedPayment is a payment with a currency and a nested card: what a
// typed handler decodes, with a nested object so that encoding/json's
// merging of repeated objects into a struct shows.
type nestedPayment struct {
	PaymentID string `json:"payment_id"`
	Amount    int    `json:"amount"`
	Currency  string `json:"currency"`
	Card      struct {
		Number string `json:"number"`
	} `json:"card"`
}

// charger is a typed handler whose effect is counted and whose result is a
// charge ID, so that replays can be told from first runs.
func charger(fx *testenv.Counter) lambdakit.Handler {
	return lambdakit.TypedResult(func(ctx context.Context, p payment) (string, error) {
		fx.Add(p.PaymentID)
		return "ch_" + p.PaymentID, nil
	})
}

// noop is a handler that does nothing and returns no result.
var noop = lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
	return nil, nil
})

// silentLogger discards what it is given.
func silentLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// quiet is an Options function that silences the middleware's log.
func quiet(o *lambdakit.Options) { o.Logger = silentLogger() }

// idempotent wraps h in Idempotent, keyed by payment_id, logging nothing.
func idempotent(store lambdakit.Store, h lambdakit.Handler, opts ...func(*lambdakit.Options)) lambdakit.Handler {
	opts = append([]func(*lambdakit.Options){quiet}, opts...)
	return lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), opts...)(h)
}

// handle runs h on msg with a 10 s deadline.
func handle(tb testing.TB, h lambdakit.Handler, msg events.SQSMessage) ([]byte, error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return h.Handle(ctx, &msg)
}

// batchLog is the JSON log of a batch,
// read by message ID.
type batchLog struct{ lambdakittest.LogBuffer }

// failures returns the ERROR lines: records that failed, or were sent to
// the dead-letter queue; a record that succeeds has an INFO line.
func (l *batchLog) failures(tb testing.TB) []map[string]any {
	tb.Helper()
	var out []map[string]any
	for _, line := range l.Lines(tb) {
		if line["level"] == "ERROR" {
			out = append(out, line)
		}
	}
	return out
}

// byMessageID returns the failure lines by message ID, and fails the test
// if a record was logged twice or a line misses its messageId or reason.
func (l *batchLog) byMessageID(tb testing.TB) map[string]map[string]any {
	tb.Helper()
	out := map[string]map[string]any{}
	for _, line := range l.failures(tb) {
		id, _ := line["messageId"].(string)
		reason, _ := line["reason"].(string)
		if id == "" || reason == "" {
			tb.Errorf("log line %v: got no messageId or reason; want both", line)
			continue
		}
		if _, dup := out[id]; dup {
			tb.Errorf("message %s: got two log lines; want one", id)
		}
		out[id] = line
	}
	return out
}

// reason is the logged reason for the failure of message id.
func (l *batchLog) reason(tb testing.TB, id string) string {
	tb.Helper()
	line, ok := l.byMessageID(tb)[id]
	if !ok {
		tb.Errorf("message %s: got no log line; want one", id)
		return ""
	}
	return line["reason"].(string)
}

// newBatch returns Batch(h) logging to a fresh batchLog.
func newBatch(h lambdakit.Handler, optFns ...func(*lambdakit.BatchOptions)) (lambdakit.BatchFunc, *batchLog) {
	log := &batchLog{}
	withLog := func(o *lambdakit.BatchOptions) { o.Logger = log.Logger() }
	return lambdakit.Batch(h, append([]func(*lambdakit.BatchOptions){withLog}, optFns...)...), log
}

// batchCtx is a context for one invocation, with a deadline far enough away
// that only a broken batch reaches it.
func batchCtx(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// wantFailed checks that resp reports exactly the messages want, in order.
func wantFailed(tb testing.TB, resp events.SQSEventResponse, want ...string) {
	tb.Helper()
	var got []string
	for _, f := range resp.BatchItemFailures {
		got = append(got, f.ItemIdentifier)
	}
	if !slices.Equal(got, want) {
		tb.Errorf("got batchItemFailures %q; want %q", got, want)
	}
}

// calls counts handler calls per message body, in the order they start.
type calls struct {
	mu    sync.Mutex
	order []string
}

func (c *calls) add(body string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.order = append(c.order, body)
}

func (c *calls) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.order)
}

// deadLetters is a DeadLetterSender that keeps what it was given in
// memory, and fails while fail is set. The SQS one, producer.DeadLetterQueue,
// is tested against moto in its own package.
type deadLetters struct {
	mu      sync.Mutex
	fail    error
	sent    []string // message IDs, in order
	reasons []error
}

func (d *deadLetters) SendDeadLetter(ctx context.Context, msg *events.SQSMessage, reason error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fail != nil {
		return d.fail
	}
	d.sent = append(d.sent, msg.MessageId)
	d.reasons = append(d.reasons, reason)
	return nil
}

func (d *deadLetters) ids() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.sent)
}

// ledger is what single-phase handlers write: one row per payment.
type ledger struct {
	mu   sync.Mutex
	rows map[string]int
}

func (l *ledger) write(id string) func() {
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.rows == nil {
			l.rows = map[string]int{}
		}
		l.rows[id]++
	}
}

func (l *ledger) count(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rows[id]
}

// completeAll runs msgs once through a fresh container, so that their
// records are completed in store.
func completeAll(t *testing.T, store lambdakit.Store, msgs []events.SQSMessage) {
	t.Helper()
	h := idempotent(store, charger(&testenv.Counter{}))
	for _, m := range msgs {
		if _, err := handle(t, h, m); err != nil {
			t.Fatal(err)
		}
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// repeatsNames reports whether an object in body names a member twice,
// after decoding escapes.
func repeatsNames(t *testing.T, body string) bool {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(body))
	type frame struct {
		object bool
		names  map[string]bool
		expect bool // the next token of an object is a name
	}
	var stack []*frame
	for {
		tok, err := d.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.expect {
			if name, ok := tok.(string); ok {
				if top.names[name] {
					return true
				}
				top.names[name] = true
				top.expect = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, names: map[string]bool{}, expect: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: the enclosing object expects a name next.
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].expect = true
		}
	}
}

// together runs each invocation in a goroutine of its own, as invocations
// run at once in one process; once records records of them have sent on
// started, it closes both, which the records wait for, and then waits for
// every invocation to return.
func together(t *testing.T, records int, started <-chan struct{}, both chan struct{}, invocations ...func() error) {
	t.Helper()
	errs := make(chan error, len(invocations))
	for _, invoke := range invocations {
		go func() { errs <- invoke() }()
	}
	for range records {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatalf("the records of the %d invocations did not all start", len(invocations))
		}
	}
	close(both)
	for range invocations {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
