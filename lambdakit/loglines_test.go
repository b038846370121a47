package lambdakit_test

// Guards from a review of ce4bdfd, which held a batch's record lines to
// write them in one call: each test failed with it (and it was reverted,
// 393bb67), and passes on the code before and after it. They hold what the
// README's Logs section promises of the record lines: written by the time
// the batch answers, before its metrics line, not kept in memory, and not
// lost when the process dies after logging them.

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// review6Blocker is a handler attribute whose value is resolved when the
// record's line is logged, i.e. inside the batch's answer: it says so on
// entered and waits for unblock (10 s at most).
type review6Blocker struct {
	once    *sync.Once
	entered chan struct{}
	unblock chan struct{}
}

func (b review6Blocker) LogValue() slog.Value {
	b.once.Do(func() { close(b.entered) })
	select {
	case <-b.unblock:
	case <-time.After(10 * time.Second):
	}
	return slog.StringValue("resolved")
}

// Two batches answering on one NewLogger logger (a program that runs
// BatchFuncs itself, several at a time, or a test that does): batch A's
// record lines must be written by the time A returns, and before A's
// metrics line.
//
// Promises: ce4bdfd's message "nothing is held outside the answer", the
// README's Logs section ("One line per record, written when the batch
// answers"), TestRecordLinesAreOneWrite ("Outside a batch's answer, nothing
// is held"), and batch.go's "release() // before the metrics line, which
// comes last". heldWriter counts holds across every batch sharing the
// logger and flushes only when the last is released, so A's lines stay in
// memory for as long as B answers, and A's metrics line (MetricsWriter is
// not held) comes out before them. Nothing bounds how long: batches that
// keep overlapping hold lines until 256 KB of them pile up.
func TestRecordLinesAreWrittenWhenTheirBatchAnswers(t *testing.T) {
	out := &writes{}
	logger := lambdakit.NewLogger(out)
	blk := review6Blocker{once: &sync.Once{}, entered: make(chan struct{}), unblock: make(chan struct{})}
	defer close(blk.unblock)

	batchB := lambdakit.Batch(lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		lambdakit.AddLogAttrs(ctx, slog.Any("slow", blk))
		return nil, nil
	}), func(o *lambdakit.BatchOptions) { o.Logger = logger; o.DisableMetrics = true })
	batchA := lambdakit.Batch(lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		return nil, nil
	}), func(o *lambdakit.BatchOptions) { o.Logger = logger; o.MetricsWriter = out })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		_, _ = batchB(ctx, lambdakittest.Event(lambdakittest.Message(`{}`, func(m *events.SQSMessage) { m.MessageId = "msg-b-1" })))
	}()
	select {
	case <-blk.entered: // B is in its answer, logging its record line
	case <-time.After(10 * time.Second):
		t.Fatal("batch B never logged its record line")
	}

	if _, err := batchA(ctx, lambdakittest.Event(lambdakittest.Message(`{}`, func(m *events.SQSMessage) { m.MessageId = "msg-a-1" }))); err != nil {
		t.Fatal(err)
	}
	calls := out.all()
	recordAt, metricsAt := -1, -1
	for i, c := range calls {
		if recordAt < 0 && strings.Contains(c, `"messageId":"msg-a-1"`) {
			recordAt = i
		}
		if metricsAt < 0 && strings.Contains(c, `"_aws"`) {
			metricsAt = i
		}
	}
	if recordAt < 0 {
		t.Errorf("batch A returned, but its record line was not written (%d writes, none with it); want it written by the time A answers", len(calls))
	} else if metricsAt >= 0 && metricsAt < recordAt {
		t.Errorf("batch A's metrics line is write %d, its record line write %d; want the record line first", metricsAt, recordAt)
	}
	if metricsAt >= 0 && recordAt < 0 {
		t.Errorf("batch A's metrics line was written before its record line (which is still held)")
	}

	blk.unblock <- struct{}{} // let B finish (close above is for the failure paths)
	select {
	case <-bDone:
	case <-time.After(10 * time.Second):
		t.Fatal("batch B did not finish")
	}
}

// After a batch answers, NewLogger's logger must not keep the memory of a
// large line for the rest of the process.
//
// Promise: heldWriter's comment, "when they pass maxHeld, so that a batch
// of 10,000 records does not hold megabytes". flushLocked keeps h.buf's
// array (h.buf = h.buf[:0]), so one 8 MB line logged during an answer (a
// handler attribute here; a long reason or stack would do) keeps 8 MB, and
// the text of that line, for the logger's life. slog's own buffers are
// pooled only up to 16 KB, so before ce4bdfd nothing was kept.
func TestLoggerDoesNotKeepALargeLine(t *testing.T) {
	const size = 8 << 20
	logger := lambdakit.NewLogger(&review6Discard{})
	run := func() {
		batch := lambdakit.Batch(lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			lambdakit.AddLogAttrs(ctx, slog.String("big", strings.Repeat("x", size)))
			return nil, nil
		}), func(o *lambdakit.BatchOptions) { o.Logger = logger; o.DisableMetrics = true })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := batch(ctx, lambdakittest.Event(lambdakittest.Message(`{}`))); err != nil {
			t.Fatal(err)
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	run()
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(logger)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > size/2 {
		t.Errorf("the heap kept %d bytes after the batch answered, with only the logger alive; want the 8 MB line released", grown)
	}
}

type review6Discard struct{ n int }

func (d *review6Discard) Write(p []byte) (int, error) { d.n += len(p); return len(p), nil }

// review6Crash is a handler attribute whose resolution, inside the answer,
// makes another goroutine of the process panic (a goroutine the handler
// started, say): the process dies there, as it does when Lambda kills it at
// its timeout.
type review6Crash struct{}

func (review6Crash) LogValue() slog.Value {
	go func() { panic("review6: a goroutine elsewhere panics") }()
	time.Sleep(10 * time.Second)
	return slog.StringValue("unreached")
}

// A record line the batch has logged must be on the log's writer when the
// process dies after it: the lines before a crash are the ones an operator
// reads to explain it.
//
// Promise: the README's Logs section, "One line per record, written when
// the batch answers", and NewLogger's JSON lines, each written as it is
// logged before ce4bdfd. heldWriter keeps the answer's lines in memory
// until release; release is deferred, but a process that dies (a panic in
// another goroutine, Lambda's timeout kill, os.Exit) runs no defers, so
// every line logged before it in the answer, up to 256 KB of them, is lost.
// The child process logs record 1's line, then dies while logging record
// 2's; the parent looks for record 1's line in the log file.
func TestRecordLinesSurviveAProcessDyingInTheAnswer(t *testing.T) {
	if path := os.Getenv("LAMBDAKIT_TEST_CRASH_LOG"); path != "" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		logger := lambdakit.NewLogger(f)
		batch := lambdakit.Batch(lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			if msg.MessageId == "msg-crash-2" {
				lambdakit.AddLogAttrs(ctx, slog.Any("crash", review6Crash{}))
			}
			return nil, nil
		}), func(o *lambdakit.BatchOptions) { o.Logger = logger; o.DisableMetrics = true; o.Concurrency = 1 })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, _ = batch(ctx, lambdakittest.Event(
			lambdakittest.Message(`{}`, func(m *events.SQSMessage) { m.MessageId = "msg-crash-1" }),
			lambdakittest.Message(`{}`, func(m *events.SQSMessage) { m.MessageId = "msg-crash-2" }),
		))
		return
	}
	logPath := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(logPath, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRecordLinesSurviveAProcessDyingInTheAnswer$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LAMBDAKIT_TEST_CRASH_LOG="+logPath)
	childOut, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(childOut), "a goroutine elsewhere panics") {
		t.Fatalf("the child did not die as planned: %v\n%s", err, childOut)
	}
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), `"messageId":"msg-crash-1"`) {
		t.Errorf("record 1's line, logged before the process died, is not in the log (%d bytes); want it written", len(log))
	}
}

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
