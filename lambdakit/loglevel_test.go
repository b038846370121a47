package lambdakit_test

// What a batch writes at each log level (docs/operations.md, "Logs"): at
// the default level a healthy batch writes a constant number of lines, its
// metrics line and nothing else; a failed message is always logged; a
// message that succeeded is logged at DEBUG only, and costs nothing when
// DEBUG is off. The level and the format come from Lambda's advanced
// logging controls (AWS_LAMBDA_LOG_LEVEL, AWS_LAMBDA_LOG_FORMAT), read
// once, when the logger is made.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// tenMessages is a batch of 10 messages; those whose body starts with
// "fail" fail in failingHandler.
func tenMessages(failing int) []events.SQSMessage {
	msgs := make([]events.SQSMessage, 10)
	for i := range msgs {
		body := "ok"
		if i < failing {
			body = "fail"
		}
		msgs[i] = lambdakittest.Message(body)
	}
	return msgs
}

var failingHandler = lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
	if strings.HasPrefix(msg.Body, "fail") {
		return nil, errors.New("gateway down")
	}
	return nil, nil
})

// linesOf runs one batch of msgs through h with logger, and returns the
// lines the logger and the metrics writer received.
func linesOf(t *testing.T, logger *slog.Logger, logs *bytes.Buffer, msgs []events.SQSMessage) (logLines, metricLines []string) {
	t.Helper()
	var metrics bytes.Buffer
	b := lambdakit.Batch(failingHandler, func(o *lambdakit.BatchOptions) {
		o.Logger = logger
		o.MetricsWriter = &metrics
		o.AllowAllFailed = true
	})
	if _, err := b(batchCtx(t), lambdakittest.Event(msgs...)); err != nil {
		t.Fatal(err)
	}
	return nonBlank(logs.String()), nonBlank(metrics.String())
}

func nonBlank(s string) []string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.TrimSpace(l) != "" {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}

func jsonLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

// At the default level, INFO, a healthy batch of 10 writes one line: its
// metrics line. Each failed message adds one line, at every level; at
// DEBUG each message that succeeded has its line too.
func TestLinesPerBatchByLevel(t *testing.T) {
	for _, c := range []struct {
		name          string
		level         slog.Level
		failing       int
		wantLog       int
		wantLogLevels map[string]int
	}{
		{"INFO, healthy", slog.LevelInfo, 0, 0, nil},
		{"INFO, 3 failed", slog.LevelInfo, 3, 3, map[string]int{"ERROR": 3}},
		{"WARN, 3 failed", slog.LevelWarn, 3, 3, map[string]int{"ERROR": 3}},
		{"ERROR, 3 failed", slog.LevelError, 3, 3, map[string]int{"ERROR": 3}},
		{"DEBUG, healthy", slog.LevelDebug, 0, 10, map[string]int{"DEBUG": 10}},
		{"DEBUG, 3 failed", slog.LevelDebug, 3, 10, map[string]int{"DEBUG": 7, "ERROR": 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			logLines, metricLines := linesOf(t, jsonLogger(&logs, c.level), &logs, tenMessages(c.failing))
			if len(metricLines) != 1 {
				t.Errorf("got %d metrics lines; want 1 per batch", len(metricLines))
			}
			if len(logLines) != c.wantLog {
				t.Fatalf("got %d log lines; want %d:\n%s", len(logLines), c.wantLog, strings.Join(logLines, "\n"))
			}
			levels := map[string]int{}
			ids := map[any]bool{}
			for _, l := range logline.Objects(logs.String()) {
				levels[l["level"].(string)]++
				ids[l["messageId"]] = true
				switch l["level"] {
				case "DEBUG":
					if l["msg"] != "message done" || l["outcome"] != "processed" {
						t.Errorf("DEBUG line %v; want message done, processed", l)
					}
				case "ERROR":
					if l["msg"] != "message failed" || l["reason"] != "gateway down" {
						t.Errorf("ERROR line %v; want message failed with its reason", l)
					}
				}
			}
			if len(levels) != len(c.wantLogLevels) || len(ids) != c.wantLog {
				t.Errorf("got levels %v for %d messages; want %v, one line per message", levels, len(ids), c.wantLogLevels)
			}
			for lvl, n := range c.wantLogLevels {
				if levels[lvl] != n {
					t.Errorf("got levels %v; want %v", levels, c.wantLogLevels)
				}
			}
		})
	}
}

// A message sent to the dead-letter queue is a failure: logged at every
// level, though SQS is told it succeeded.
func TestDeadLetteredMessageIsLoggedAtInfo(t *testing.T) {
	var logs bytes.Buffer
	b := lambdakit.Batch(lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
		return nil, lambdakit.Permanent(errors.New("bad format"))
	}), func(o *lambdakit.BatchOptions) {
		o.Logger = jsonLogger(&logs, slog.LevelInfo)
		o.DeadLetters = &deadLetters{}
		o.DisableMetrics = true
	})
	poison := lambdakittest.Message("poison")
	if resp, err := b(batchCtx(t), lambdakittest.Event(poison, lambdakittest.Message("poison too"))); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("got %v, %v; want both handled", resp.BatchItemFailures, err)
	}
	lines := logline.Objects(logs.String())
	if len(lines) != 2 || lines[0]["outcome"] != "dead-lettered" || lines[0]["level"] != "ERROR" {
		t.Errorf("got %v; want two ERROR lines, outcome dead-lettered", lines)
	}
}

// withStderr makes the default logger, which writes where os.Stderr is
// when Batch is called, write to a pipe; it returns what was written once
// run returns.
func withStderr(t *testing.T, run func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	defer func() { os.Stderr = stderr }()
	run()
	w.Close()
	out, _ := io.ReadAll(r)
	return string(out)
}

// The default logger, and NewLogger, follow AWS_LAMBDA_LOG_LEVEL with the
// levels Lambda documents (TRACE, DEBUG, INFO, WARN, ERROR, FATAL, in any
// case), INFO when unset.
func TestDefaultLoggerFollowsLambdaLogLevel(t *testing.T) {
	for _, c := range []struct {
		value       string
		healthyDone int // "message done" lines for a batch of 10, 3 failed
		failures    int
	}{
		{"", 0, 3},
		{"TRACE", 7, 3},
		{"DEBUG", 7, 3},
		{"debug", 7, 3},
		{"INFO", 0, 3},
		{"WARN", 0, 3},
		{"ERROR", 0, 3},
		{"FATAL", 0, 3}, // lambdakit writes nothing above ERROR: its failures stay
	} {
		t.Run("level "+c.value, func(t *testing.T) {
			t.Setenv("AWS_LAMBDA_LOG_LEVEL", c.value)
			t.Setenv("AWS_LAMBDA_LOG_FORMAT", "JSON")
			var b lambdakit.BatchFunc
			out := withStderr(t, func() {
				b = lambdakit.Batch(failingHandler, func(o *lambdakit.BatchOptions) { o.DisableMetrics = true; o.AllowAllFailed = true })
				// Read when the logger is made, not as the batch runs.
				os.Setenv("AWS_LAMBDA_LOG_LEVEL", "ERROR")
				ctx := lambdacontext.NewContext(batchCtx(t), &lambdacontext.LambdaContext{AwsRequestID: "req-7"})
				if _, err := b(ctx, lambdakittest.Event(tenMessages(3)...)); err != nil {
					t.Fatal(err)
				}
			})
			done, failed := 0, 0
			objects, others := logline.Parse(out)
			for _, l := range objects {
				switch l["msg"] {
				case "message done":
					done++
				case "message failed":
					failed++
				}
				if l["requestId"] != "req-7" {
					t.Errorf("line %v: requestId %v; want req-7", l, l["requestId"])
				}
			}
			if done != c.healthyDone || failed != c.failures || len(others) > 0 || len(objects) != done+failed {
				t.Errorf("got %d done and %d failed lines, and %q; want %d and %d, JSON only:\n%s", done, failed, others, c.healthyDone, c.failures, out)
			}
		})
	}
}

// AWS_LAMBDA_LOG_FORMAT=Text (Lambda's values are JSON and Text) makes the
// default logger write text lines; JSON, or no value (outside Lambda),
// JSON lines.
func TestDefaultLoggerFollowsLambdaLogFormat(t *testing.T) {
	for _, c := range []struct {
		format   string
		wantJSON bool
	}{{"", true}, {"JSON", true}, {"json", true}, {"Text", false}, {"TEXT", false}} {
		t.Run("format "+c.format, func(t *testing.T) {
			t.Setenv("AWS_LAMBDA_LOG_FORMAT", c.format)
			t.Setenv("AWS_LAMBDA_LOG_LEVEL", "DEBUG")
			var buf bytes.Buffer
			logger := lambdakit.NewLogger(&buf)
			os.Setenv("AWS_LAMBDA_LOG_FORMAT", "JSON") // too late: read by NewLogger
			ctx := lambdacontext.NewContext(batchCtx(t), &lambdacontext.LambdaContext{AwsRequestID: "req-8"})
			b := lambdakit.Batch(failingHandler, func(o *lambdakit.BatchOptions) { o.Logger = logger; o.DisableMetrics = true })
			if _, err := b(ctx, lambdakittest.Event(tenMessages(1)...)); err != nil {
				t.Fatal(err)
			}
			objects, others := logline.Parse(buf.String())
			if c.wantJSON {
				if len(objects) != 10 || len(others) != 0 {
					t.Errorf("got %d JSON lines and %q; want 10 JSON lines", len(objects), others)
				}
				return
			}
			if len(objects) != 0 || len(others) != 10 {
				t.Fatalf("got %d JSON lines and %d others; want 10 text lines:\n%s", len(objects), len(others), buf.String())
			}
			if !strings.Contains(others[0], `level=`) || !strings.Contains(buf.String(), `msg="message done"`) ||
				!strings.Contains(buf.String(), `level=ERROR msg="message failed"`) || !strings.Contains(others[0], "requestId=req-8") {
				t.Errorf("text lines %q; want slog's text format with the level, the message and the request ID", others)
			}
		})
	}
}

// A value Lambda does not document is not silently taken for another: the
// logger falls back to INFO (or JSON), and its first line, at WARN, names
// the variable and the value it ignored.
func TestInvalidLambdaLogSettingsAreReported(t *testing.T) {
	for _, c := range []struct{ variable, value, other, otherValue string }{
		{"AWS_LAMBDA_LOG_LEVEL", "verbose", "AWS_LAMBDA_LOG_FORMAT", "JSON"},
		{"AWS_LAMBDA_LOG_FORMAT", "yaml", "AWS_LAMBDA_LOG_LEVEL", "INFO"},
	} {
		t.Run(c.variable, func(t *testing.T) {
			t.Setenv(c.variable, c.value)
			t.Setenv(c.other, c.otherValue)
			var buf bytes.Buffer
			logger := lambdakit.NewLogger(&buf)
			objects, others := logline.Parse(buf.String())
			if len(objects) != 1 || len(others) != 0 {
				t.Fatalf("got %q from NewLogger; want one JSON warning line", buf.String())
			}
			w := objects[0]
			if w["level"] != "WARN" || w["variable"] != c.variable || w["value"] != c.value || !strings.Contains(w["msg"].(string), c.variable) {
				t.Errorf("warning %v; want WARN naming %s and %q", w, c.variable, c.value)
			}
			// INFO, JSON: a healthy batch writes nothing, a failure one
			// JSON line.
			buf.Reset()
			b := lambdakit.Batch(failingHandler, func(o *lambdakit.BatchOptions) { o.Logger = logger; o.DisableMetrics = true })
			if _, err := b(batchCtx(t), lambdakittest.Event(tenMessages(1)...)); err != nil {
				t.Fatal(err)
			}
			if objects, others := logline.Parse(buf.String()); len(objects) != 1 || len(others) != 0 || objects[0]["msg"] != "message failed" {
				t.Errorf("got %q; want the failure's JSON line only, at INFO", buf.String())
			}
		})
	}
}

// countedValue counts how often a handler's attribute is resolved for a
// log line.
type countedValue struct{ n *atomic.Int64 }

func (v countedValue) LogValue() slog.Value {
	v.n.Add(1)
	return slog.StringValue("resolved")
}

// With DEBUG off, a message that succeeded builds no log line: its
// handler's attributes are not resolved, and the batch allocates no more
// than with a logger that discards everything.
func TestSuccessLineCostsNothingWhenDebugIsOff(t *testing.T) {
	var resolved atomic.Int64
	h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		lambdakit.AddLogAttrs(ctx, slog.Any("payment", countedValue{&resolved}))
		return nil, nil
	})
	msgs := tenMessages(0)
	run := func(logger *slog.Logger) func() {
		b := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) { o.Logger = logger; o.MetricsWriter = io.Discard })
		ctx, cancel := context.WithCancel(batchCtx(t))
		t.Cleanup(cancel)
		return func() {
			if _, err := b(ctx, lambdakittest.Event(msgs...)); err != nil {
				t.Fatal(err)
			}
		}
	}
	atInfo := run(slog.New(slog.NewJSONHandler(io.Discard, nil)))
	atInfo()
	if n := resolved.Load(); n != 0 {
		t.Errorf("at INFO the handler's attribute was resolved %d times for 10 messages that succeeded; want 0", n)
	}
	run(jsonLogger(io.Discard, slog.LevelDebug))()
	if n := resolved.Load(); n != 10 {
		t.Errorf("at DEBUG the handler's attribute was resolved %d times; want 10, once per line", n)
	}

	if testing.Short() {
		return
	}
	off := run(slog.New(slog.DiscardHandler))
	allocsInfo, allocsOff := testing.AllocsPerRun(50, atInfo), testing.AllocsPerRun(50, off)
	// The batch's goroutines and timers make the count move by an
	// allocation or two; a line per message would add tens.
	if allocsInfo > allocsOff+3 {
		t.Errorf("a batch of 10 at INFO makes %.1f allocations, with a logger that discards everything %.1f; want no more at INFO",
			allocsInfo, allocsOff)
	}
}

// BenchmarkBatch10LogInfo is a batch of 10 that succeed at the default
// level: no line per message. Against BatchLogOff it shows what the
// disabled DEBUG lines cost (nothing), against BatchLogDebug what they
// cost when on.
func BenchmarkBatch10LogInfo(b *testing.B) {
	benchLogLevel(b, slog.New(slog.NewJSONHandler(io.Discard, nil)))
}

// BenchmarkBatch10LogOff is the same with a logger that discards
// everything.
func BenchmarkBatch10LogOff(b *testing.B) { benchLogLevel(b, slog.New(slog.DiscardHandler)) }

// BenchmarkBatch10LogDebug is the same at DEBUG: a line per message.
func BenchmarkBatch10LogDebug(b *testing.B) {
	benchLogLevel(b, jsonLogger(io.Discard, slog.LevelDebug))
}

// benchLogLevel runs batches of 10 through the batch adapter alone, each
// handler adding one attribute to its line, as the sample does.
func benchLogLevel(b *testing.B, logger *slog.Logger) {
	h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		lambdakit.AddLogAttrs(ctx, slog.String("payment_id", msg.MessageId))
		return nil, nil
	})
	batch := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) { o.Logger = logger; o.MetricsWriter = io.Discard })
	ev := lambdakittest.Event(benchMessages(10)...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		if resp, err := batch(ctx, ev); err != nil || len(resp.BatchItemFailures) != 0 {
			b.Fatal(err, resp)
		}
	}
}

// The trace ID on a line is the invocation's, from its context: with
// several invocations at once in one process, aws-lambda-go leaves
// _X_AMZN_TRACE_ID alone (here, a stale value from an earlier invocation).
func TestLoggerTakesTraceIDFromContext(t *testing.T) {
	t.Setenv("AWS_LAMBDA_LOG_FORMAT", "JSON")
	t.Setenv("_X_AMZN_TRACE_ID", "Root=1-00000000-stale;Parent=1;Sampled=0")
	const header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "req-9"})
	//lint:ignore SA1029 the key aws-lambda-go puts the trace header under
	ctx = context.WithValue(ctx, "x-amzn-trace-id", header)
	if got := lambdakit.TraceHeader(ctx); got != header {
		t.Errorf("TraceHeader = %q; want %q", got, header)
	}
	var buf bytes.Buffer
	lambdakit.NewLogger(&buf).InfoContext(ctx, "paid")
	lines := logline.Objects(buf.String())
	if len(lines) != 1 || lines[0]["xrayTraceId"] != "1-5759e988-bd862e3fe1be46a994272793" || lines[0]["requestId"] != "req-9" {
		t.Errorf("got %s; want one line with requestId req-9 and xrayTraceId 1-5759e988-bd862e3fe1be46a994272793", buf.String())
	}
	buf.Reset()
	lambdakit.NewLogger(&buf).InfoContext(context.Background(), "outside an invocation")
	if l := logline.Objects(buf.String()); len(l) != 1 || l[0]["xrayTraceId"] != nil || l[0]["requestId"] != nil {
		t.Errorf("outside an invocation: got %s; want neither a trace nor a request ID", buf.String())
	}
}
