package lambdakittest

import (
	"log/slog"
	"testing"

	"github.com/lambdakit/lambdakit/internal/logline"
)

// LogBuffer collects JSON log lines, written from any goroutine, so that a
// test can assert what a handler or batch logged. The zero value is ready.
type LogBuffer struct {
	b logline.Buffer
}

// Write implements io.Writer.
func (b *LogBuffer) Write(p []byte) (int, error) { return b.b.Write(p) }

// Logger returns a JSON logger that writes to b, at every level from
// DEBUG up: a test sees the line Batch writes for each message, the
// "message done" of a success (DEBUG) as well as a failure's.
func (b *LogBuffer) Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Logger returns a quiet logger for the lambdakit code a test runs: give it
// to Batch (BatchOptions.Logger) and to Idempotent or NewOnce
// (Options.Logger). It keeps the JSON lines, at every level, and writes
// them to the test's log only if the test fails: a test that passes prints
// nothing, even with go test -v, and one that fails shows what became of
// each message beside its own output. Without a logger, Batch and the
// engine write to standard error as they do in Lambda. To assert on the
// lines, use a LogBuffer.
func Logger(tb testing.TB) *slog.Logger {
	tb.Helper()
	b := &LogBuffer{}
	tb.Cleanup(func() {
		if out := b.String(); tb.Failed() && out != "" {
			tb.Logf("lambdakit log lines:\n%s", out)
		}
	})
	return b.Logger()
}

// String returns everything written so far.
func (b *LogBuffer) String() string { return b.b.String() }

// Reset forgets everything written so far.
func (b *LogBuffer) Reset() { b.b.Reset() }

// Lines parses every line written so far; a line that is not a JSON object
// fails tb.
func (b *LogBuffer) Lines(tb testing.TB) []map[string]any {
	tb.Helper()
	objects, others := logline.Parse(b.String())
	if len(others) > 0 {
		tb.Fatalf("log line %q is not JSON", others[0])
	}
	return objects
}
