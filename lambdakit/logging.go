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
// (on standard error), for a function's own lines to match theirs, on w
// (Lambda sends standard output and error to CloudWatch Logs). It follows
// Lambda's advanced logging controls, read once, when it is called:
//
//   - the level in AWS_LAMBDA_LOG_LEVEL: TRACE and DEBUG log everything,
//     INFO (the default) what a healthy function needs, WARN and ERROR
//     what their names say; FATAL is taken as ERROR, as lambdakit writes
//     nothing above ERROR and its failures stay logged;
//   - the format in AWS_LAMBDA_LOG_FORMAT: JSON lines for JSON, or when
//     unset, text lines (slog's key=value) for Text.
//
// Either is read in any case. A value Lambda does not document is not
// guessed at: the logger uses INFO, or JSON, and its first line, at WARN,
// names the variable and the value it ignored. Each line carries the
// invocation's request ID (requestId) and X-Ray trace ID (xrayTraceId,
// the Root of its trace header) when the context passed to the logger has
// them, so that a line can be found from a request and the other way
// round. Both come from the context, never from the environment: with
// several invocations running at once in one process (Lambda Managed
// Instances), a process-wide variable cannot hold each one's.
//
// For another level or format in code, give Batch and Idempotent a logger
// of your own: they write through whatever it lets through.
func NewLogger(w io.Writer) *slog.Logger {
	level, levelOK := levelFromEnv(os.Getenv(envLogLevel))
	text, formatOK := textFromEnv(os.Getenv(envLogFormat))
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewJSONHandler(w, opts)
	if text {
		h = slog.NewTextHandler(w, opts)
	}
	logger := slog.New(requestIDHandler{h})
	if !levelOK {
		warnIgnored(logger, envLogLevel, "logging at INFO")
	}
	if !formatOK {
		warnIgnored(logger, envLogFormat, "logging JSON")
	}
	return logger
}

func defaultLogger() *slog.Logger { return NewLogger(os.Stderr) }

// The variables of Lambda's advanced logging controls.
const (
	envLogLevel  = "AWS_LAMBDA_LOG_LEVEL"
	envLogFormat = "AWS_LAMBDA_LOG_FORMAT"
)

// levelFromEnv reads a value of AWS_LAMBDA_LOG_LEVEL, and reports whether
// it is one Lambda documents (or empty). TRACE maps to DEBUG, not below:
// slog writes a level under DEBUG as "DEBUG-4", which Lambda's own filter
// would not recognise.
func levelFromEnv(v string) (slog.Level, bool) {
	switch strings.ToUpper(strings.TrimSpace(v)) {
	case "TRACE", "DEBUG":
		return slog.LevelDebug, true
	case "", "INFO":
		return slog.LevelInfo, true
	case "WARN":
		return slog.LevelWarn, true
	case "ERROR", "FATAL":
		return slog.LevelError, true
	}
	return slog.LevelInfo, false
}

// textFromEnv reads a value of AWS_LAMBDA_LOG_FORMAT: whether lines are
// text, and whether the value is one Lambda documents (or empty).
func textFromEnv(v string) (text, ok bool) {
	switch strings.ToUpper(strings.TrimSpace(v)) {
	case "TEXT":
		return true, true
	case "", "JSON":
		return false, true
	}
	return false, false
}

// warnIgnored says that the value of variable was not understood. The
// value is cut short: it is the environment's, not lambdakit's.
func warnIgnored(logger *slog.Logger, variable, instead string) {
	v := os.Getenv(variable)
	if len(v) > 64 {
		v = v[:64] + "…"
	}
	logger.LogAttrs(context.Background(), slog.LevelWarn, "lambdakit: "+variable+" is not a value Lambda documents; "+instead,
		slog.String("variable", variable), slog.String("value", v))
}

// requestIDHandler adds the Lambda request ID and X-Ray trace ID from the
// context to every record it handles.
type requestIDHandler struct{ slog.Handler }

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := requestID(ctx); id != "" {
		r.AddAttrs(slog.String("requestId", id))
	}
	if root := traceRoot(TraceHeader(ctx)); root != "" {
		r.AddAttrs(slog.String("xrayTraceId", root))
	}
	return h.Handler.Handle(ctx, r)
}

// requestID is the Lambda request ID of the invocation ctx belongs to, or
// "" outside one.
func requestID(ctx context.Context) string {
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		return lc.AwsRequestID
	}
	return ""
}

// TraceHeader returns the X-Ray trace header of the invocation ctx belongs
// to ("Root=1-…;Parent=…;Sampled=…"), or "" outside one. aws-lambda-go
// puts it in the context of every invocation; it sets _X_AMZN_TRACE_ID too
// only while the process runs one invocation at a time, not with
// AWS_LAMBDA_MAX_CONCURRENCY above 1 (Lambda Managed Instances), where one
// process-wide variable cannot hold the traces of several invocations. Code
// that passes the trace on (an X-Amzn-Trace-Id header, a log field) reads
// it here.
func TraceHeader(ctx context.Context) string {
	h, _ := ctx.Value(traceHeaderKey).(string)
	return h
}

// traceHeaderKey is the context key aws-lambda-go stores the trace header
// under: a plain string, its choice.
const traceHeaderKey = "x-amzn-trace-id"

// traceRoot is the trace ID in an X-Ray trace header: its Root field.
func traceRoot(header string) string {
	for field := range strings.SplitSeq(header, ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(field), "Root="); ok {
			return v
		}
	}
	return ""
}

func (h requestIDHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(attrs)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}
