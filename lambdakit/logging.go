package lambdakit

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// NewLogger returns the logger Batch and Idempotent use unless given one
// (on standard error), for a function's own lines to match theirs: JSON
// lines on w (Lambda sends standard output and error to CloudWatch Logs),
// at the level Lambda's advanced logging controls set in
// AWS_LAMBDA_LOG_LEVEL (INFO when unset), each with the invocation's
// request ID when the context passed to the logger has one, so that a line
// can be found from a request and the other way round.
func NewLogger(w io.Writer) *slog.Logger {
	return slog.New(requestIDHandler{slog.NewJSONHandler(w, &slog.HandlerOptions{Level: levelFromEnv()})})
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
// record it handles.
type requestIDHandler struct{ slog.Handler }

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		r.AddAttrs(slog.String("requestId", lc.AwsRequestID))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(attrs)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}
