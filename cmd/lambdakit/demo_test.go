package main_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lambdakit/lambdakit/internal/testenv"
)

var (
	paymentOnce sync.Once
	paymentErr  error
)

// paymentBootstrap builds the sample function once, next to the CLI.
func paymentBootstrap(t testing.TB) string {
	t.Helper()
	binaries(t) // makes buildDir
	path := filepath.Join(buildDir, "payment-bootstrap")
	paymentOnce.Do(func() {
		out, err := exec.Command("go", "build", "-o", path, "../../functions/payment").CombinedOutput()
		if err != nil {
			paymentErr = &buildError{err, string(out)}
		}
	})
	if paymentErr != nil {
		t.Fatal(paymentErr)
	}
	return path
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return "go build: " + e.err.Error() + "\n" + e.out }

// The demo tells the story of the sample events and checks the outcome
// itself; it must work twice in a row (each run starts from nothing).
func TestDemoStory(t *testing.T) {
	testenv.RequireMotoServer(t)
	bootstrap := paymentBootstrap(t)
	env := []string{"AWS_EC2_METADATA_DISABLED=true"}
	for run := 1; run <= 2; run++ {
		r := lambdakit(t, env, "demo", "-bootstrap", bootstrap, "-template", "../../template.yaml", "-events", "../../events")
		if r.code != 0 {
			t.Fatalf("run %d: exit status %d; want 0\nstdout:\n%s\nstderr:\n%s", run, r.code, r.stdout, r.stderr)
		}
		for _, want := range []struct {
			text  string
			times int
		}{
			{"skipped    duplicate, gateway not called", 3},
			{"declined   card_declined", 1},
			{"FAILED     invalid payment:", 4},
			{"FAILED     payment gateway unavailable: HTTP 503", 1},
			{"not attempted after an earlier failure in its FIFO group", 1},
			{"idempotency key reused with a different payload", 1},
			{"gateway: 11 requests, 9 charges for 9 payments", 1},
			{"10 rows: CHARGED 9, DECLINED 1", 1},
			{"every payment was charged at most once", 1},
		} {
			if got := strings.Count(r.stdout, want.text); got != want.times {
				t.Errorf("run %d: %q appears %d times; want %d\n%s", run, want.text, got, want.times, r.stdout)
			}
		}
	}
}

func TestDemoNamedEvents(t *testing.T) {
	testenv.RequireMotoServer(t)
	bootstrap := paymentBootstrap(t)
	r := lambdakit(t, []string{"AWS_EC2_METADATA_DISABLED=true"}, "demo", "-bootstrap", bootstrap, "-template", "../../template.yaml",
		"../../events/payments-new.json", "../../events/payments-new.json")
	if r.code != 0 {
		t.Fatalf("exit status %d; want 0\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if c, s := strings.Count(r.stdout, "charged    ch_"), strings.Count(r.stdout, "skipped    duplicate"); c != 3 || s != 3 {
		t.Errorf("got %d charged, %d skipped; want 3 and 3\n%s", c, s, r.stdout)
	}
}
