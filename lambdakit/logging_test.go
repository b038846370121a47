package lambdakit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// writes records each Write call apart, as a pipe's reader would see the
// system calls.
type writes struct {
	mu    sync.Mutex
	calls []string
}

func (w *writes) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, string(p))
	return len(p), nil
}

func (w *writes) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.calls...)
}

// With NewLogger's logger, a batch's record lines are one write, before the
// metrics line, and the handler's own lines are written as they come.
func TestRecordLinesAreOneWrite(t *testing.T) {
	out := &writes{}
	logger := lambdakit.NewLogger(out)
	h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		logger.InfoContext(ctx, "handler line", "body", msg.Body)
		return nil, nil
	})
	batch := lambdakit.Batch(idempotent(&lambdakittest.MemoryStore{}, h), func(o *lambdakit.BatchOptions) {
		o.Logger = logger
		o.MetricsWriter = out
	})
	var msgs []events.SQSMessage
	for i := range 10 {
		msgs = append(msgs, lambdakittest.Message(paymentBody(fmt.Sprintf("p-%d", i), 1)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if resp, err := batch(ctx, lambdakittest.Event(msgs...)); err != nil || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("got %v, %v; want no failure", resp.BatchItemFailures, err)
	}
	calls := out.all()
	// 10 handler lines, one write of the 10 record lines, the metrics line.
	if len(calls) != 12 {
		t.Fatalf("got %d writes; want 12 (10 handler lines, the record lines, the metrics line):\n%s", len(calls), strings.Join(calls, "---\n"))
	}
	for i, c := range calls[:10] {
		if !strings.Contains(c, `"msg":"handler line"`) || strings.Count(c, "\n") != 1 {
			t.Errorf("write %d: %q; want one handler line", i, c)
		}
	}
	records := strings.Split(strings.TrimSuffix(calls[10], "\n"), "\n")
	if len(records) != 10 {
		t.Fatalf("record write holds %d lines; want 10:\n%s", len(records), calls[10])
	}
	for _, line := range records {
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil || l["msg"] != "record done" {
			t.Errorf("record line %q: %v; want a record done line", line, err)
		}
	}
	if !strings.Contains(calls[11], `"_aws"`) {
		t.Errorf("last write %q; want the metrics line", calls[11])
	}

	// Outside a batch's answer, nothing is held.
	logger.Info("after")
	if got := out.all(); len(got) != 13 || !strings.Contains(got[12], `"after"`) {
		t.Errorf("a line after the batch: %d writes; want it written at once", len(got))
	}
}

// A batch too large to hold its lines in memory writes them in parts, each
// of whole lines.
func TestRecordLinesOfALargeBatchAreWrittenInParts(t *testing.T) {
	out := &writes{}
	h := lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) { return nil, nil })
	batch := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) {
		o.Logger = lambdakit.NewLogger(out)
		o.DisableMetrics = true
	})
	var msgs []events.SQSMessage
	for range 5000 {
		msgs = append(msgs, lambdakittest.Message(`{}`))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := batch(ctx, lambdakittest.Event(msgs...)); err != nil {
		t.Fatal(err)
	}
	calls := out.all()
	total := 0
	for _, c := range calls {
		if !strings.HasSuffix(c, "\n") || len(c) > 512<<10 {
			t.Errorf("a write of %d bytes, ending %q; want whole lines, a few hundred KB at most", len(c), c[max(len(c)-20, 0):])
		}
		total += strings.Count(c, "\n")
	}
	if total != 5000 || len(calls) < 2 || len(calls) > 100 {
		t.Errorf("%d lines in %d writes; want 5000 lines in a few writes", total, len(calls))
	}
}
