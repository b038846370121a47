package lambdakitotel_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"

	"github.com/aws/aws-lambda-go/events"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakitotel"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// The three wrappers in place. A function would build the provider with an
// exporter of its choice (an OTLP exporter to the ADOT collector layer,
// say) and hand WrapBatch's result to lambda.Start; here the spans go to an
// in-memory recorder and are printed as a tree.
func Example() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	withTP := func(o *lambdakitotel.Options) { o.TracerProvider = tp }
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	charge := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		return []byte(`{"charged":true}`), nil
	})
	store := lambdakitotel.WrapStore(&lambdakittest.MemoryStore{}, withTP)
	h := lambdakit.Chain(charge,
		lambdakitotel.Middleware(withTP), // outside Idempotent, so that it sees duplicates
		lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"),
			func(o *lambdakit.Options) { o.Logger = quiet }))
	handler := lambdakitotel.WrapBatch(lambdakit.Batch(h,
		func(o *lambdakit.BatchOptions) { o.Logger = quiet; o.DisableMetrics = true }), withTP)

	msg := lambdakittest.Message(`{"payment_id":"pay_1"}`)
	for range 2 { // the second delivery is a duplicate
		if _, err := handler(context.Background(), lambdakittest.Event(msg)); err != nil {
			fmt.Println(err)
		}
	}

	// Print each invocation's tree, parents before children.
	children := map[string][]sdktrace.ReadOnlySpan{}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if !s.Parent().IsValid() {
			roots = append(roots, s)
			continue
		}
		children[s.Parent().SpanID().String()] = append(children[s.Parent().SpanID().String()], s)
	}
	var show func(s sdktrace.ReadOnlySpan, indent string)
	show = func(s sdktrace.ReadOnlySpan, indent string) {
		line := indent + s.Name()
		if v, ok := attr(s, lambdakitotel.OutcomeKey); ok {
			line += " outcome=" + v.AsString()
		}
		fmt.Println(line)
		kids := children[s.SpanContext().SpanID().String()]
		// Spans end children first: print them in start order.
		sort.Slice(kids, func(i, j int) bool { return kids[i].StartTime().Before(kids[j].StartTime()) })
		for _, k := range kids {
			show(k, indent+"  ")
		}
	}
	for _, r := range roots {
		show(r, "")
	}
	// Output:
	// process lambdakit-test
	//   process lambdakit-test outcome=processed
	//     lambdakit.store.acquire
	//     lambdakit.store.complete
	// process lambdakit-test
	//   process lambdakit-test outcome=duplicate
	//     lambdakit.store.acquire
}
