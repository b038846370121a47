package lambdakit_test

// What docs/operations.md promises of the record lines (a failure's, and
// at DEBUG every record's, the level these tests log at): written by
// the time their batch answers and before its metrics line, not kept in
// memory, and not lost when the process dies after logging them. Writing a
// batch's lines in one call at the end would break all three; any batching
// of log lines must keep them.

import (
	"context"
	"io"
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

// blockingValue is a handler attribute whose value is resolved when the
// record's line is logged, i.e. inside the batch's answer: it says so on
// entered and waits for unblock (10 s at most).
type blockingValue struct {
	once    *sync.Once
	entered chan struct{}
	unblock chan struct{}
}

func (b blockingValue) LogValue() slog.Value {
	b.once.Do(func() { close(b.entered) })
	select {
	case <-b.unblock:
	case <-time.After(10 * time.Second):
	}
	return slog.StringValue("resolved")
}

// Two batches answering on one NewLogger logger (a program that runs
// BatchFuncs itself, several at a time, or a test that does): batch A's
// record line is written by the time A returns, and before A's metrics
// line, while B is still in its answer.
func TestRecordLinesAreWrittenWhenTheirBatchAnswers(t *testing.T) {
	t.Setenv("AWS_LAMBDA_LOG_LEVEL", "DEBUG") // a line for records that succeed
	var out lambdakittest.LogBuffer
	logger := lambdakit.NewLogger(&out)
	blk := blockingValue{once: &sync.Once{}, entered: make(chan struct{}), unblock: make(chan struct{})}
	defer close(blk.unblock)

	batchB := lambdakit.Batch(lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		lambdakit.AddLogAttrs(ctx, slog.Any("slow", blk))
		return nil, nil
	}), func(o *lambdakit.BatchOptions) { o.Logger = logger; o.DisableMetrics = true })
	batchA := lambdakit.Batch(lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		return nil, nil
	}), func(o *lambdakit.BatchOptions) { o.Logger = logger; o.MetricsWriter = &out })

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
	written := out.String()
	recordAt, metricsAt := strings.Index(written, `"messageId":"msg-a-1"`), strings.Index(written, `"_aws"`)
	switch {
	case recordAt < 0:
		t.Errorf("batch A returned, but its record line was not written; want it written by the time A answers:\n%s", written)
	case metricsAt < recordAt:
		t.Errorf("batch A's metrics line at byte %d, its record line at %d; want the record line first", metricsAt, recordAt)
	}

	blk.unblock <- struct{}{} // let B finish (close above is for the failure paths)
	select {
	case <-bDone:
	case <-time.After(10 * time.Second):
		t.Fatal("batch B did not finish")
	}
}

// After a batch answers, NewLogger's logger keeps no memory of a large line
// (a handler attribute here; a long reason or stack would do) for the rest
// of the process. slog pools its own buffers only up to 16 KB.
func TestLoggerDoesNotKeepALargeLine(t *testing.T) {
	const size = 8 << 20
	t.Setenv("AWS_LAMBDA_LOG_LEVEL", "DEBUG") // the record that succeeds has its line
	logger := lambdakit.NewLogger(io.Discard)
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

// crashingValue is a handler attribute whose resolution, inside the answer,
// makes another goroutine of the process panic (a goroutine the handler
// started, say): the process dies there, as it does when Lambda kills it at
// its timeout.
type crashingValue struct{}

func (crashingValue) LogValue() slog.Value {
	go func() { panic("test: a goroutine elsewhere panics") }()
	time.Sleep(10 * time.Second)
	return slog.StringValue("unreached")
}

// A record line the batch has logged is on the log's writer when the
// process dies after it (a panic in another goroutine, Lambda's timeout
// kill, os.Exit: no deferred call runs): the lines before a crash are the
// ones an operator reads to explain it. The child process logs record 1's
// line, then dies while logging record 2's; the parent looks for record
// 1's line in the log file.
func TestRecordLinesSurviveAProcessDyingInTheAnswer(t *testing.T) {
	if path := os.Getenv("LAMBDAKIT_TEST_CRASH_LOG"); path != "" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("AWS_LAMBDA_LOG_LEVEL", "DEBUG") // the records succeed: lines at DEBUG
		logger := lambdakit.NewLogger(f)
		batch := lambdakit.Batch(lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			if msg.MessageId == "msg-crash-2" {
				lambdakit.AddLogAttrs(ctx, slog.Any("crash", crashingValue{}))
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
