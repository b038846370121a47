package lambdakitotel

import (
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"go.opentelemetry.io/otel/trace"
)

// senderLink returns a link to the span that sent msg, when SQS carried
// one: the AWSTraceHeader system attribute, which SQS sets from the
// X-Ray trace header of the SendMessage request (the OpenTelemetry
// conventions for SQS-triggered functions take the sender's context from
// there, and from nowhere else). The header reads
// "Root=1-<8 hex time>-<24 hex>;Parent=<16 hex>;Sampled=<0|1>", fields in
// any order; a header without a valid Root and Parent gives no link.
func senderLink(msg *events.SQSMessage) (trace.Link, bool) {
	h := msg.Attributes["AWSTraceHeader"]
	if h == "" {
		return trace.Link{}, false
	}
	var cfg trace.SpanContextConfig
	var haveTrace, haveSpan bool
	for field := range strings.SplitSeq(h, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(field), "=")
		if !ok {
			continue
		}
		switch k {
		case "Root":
			// 1-5759e988-bd862e3fe1be46a994272793: version 1, then the
			// 32 hex digits of the trace ID, split after 8.
			if len(v) != 35 || v[:2] != "1-" || v[10] != '-' {
				return trace.Link{}, false
			}
			id, err := trace.TraceIDFromHex(v[2:10] + v[11:])
			if err != nil {
				return trace.Link{}, false
			}
			cfg.TraceID, haveTrace = id, true
		case "Parent":
			id, err := trace.SpanIDFromHex(v)
			if err != nil {
				return trace.Link{}, false
			}
			cfg.SpanID, haveSpan = id, true
		case "Sampled":
			if v == "1" {
				cfg.TraceFlags = trace.FlagsSampled
			}
		}
	}
	if !haveTrace || !haveSpan {
		return trace.Link{}, false
	}
	cfg.Remote = true
	sc := trace.NewSpanContext(cfg)
	if !sc.IsValid() {
		return trace.Link{}, false
	}
	return trace.Link{SpanContext: sc}, true
}
