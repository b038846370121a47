package main_test

import (
	"strings"
	"testing"

	"github.com/lambdakit/lambdakit/internal/testenv"
)

// The demo tells the story of the sample events and checks the outcome
// itself; it must work twice in a row (each run starts from nothing).
func TestDemoStory(t *testing.T) {
	moto.Server(t)
	bootstrap := testenv.Build(t, "../../functions/payment")
	env := []string{"AWS_EC2_METADATA_DISABLED=true"}
	for run := 1; run <= 2; run++ {
		r := lambdakit(t, env, "demo", "-bootstrap", bootstrap, "-template", "../../template.yaml", "-events", "../../events")
		if r.code != 0 {
			t.Fatalf("run %d: exit status %d; want 0\nstdout:\n%s\nstderr:\n%s", run, r.code, r.stdout, r.stderr)
		}
		// The acts on event files, then the act through the queue, then the
		// summary.
		story, queue, ok := strings.Cut(r.stdout, "\n8. Through the queue")
		if !ok {
			t.Fatalf("run %d: no act 8 through the queue:\n%s", run, r.stdout)
		}
		queue, summary, _ := strings.Cut(queue, "\nSummary\n")
		for _, want := range []struct {
			part, text string
			times      int
		}{
			{story, "skipped    duplicate, gateway not called", 3},
			{story, "declined   card_declined", 1},
			{story, "FAILED     invalid payment:", 4},
			{story, "FAILED     payment gateway unavailable: HTTP 503", 1},
			{story, "not attempted after an earlier failure in its FIFO group", 1},
			{story, "idempotency key reused with a different payload", 1},
			{queue, "published pay_6002 again with another deduplication ID", 1},
			{queue, "the function was killed after the gateway charged pay_6004, before it answered", 1},
			{queue, "pay_6004     [cus_G] KILLED     charged ch_", 1},
			// pay_6003 comes before pay_6004 in its group, so it was
			// charged before the kill; the function wrote nothing
			// about it, as its batch never answered.
			{queue, "pay_6003     [cus_G] no answer  charged ch_", 1},
			{queue, "again: the gateway's stored answer for the same Idempotency-Key, no new charge", 1},
			{queue, "FAILED     invalid payment: amount must be a positive integer in minor units, got 12.50", 1},
			{queue, "DLQ lambdakit-payment-dlq.fifo: pay_6099, moved there by the redrive policy after failing 2 deliveries", 1},
			{summary, "gateway: 16 requests, 13 charges for 13 payments", 1},
			{summary, "14 rows: CHARGED 13, DECLINED 1", 1},
			{summary, "queue: 6 messages published, 5 deleted after success, 1 in the DLQ (pay_6099), 0 left", 1},
			{summary, "pay_6004 was charged once (ch_", 1},
			{summary, "every payment was charged at most once", 1},
		} {
			if got := strings.Count(want.part, want.text); got != want.times {
				t.Errorf("run %d: %q appears %d times; want %d\n%s", run, want.text, got, want.times, r.stdout)
			}
		}
	}
}

func TestDemoNamedEvents(t *testing.T) {
	moto.Server(t)
	bootstrap := testenv.Build(t, "../../functions/payment")
	// Service endpoints left in the shell lead nowhere: the function must
	// talk to the demo's own moto_server all the same.
	env := []string{"AWS_EC2_METADATA_DISABLED=true", "AWS_ENDPOINT_URL_DYNAMODB=" + deadEndpoint, "AWS_ENDPOINT_URL_SQS=" + deadEndpoint}
	r := lambdakit(t, env, "demo", "-bootstrap", bootstrap, "-template", "../../template.yaml",
		"../../events/payments-new.json", "../../events/payments-new.json")
	if r.code != 0 {
		t.Fatalf("exit status %d; want 0\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if c, s := strings.Count(r.stdout, "charged    ch_"), strings.Count(r.stdout, "skipped    duplicate"); c != 3 || s != 3 {
		t.Errorf("got %d charged, %d skipped; want 3 and 3\n%s", c, s, r.stdout)
	}
}
