package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lambdakit/lambdakit/internal/redisserver"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// The demo tells the story of the sample events and checks the outcome
// itself. Two demos run at once and tell the same story: each starts from
// nothing (its own moto_server, gateway and temporary build folder, on
// free ports) and leaves nothing the other could meet.
func TestDemoStory(t *testing.T) {
	testenv.RequireMotoServer(t)
	t.Parallel()
	bootstrap, relay, ledger := testenv.Build(t, ".."), testenv.Build(t, "../../relay"), testenv.Build(t, "../../ledger")
	for run := 1; run <= 2; run++ {
		t.Run(fmt.Sprintf("demo %d", run), func(t *testing.T) {
			t.Parallel()
			demoStory(t, run, bootstrap, relay, ledger)
		})
	}
}

func demoStory(t *testing.T, run int, bootstrap, relay, ledger string) {
	r := demo(t, nil, "-bootstrap", bootstrap, "-relay-bootstrap", relay, "-ledger-bootstrap", ledger, "-template", "../../../template.yaml", "-events", "../../../events")
	stdout := r.stdout.String()
	if r.code != 0 {
		t.Fatalf("run %d: exit status %d; want 0\nstdout:\n%s\nstderr:\n%s", run, r.code, stdout, r.stderr.String())
	}
	// The acts on event files, then the act through the queue, the
	// outbox act, then the summary.
	story, queue, ok := strings.Cut(stdout, "\n8. Through the queue")
	if !ok {
		t.Fatalf("run %d: no act 8 through the queue:\n%s", run, stdout)
	}
	queue, ob, ok := strings.Cut(queue, "\n9. The outbox")
	if !ok {
		t.Fatalf("run %d: no act 9, the outbox:\n%s", run, stdout)
	}
	ob, summary, _ := strings.Cut(ob, "\nSummary\n")
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
		{queue, "stack lambdakit-payment CREATE_COMPLETE", 1},
		{queue, "scaled down: Timeout 1m0s -> 2s, VisibilityTimeout 360s -> 4s, maxReceiveCount 5 -> 2; the mapping disabled", 1},
		{queue, "(batch size 10, window 0s, ReportBatchItemFailures true;", 1},
		// The deployed function has the stack's DLQ in its
		// environment: the invalid payment goes there at once.
		{queue, "pay_6099     [cus_H] to the DLQ invalid payment: amount must be a positive integer in minor units, got 12.50", 1},
		{queue, "DLQ lambdakit-payment-dlq.fifo: pay_6099, sent there by the function on its first delivery", 1},
		{summary, "gateway: 17 requests, 14 charges for 14 payments", 1},
		{summary, "(lambdakit-payments): 10 rows: CHARGED 9, DECLINED 1", 1},
		{summary, "(lambdakit-payment-PaymentsTable-", 1},
		{summary, "5 rows: CHARGED 5", 1},
		{summary, "queue: 6 messages published, 5 deleted after success, 1 deleted once the function sent it to the DLQ, 0 moved to the DLQ by the redrive policy (DLQ: pay_6099), 0 left", 1},
		{summary, "pay_6004 was charged once (ch_", 1},
		{summary, "every payment was charged at most once", 1},
		// The outbox: pay_6005's function killed after its commit,
		// the relay killed after a send; one event per charge.
		{ob, "the function was killed after its commit (ledger row completed as its idempotency record, its payment.charged on it, in one UpdateItem), before it answered", 1},
		{ob, "on the payments table's stream (batch size 10, ReportBatchItemFailures true, MaximumRetryAttempts 10, BisectBatchOnFunctionError true, 1 filter,", 1},
		{ob, "pay_6005     [cus_J] skipped    duplicate, gateway not called", 1},
		{ob, "the relay was killed after SQS took pay_", 1},
		{ob, "] recorded   entry#pay_", 5},
		{ob, "] skipped    duplicate, no write", 1},
		{summary, "outbox: 5 charges in the stack's ledger, 5 payment.charged events recorded by the ledger consumer in 5 DynamoDB write requests (5 entries)", 1},
		{summary, "event was dropped by the ledger as a duplicate: no second entry", 1},
		{summary, "relay: its mapping's filter passed over ", 1},
		{summary, "pay_6005 was charged once and published once, though the function was killed after its commit", 1},
		{summary, "payment.charged went out once, though the relay was killed after SQS took it: the resend carried the same deduplication ID", 1},
	} {
		if got := strings.Count(want.part, want.text); got != want.times {
			t.Errorf("run %d: %q appears %d times; want %d\n%s", run, want.text, got, want.times, stdout)
		}
	}
}

// With -valkey the records go to a redis-server the demo starts: the acts
// on event files tell the same story, and the deployed stack's acts are
// left out, saying why.
func TestDemoStoryOnValkey(t *testing.T) {
	t.Parallel() // its own names, processes and servers: it waits mostly
	testenv.RequireMotoServer(t)
	redisserver.RequireInstalled(t)
	bootstrap := testenv.Build(t, "..")
	r := demo(t, nil, "-valkey", "-bootstrap", bootstrap, "-template", "../../../template.yaml", "-events", "../../../events")
	stdout := r.stdout.String()
	if r.code != 0 {
		t.Fatalf("exit status %d; want 0\nstdout:\n%s\nstderr:\n%s", r.code, stdout, r.stderr.String())
	}
	for _, want := range []struct {
		text  string
		times int
	}{
		{"through valkeystore; the ledger rows in DynamoDB", 1},
		{"skipped    duplicate, gateway not called", 3},
		{"idempotency key reused with a different payload", 1},
		{"the acts through the deployed stack are left out", 1},
		{"8. Through the queue", 0},
		{"gateway: 11 requests, 9 charges for 9 payments", 1},
		{"every payment was charged at most once", 1},
	} {
		if got := strings.Count(stdout, want.text); got != want.times {
			t.Errorf("%q appears %d times; want %d\n%s", want.text, got, want.times, stdout)
		}
	}
}

func TestDemoNamedEvents(t *testing.T) {
	testenv.RequireMotoServer(t)
	bootstrap := testenv.Build(t, "..")
	// Service endpoints left in the shell lead nowhere: the function must
	// talk to the demo's own moto_server all the same.
	const deadEndpoint = "http://127.0.0.1:1" // a loopback port nothing listens on
	env := []string{"AWS_ENDPOINT_URL=" + deadEndpoint, "AWS_ENDPOINT_URL_DYNAMODB=" + deadEndpoint, "AWS_ENDPOINT_URL_SQS=" + deadEndpoint}
	r := demo(t, env, "-bootstrap", bootstrap, "-template", "../../../template.yaml",
		"../../../events/payments-new.json", "../../../events/payments-new.json")
	stdout := r.stdout.String()
	if r.code != 0 {
		t.Fatalf("exit status %d; want 0\n%s\n%s", r.code, stdout, r.stderr.String())
	}
	if c, s := strings.Count(stdout, "charged    ch_"), strings.Count(stdout, "skipped    duplicate"); c != 3 || s != 3 {
		t.Errorf("got %d charged, %d skipped; want 3 and 3\n%s", c, s, stdout)
	}
}

func TestDemoChecksItsInputsBeforeStarting(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"bootstrap": "#!/bin/sh\n", "bad.json": `[1, 2]`} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bootstrap := filepath.Join(dir, "bootstrap") // it is not run
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no bootstrap", []string{"-bootstrap", filepath.Join(dir, "nope")}, "build it with 'make build'"},
		{"missing event", []string{"-bootstrap", bootstrap, filepath.Join(dir, "nope.json")}, "nope.json"},
		{"not an SQS event", []string{"-bootstrap", bootstrap, filepath.Join(dir, "bad.json")}, "want an SQS event"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := demo(t, nil, c.args...)
			if r.code != 2 || !strings.HasPrefix(r.stderr.String(), "demo: ") || !strings.Contains(r.stderr.String(), c.want) {
				t.Errorf("exit status %d, stderr:\n%s\nwant 2 and %q", r.code, r.stderr.String(), c.want)
			}
			if strings.Contains(r.stdout.String(), "moto_server") {
				t.Errorf("the demo started:\n%s", r.stdout.String())
			}
		})
	}
}
