package lambdakit_test

// Which metrics the metrics line declares (docs/operations.md, "Metrics"):
// by default the few an alarm needs, each a custom metric CloudWatch bills
// by the month; the rest with BatchOptions.DetailedMetrics.

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// declared returns the names of the metrics an EMF line declares, in
// order, and the line's members that are neither metrics nor dimensions.
func declared(t *testing.T, m map[string]any) (names, extra []string) {
	t.Helper()
	dims := map[string]bool{}
	for _, d := range m["_aws"].(map[string]any)["CloudWatchMetrics"].([]any) {
		dir := d.(map[string]any)
		for _, set := range dir["Dimensions"].([]any) {
			for _, n := range set.([]any) {
				dims[n.(string)] = true
			}
		}
		for _, mt := range dir["Metrics"].([]any) {
			names = append(names, mt.(map[string]any)["Name"].(string))
		}
	}
	for k := range m {
		if k != "_aws" && !dims[k] && !slices.Contains(names, k) {
			extra = append(extra, k)
		}
	}
	return names, extra
}

// metricsLine runs one batch of msgs and returns its metrics line, parsed.
func metricsLine(t *testing.T, h lambdakit.Handler, msgs []events.SQSMessage, optFns ...func(*lambdakit.BatchOptions)) (map[string]any, int) {
	t.Helper()
	var out bytes.Buffer
	b := lambdakit.Batch(h, append([]func(*lambdakit.BatchOptions){func(o *lambdakit.BatchOptions) {
		o.Logger = silentLogger()
		o.MetricsWriter = &out
		o.AllowAllFailed = true
		o.DeadLetters = &deadLetters{}
	}}, optFns...)...)
	if _, err := b(batchCtx(t), lambdakittest.Event(msgs...)); err != nil {
		t.Fatal(err)
	}
	return emfLine(t, bytes.TrimSpace(out.Bytes())), out.Len()
}

// A handler that fails "fail" messages and permanently fails "poison"
// ones, behind Idempotent on the memory store.
func metricsHandler() lambdakit.Handler {
	return idempotent(&lambdakittest.MemoryStore{}, lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		switch {
		case bytes.Contains([]byte(msg.Body), []byte("fail")):
			return nil, errors.New("gateway down")
		case bytes.Contains([]byte(msg.Body), []byte("poison")):
			return nil, lambdakit.Permanent(errors.New("bad amount"))
		}
		return nil, nil
	}))
}

func metricsBatch() []events.SQSMessage {
	return []events.SQSMessage{
		lambdakittest.Message(paymentBody("ok-1", 1)),
		lambdakittest.Message(paymentBody("ok-2", 1)),
		lambdakittest.Message(paymentBody("fail-1", 1)),
		lambdakittest.Message(paymentBody("poison-1", 1)),
	}
}

// By default the line declares four metrics: Failed, FailedPermanent,
// FailedLeaseLost and FailedAfterEffect, what the sample's alarms and an
// operator's need, and carries nothing else but its dimensions.
func TestDefaultMetricsAreTheAlarmSet(t *testing.T) {
	m, size := metricsLine(t, metricsHandler(), metricsBatch())
	names, extra := declared(t, m)
	if want := []string{"Failed", "FailedPermanent", "FailedLeaseLost", "FailedAfterEffect"}; !slices.Equal(names, want) || len(extra) != 0 {
		t.Errorf("declared %q, with other members %q; want %q and nothing else", names, extra, want)
	}
	if m["Failed"] != 2.0 || m["FailedPermanent"] != 1.0 || m["FailedLeaseLost"] != 0.0 {
		t.Errorf("Failed %v, FailedPermanent %v, FailedLeaseLost %v; want 2, 1, 0", m["Failed"], m["FailedPermanent"], m["FailedLeaseLost"])
	}
	if size > 450 {
		t.Errorf("the default metrics line is %d bytes; want at most 450 (CloudWatch Logs bills the bytes too)", size)
	}
}

// DetailedMetrics adds the rest: counts of records, successes, every
// failure reason, duplicates, and the latencies.
func TestDetailedMetricsAreOptIn(t *testing.T) {
	m, _ := metricsLine(t, metricsHandler(), metricsBatch(), func(o *lambdakit.BatchOptions) { o.DetailedMetrics = true })
	names, extra := declared(t, m)
	want := []string{"Records", "Succeeded", "Failed"}
	for _, r := range lambdakit.Reasons() {
		want = append(want, "Failed"+string(r))
	}
	want = append(want, "DuplicatesFromStore", "DuplicatesFromCache", "Replayed", "StoreLatencyP50", "StoreLatencyMax", "BatchDuration")
	if !slices.Equal(names, want) || len(extra) != 0 {
		t.Errorf("declared %q, with other members %q; want %q", names, extra, want)
	}
	if m["Records"] != 4.0 || m["Succeeded"] != 2.0 || m["Failed"] != 2.0 || m["FailedPermanent"] != 1.0 || m["FailedHandlerError"] != 1.0 {
		t.Errorf("got %v; want 4 records, 2 succeeded, 2 failed (1 permanent, 1 handler error)", m)
	}
}
