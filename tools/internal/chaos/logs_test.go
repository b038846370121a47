package chaos

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// The log reader counts the lines lambdakit itself writes: a lost lease
// (an owner completing after another took its lease over), a duplicate,
// and failed records with their reasons.
func TestLogStatsReadsLambdakitLines(t *testing.T) {
	stats := newLogStats(nil)
	// DEBUG, as the run sets it: a duplicate's line is a DEBUG line.
	logger := slog.New(slog.NewJSONHandler(stats.sink(0), &slog.HandlerOptions{Level: slog.LevelDebug}))
	store := &lambdakittest.MemoryStore{}
	// Each call makes a container of its own, with its own clock: within
	// one, a second message with the key would wait for the first.
	container := func(h lambdakit.Handler, now func() time.Time) lambdakit.BatchFunc {
		idem := lambdakit.Idempotent(store, lambdakit.KeyFromField("id"), func(o *lambdakit.Options) {
			o.Prefix = "t"
			o.Logger = logger
			o.Now = now
		})
		return lambdakit.Batch(idem(h), func(o *lambdakit.BatchOptions) {
			o.Logger = logger
			o.AllowAllFailed = true
		})
	}
	ok := lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) { return nil, nil })
	started, release := make(chan struct{}), make(chan struct{})
	slow := lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
		close(started)
		<-release
		return nil, nil
	})
	later := func() time.Time { return time.Now().Add(time.Hour) } // every lease taken now has ended

	msg := lambdakittest.Message(`{"id":"k"}`)
	firstDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := container(slow, time.Now)(ctx, lambdakittest.Event(msg))
		firstDone <- err
	}()
	<-started
	if resp, err := container(ok, later)(context.Background(), lambdakittest.Event(msg)); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("second owner: %+v, %v; want it to take the lease over and succeed", resp, err)
	}
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatalf("first owner's batch: %v", err)
	}
	if resp, err := container(ok, time.Now)(context.Background(), lambdakittest.Event(msg)); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("duplicate: %+v, %v", resp, err)
	}
	other := lambdakittest.Message(`{"id":"k","x":1}`) // same key, other payload
	if resp, err := container(ok, time.Now)(context.Background(), lambdakittest.Event(other)); err != nil || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("mismatch: %+v, %v; want the record failed", resp, err)
	}

	stats.mu.Lock()
	defer stats.mu.Unlock()
	if stats.leaseLost != 1 || stats.duplicates != 1 || stats.failed != 2 || stats.mismatches != 1 {
		t.Errorf("lease lost %d, duplicates %d, failed %d, mismatches %d; want 1, 1, 2, 1",
			stats.leaseLost, stats.duplicates, stats.failed, stats.mismatches)
	}
	if r := stats.reasons[other.MessageId]; r == "" {
		t.Errorf("no reason logged for %s", other.MessageId)
	}
	if n := stats.byReason["lease lost"]; n != 1 {
		t.Errorf("failures for a lost lease: %d; want 1 (kinds %v)", n, stats.byReason)
	}
	if stats.other != 0 {
		t.Errorf("%d lines not read as the function's JSON; want 0", stats.other)
	}
}

// Output arrives in pieces; lines are put back together.
func TestLogSinkSplitsLines(t *testing.T) {
	stats := newLogStats(nil)
	sink := stats.sink(1)
	for _, piece := range []string{`{"msg":"message failed","reasonCode":"LeaseLost",`, `"LeaseLost":1,"messageId":"a","reason":"y"}` + "\n" + `{"msg":"message failed","messageId":"m","reason":"x"}`, "\r\nplain text\n"} {
		if _, err := sink.Write([]byte(piece)); err != nil {
			t.Fatal(err)
		}
	}
	if stats.leaseLost != 1 || stats.failed != 2 || stats.reasons["m"] != "x" || stats.other != 1 {
		t.Errorf("lease lost %d, failed %d, reason %q, other %d; want 1, 2, x, 1", stats.leaseLost, stats.failed, stats.reasons["m"], stats.other)
	}
}
