package lambdakittest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

const childEnv = "LAMBDAKITTEST_LOGGER_CHILD"

// TestLoggerChild is run by TestLoggerIsQuietUnlessTheTestFails in a child
// process: a consumer's test, wired with lambdakittest.Logger, that passes
// or fails as the parent asks.
func TestLoggerChild(t *testing.T) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		t.Skip("run by TestLoggerIsQuietUnlessTheTestFails")
	}
	logger := lambdakittest.Logger(t)
	store := &lambdakittest.MemoryStore{}
	h := lambdakit.Idempotent(store, lambdakit.KeyFromField("id"), func(o *lambdakit.Options) { o.Logger = logger })(
		lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			if strings.Contains(msg.Body, "bad") {
				return nil, errors.New("declined")
			}
			return nil, nil
		}))
	batch := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) { o.Logger = logger })
	logger.Debug("a debug line")
	ok, bad := lambdakittest.Message(`{"id":"ok-1"}`), lambdakittest.Message(`{"id":"bad-1"}`)
	if _, err := batch(t.Context(), lambdakittest.Event(ok, bad, lambdakittest.Redelivery(ok))); err != nil {
		t.Fatal(err)
	}
	if mode == "fail" {
		t.Error("the test fails")
	}
}

// A consumer's test that passes prints none of the batch's lines, even with
// -v; one that fails prints them all, with the test's own output.
func TestLoggerIsQuietUnlessTheTestFails(t *testing.T) {
	run := func(mode string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLoggerChild$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"="+mode)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("pass")
	if err != nil {
		t.Fatalf("passing child: %v\n%s", err, out)
	}
	if strings.Contains(out, "messageId") || strings.Contains(out, "a debug line") {
		t.Errorf("a passing test printed log lines with -v:\n%s", out)
	}

	out, err = run("fail")
	if err == nil {
		t.Fatalf("failing child passed:\n%s", out)
	}
	for _, want := range []string{"the test fails", `"messageId"`, `"reason":"declined"`, "a debug line"} {
		if !strings.Contains(out, want) {
			t.Errorf("a failing test's output lacks %q:\n%s", want, out)
		}
	}
}
