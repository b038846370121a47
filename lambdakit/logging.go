package lambdakit

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// NewLogger returns the logger Batch and Idempotent use unless given one
// (on standard error), for a function's own lines to match theirs: JSON
// lines on w (Lambda sends standard output and error to CloudWatch Logs),
// at the level Lambda's advanced logging controls set in
// AWS_LAMBDA_LOG_LEVEL (INFO when unset), each with the invocation's
// request ID when the context passed to the logger has one, so that a line
// can be found from a request and the other way round.
//
// Batch writes the lines of one answer (a line per record) to w in one
// Write when its logger is one of these, rather than a system call a line.
func NewLogger(w io.Writer) *slog.Logger {
	held := &heldWriter{w: w}
	return slog.New(requestIDHandler{slog.NewJSONHandler(held, &slog.HandlerOptions{Level: levelFromEnv()}), held})
}

func defaultLogger() *slog.Logger { return NewLogger(os.Stderr) }

// levelFromEnv reads AWS_LAMBDA_LOG_LEVEL: TRACE and DEBUG log everything,
// INFO, WARN, ERROR and FATAL what their names say.
func levelFromEnv() slog.Level {
	switch strings.ToUpper(os.Getenv("AWS_LAMBDA_LOG_LEVEL")) {
	case "TRACE", "DEBUG":
		return slog.LevelDebug
	case "WARN":
		return slog.LevelWarn
	case "ERROR", "FATAL":
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// requestIDHandler adds the Lambda request ID from the context to every
// record it handles. held is the writer under its JSON handler.
type requestIDHandler struct {
	slog.Handler
	held *heldWriter
}

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		r.AddAttrs(slog.String("requestId", lc.AwsRequestID))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(attrs), h.held}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name), h.held}
}

// holdLines holds what logger writes until release is called, and then
// writes it in one call, when logger is NewLogger's; otherwise it does
// nothing. A batch's record lines cost one system call instead of one
// each: on warm duplicates the write call was half of what the lines
// cost (BenchmarkWarmDuplicates in functions/payment).
// release may be called more than once.
func holdLines(logger *slog.Logger) (release func()) {
	h, ok := logger.Handler().(requestIDHandler)
	if !ok || h.held == nil {
		return func() {}
	}
	return h.held.hold()
}

// heldWriter passes writes through to w, except while held: then it
// collects them, and writes them at once when the last hold is released
// (or when they pass maxHeld, so that a batch of 10,000 records does not
// hold megabytes).
type heldWriter struct {
	mu    sync.Mutex
	w     io.Writer
	holds int
	buf   []byte
}

const maxHeld = 256 << 10

func (h *heldWriter) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holds == 0 {
		return h.w.Write(p)
	}
	h.buf = append(h.buf, p...)
	if len(h.buf) >= maxHeld {
		h.flushLocked()
	}
	return len(p), nil
}

func (h *heldWriter) hold() (release func()) {
	h.mu.Lock()
	h.holds++
	h.mu.Unlock()
	released := false
	return func() { // once; later calls do nothing
		h.mu.Lock()
		defer h.mu.Unlock()
		if released {
			return
		}
		released = true
		h.holds--
		if h.holds == 0 {
			h.flushLocked()
		}
	}
}

// flushLocked writes what is held. A failed write loses those lines, as
// it would have lost each of them: slog reports no write errors either.
func (h *heldWriter) flushLocked() {
	if len(h.buf) == 0 {
		return
	}
	_, _ = h.w.Write(h.buf)
	h.buf = h.buf[:0]
}
