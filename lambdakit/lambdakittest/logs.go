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

// Logger returns a JSON logger that writes to b.
func (b *LogBuffer) Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(b, nil))
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
