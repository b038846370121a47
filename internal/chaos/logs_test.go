package chaos

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// The log reader counts the lines lambdakit itself writes: a lost lease
// (an owner completing after another took its expired lease over), a
// duplicate, and failed records with their reasons.
func TestLogStatsReadsLambdakitLines(t *testing.T) {
	stats := newLogStats(nil)
	logger := slog.New(slog.NewJSONHandler(stats.sink(0), nil))
	store := &lambdakittest.MemoryStore{}
	// Each call makes a container of its own: within one, a second
	// message with the key would wait for the first instead.
	idem := func(h lambdakit.Handler) lambdakit.Handler {
		return lambdakit.Idempotent(store, lambdakit.KeyFromField("id"), func(o *lambdakit.IdempotencyOptions) {
			o.Prefix = "t"
			o.Logger = logger
		})(h)
	}
	ok := lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) { return nil, nil })
	release := make(chan struct{})
	slow := lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
		<-release
		return nil, nil
	})

	// The first owner's lease ends after 50 ms, while it still runs.
	msg := lambdakittest.Message(`{"id":"k"}`)
	firstDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := idem(slow).Handle(ctx, &msg)
		firstDone <- err
	}()
	time.Sleep(150 * time.Millisecond)
	if _, err := idem(ok).Handle(context.Background(), &msg); err != nil { // takes the lease over
		t.Fatalf("second owner: %v", err)
	}
	close(release)
	if err := <-firstDone; !errors.Is(err, lambdakit.ErrLeaseLost) {
		t.Fatalf("first owner: %v; want ErrLeaseLost", err)
	}
	if _, err := idem(ok).Handle(context.Background(), &msg); err != nil { // a duplicate
		t.Fatalf("duplicate: %v", err)
	}
	// A payload mismatch, through the batch, which logs each failure.
	other := lambdakittest.Message(`{"id":"k","x":1}`)
	batch := lambdakit.Batch(idem(ok), func(o *lambdakit.BatchOptions) { o.Logger = logger })
	if _, err := batch(context.Background(), lambdakittest.Event(other)); !errors.Is(err, lambdakit.ErrAllFailed) {
		t.Fatalf("batch: %v; want every record failed", err)
	}

	stats.mu.Lock()
	defer stats.mu.Unlock()
	if stats.leaseLost != 1 || stats.duplicates != 1 || stats.failed != 1 || stats.mismatches != 1 {
		t.Errorf("lease lost %d, duplicates %d, failed %d, mismatches %d; want 1 each",
			stats.leaseLost, stats.duplicates, stats.failed, stats.mismatches)
	}
	if r := stats.reasons[other.MessageId]; reasonKind(r) != kindMismatch {
		t.Errorf("reason of %s = %q; want a payload mismatch", other.MessageId, r)
	}
	if stats.other != 0 {
		t.Errorf("%d lines not read as the function's JSON; want 0", stats.other)
	}
}

// Output arrives in pieces; lines are put back together.
func TestLogSinkSplitsLines(t *testing.T) {
	stats := newLogStats(nil)
	sink := stats.sink(1)
	for _, piece := range []string{`{"msg":"idempotency: lease`, ` lost"}` + "\n" + `{"msg":"record failed","messageId":"m","reason":"x"}`, "\r\nplain text\n"} {
		if _, err := sink.Write([]byte(piece)); err != nil {
			t.Fatal(err)
		}
	}
	if stats.leaseLost != 1 || stats.failed != 1 || stats.reasons["m"] != "x" || stats.other != 1 {
		t.Errorf("lease lost %d, failed %d, reason %q, other %d; want 1, 1, x, 1", stats.leaseLost, stats.failed, stats.reasons["m"], stats.other)
	}
}
