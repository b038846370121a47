package rie_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/rie"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The test functions, built from their packages.
const (
	testfn  = "../runtimeapi/testdata/testfn"
	esmfn   = "../esm/testdata/esmfn"
	batchfn = "../../lambdakit/testdata/batchfn"
)

// pair is one bootstrap under both emulators, with the same settings and
// the same environment.
type pair struct {
	runner       *runtimeapi.Runner
	emu          *rie.Emulator
	ours, theirs *logline.Buffer // each one's output
}

func newPair(t *testing.T, fn string, timeout time.Duration, env ...string) *pair {
	t.Helper()
	bin := rie.Binary(t)
	bootstrap := testenv.Build(t, fn)
	p := &pair{ours: &logline.Buffer{}, theirs: &logline.Buffer{}}
	var err error
	p.runner, err = runtimeapi.NewRunner(bootstrap, func(o *runtimeapi.RunnerOptions) {
		o.FunctionName, o.Timeout, o.MemoryMB, o.Env = "compare", timeout, 256, env
		// Lambda's init limit is 10 s; here a hanging init must not make
		// the test wait that long.
		o.InitTimeout = timeout
		o.Stdout, o.Stderr = p.ours, p.ours
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.runner.Close() })
	p.emu, err = rie.Start(bin, bootstrap, func(o *rie.Options) {
		o.FunctionName, o.Timeout, o.MemoryMB, o.Env = "compare", timeout, 256, env
		o.Stdout, o.Stderr = p.theirs, p.theirs
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.emu.Close() })
	return p
}

// invoke runs event under both and returns both results.
func (p *pair) invoke(t *testing.T, event string) (ours, theirs runtimeapi.Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ours, err := p.runner.Invoke(ctx, []byte(event))
	if err != nil {
		t.Fatalf("Runner.Invoke: %v\noutput:\n%s", err, p.ours)
	}
	resp, err := p.emu.Invoke(ctx, []byte(event))
	if err != nil {
		t.Fatalf("aws-lambda-rie: %v\noutput:\n%s", err, p.theirs)
	}
	return ours, resp.Result()
}

// same runs event under both and fails t unless both end with want and
// agree (Diff).
func (p *pair) same(t *testing.T, event string, want runtimeapi.Outcome) (ours, theirs runtimeapi.Result) {
	t.Helper()
	ours, theirs = p.invoke(t, event)
	if d := rie.Diff(ours, theirs); d != "" {
		t.Errorf("the emulators disagree:\n%s", d)
	}
	if ours.Outcome != want {
		t.Errorf("outcome = %v (%s); want %v", ours.Outcome, ours.Payload, want)
	}
	return ours, theirs
}

// echo is what testfn answers by default.
type echo struct {
	Value       any               `json:"value"`
	PID         int               `json:"pid"`
	FunctionARN string            `json:"functionArn"`
	DeadlineMS  int64             `json:"deadlineMs"`
	NowMS       int64             `json:"nowMs"`
	Dir         string            `json:"dir"`
	Env         map[string]string `json:"env"`
}

func decodeEcho(t *testing.T, who string, res runtimeapi.Result) echo {
	t.Helper()
	var e echo
	if res.Outcome != runtimeapi.OutcomeSuccess {
		t.Fatalf("%s: %v %s; want an echo", who, res.Outcome, res.Payload)
	}
	if err := json.Unmarshal(res.Payload, &e); err != nil {
		t.Fatalf("%s: %s: %v", who, res.Payload, err)
	}
	return e
}

// echoBoth invokes testfn's echo under both and decodes both answers.
func (p *pair) echoBoth(t *testing.T, value int) (ours, theirs echo) {
	t.Helper()
	o, th := p.invoke(t, fmt.Sprintf(`{"action":"echo","value":%d}`, value))
	return decodeEcho(t, "ours", o), decodeEcho(t, "aws-lambda-rie", th)
}

// The function's world: what it sees of its settings and environment,
// and how it is run.
func TestEnvironment(t *testing.T) {
	p := newPair(t, testfn, 3*time.Second, "TESTFN_CUSTOM=from the test", "AWS_LAMBDA_FUNCTION_NAME=not reserved?")
	ours, theirs := p.echoBoth(t, 1)
	t.Logf("environment: %v", ours.Env)
	if fmt.Sprint(ours.Env) != fmt.Sprint(theirs.Env) {
		t.Errorf("environment:\n  ours           %v\n  aws-lambda-rie %v", ours.Env, theirs.Env)
	}
	if ours.Env["AWS_LAMBDA_FUNCTION_NAME"] != "compare" || ours.Env["TESTFN_CUSTOM"] != "from the test" {
		t.Errorf("environment %v: want the function's name and the custom variable", ours.Env)
	}
	if ours.Dir != theirs.Dir {
		t.Errorf("working directory: ours %s, aws-lambda-rie %s", ours.Dir, theirs.Dir)
	}
	// A known difference, documented: the ARN's account and region.
	if want := "arn:aws:lambda:us-east-1:123456789012:function:compare"; ours.FunctionARN != want {
		t.Errorf("ours: ARN %s; want %s", ours.FunctionARN, want)
	}
	if want := "arn:aws:lambda:us-east-1:012345678912:function:compare"; theirs.FunctionARN != want {
		t.Errorf("aws-lambda-rie: ARN %s; want %s (documented as a difference; update docs/local-tooling.md if it changed)", theirs.FunctionARN, want)
	}
	// Warm, both give the handler the whole timeout.
	ours, theirs = p.echoBoth(t, 2)
	for who, e := range map[string]echo{"ours": ours, "aws-lambda-rie": theirs} {
		if left := time.Duration(e.DeadlineMS-e.NowMS) * time.Millisecond; left < 2500*time.Millisecond || left > 3*time.Second {
			t.Errorf("%s: %v left of a 3s timeout on a warm invocation", who, left)
		}
	}
	if v := p.invokeSame(t, `{"action":"echo","value":3}`); v.PID != ours.PID {
		t.Errorf("warm: pid %d, then %d; want the same process", ours.PID, v.PID)
	}
}

// invokeSame runs an echo under both, checks that they agree, and returns
// ours.
func (p *pair) invokeSame(t *testing.T, event string) echo {
	t.Helper()
	o, th := p.invoke(t, event)
	e, _ := decodeEcho(t, "ours", o), decodeEcho(t, "aws-lambda-rie", th)
	return e
}

// Function errors, crashes and timeouts, one process through them all, as
// Lambda would keep one execution environment.
func TestFailures(t *testing.T) {
	p := newPair(t, testfn, 2*time.Second)
	before, _ := p.echoBoth(t, 0)

	t.Run("a returned error is a function error with the error's type", func(t *testing.T) {
		ours, _ := p.same(t, `{"action":"error","value":"card expired"}`, runtimeapi.OutcomeFunctionError)
		if ours.Error.Type != "declinedError" || ours.Error.Message != "declined: card expired" {
			t.Errorf("Error = %+v", ours.Error)
		}
	})
	t.Run("an event that is not JSON fails the handler's decoding alike", func(t *testing.T) {
		p.same(t, `"not an object"`, runtimeapi.OutcomeFunctionError)
	})
	t.Run("a panic is a function error, then a new process", func(t *testing.T) {
		ours, theirs := p.same(t, `{"action":"panic"}`, runtimeapi.OutcomeFunctionError)
		if !rie.SamePayload(ours.Payload, theirs.Payload) {
			t.Errorf("payloads differ:\n  ours           %s\n  aws-lambda-rie %s", ours.Payload, theirs.Payload)
		}
		if after, _ := p.echoBoth(t, 1); after.PID == before.PID {
			t.Errorf("pid %d kept after a panic; want a new process", after.PID)
		}
	})
	t.Run("an exit is a crash, Runtime.ExitError", func(t *testing.T) {
		ours, _ := p.same(t, `{"action":"exit","code":3}`, runtimeapi.OutcomeCrash)
		if ours.Error.Type != "Runtime.ExitError" || !strings.HasSuffix(ours.Error.Message, "Error: Runtime exited with error: exit status 3") {
			t.Errorf("Error = %+v", ours.Error)
		}
		p.echoBoth(t, 2) // both start a new process
	})
	t.Run("past the timeout, Sandbox.Timedout, then a new process", func(t *testing.T) {
		warm, _ := p.echoBoth(t, 3)
		ours, theirs := p.same(t, `{"action":"sleep","ms":10000}`, runtimeapi.OutcomeTimeout)
		if !strings.HasSuffix(ours.Error.Message, "Error: Task timed out after 2.00 seconds") {
			t.Errorf("Error = %+v", ours.Error)
		}
		// A known difference, documented: aws-lambda-rie answers in text.
		if string(theirs.Payload) != "Task timed out after 2.00 seconds" {
			t.Errorf("aws-lambda-rie's timeout body = %q (documented as plain text; update docs/local-tooling.md if it changed)", theirs.Payload)
		}
		if after, _ := p.echoBoth(t, 4); after.PID == warm.PID {
			t.Errorf("pid %d kept after a timeout; want a new process", after.PID)
		}
	})
	t.Run("a response over 6 MB fails as too large", func(t *testing.T) {
		big := fmt.Sprintf(`{"action":"echo","value":%q}`, strings.Repeat("x", 6291556))
		ours, theirs := p.invoke(t, big)
		if ours.Outcome != runtimeapi.OutcomeFunctionError || ours.Error.Type != "Function.ResponseSizeTooLarge" {
			t.Errorf("ours: %v %+v; want Function.ResponseSizeTooLarge", ours.Outcome, ours.Error)
		}
		// A known difference, documented: aws-lambda-rie drops the
		// connection of the runtime's post, and aws-lambda-go reports
		// that as its own error.
		if theirs.Outcome != runtimeapi.OutcomeFunctionError || theirs.Error.Message != "unexpected EOF" {
			t.Errorf("aws-lambda-rie: %v %.200s; want a function error \"unexpected EOF\" (documented; update docs/local-tooling.md if it changed)", theirs.Outcome, theirs.Payload)
		}
	})
	t.Run("a response that fails half-way: ours reports the trailers, aws-lambda-rie drops them", func(t *testing.T) {
		ours, theirs := p.invoke(t, `{"action":"badreader"}`)
		if ours.Outcome != runtimeapi.OutcomeFunctionError || !strings.Contains(ours.Error.Message, "disk on fire") {
			t.Errorf("ours: %v %+v; want the function error of the trailers", ours.Outcome, ours.Error)
		}
		// A known difference, documented: Lambda's own path reads the
		// trailers; the emulator's buffered path drops them.
		if theirs.Outcome != runtimeapi.OutcomeSuccess || string(theirs.Payload) != "partial" {
			t.Errorf("aws-lambda-rie: %v %q; want the partial body as a success (documented; update docs/local-tooling.md if it changed)", theirs.Outcome, theirs.Payload)
		}
	})
}

// A failed init, under both: the function never takes the event.
func TestInitFailure(t *testing.T) {
	t.Run("an init error the runtime posts is the answer, byte for byte", func(t *testing.T) {
		p := newPair(t, testfn, 2*time.Second, "TESTFN_INIT=initerror")
		for range 2 { // the second one retries init on a new process
			ours, theirs := p.invoke(t, `{"action":"echo"}`)
			if ours.Outcome != runtimeapi.OutcomeInitError || string(ours.Payload) != string(theirs.Payload) || ours.Error.Type != "Config.Missing" {
				t.Errorf("ours %v %s; aws-lambda-rie %v %s; want the same Config.Missing document", ours.Outcome, ours.Payload, theirs.Outcome, theirs.Payload)
			}
		}
	})
	t.Run("an exit during init is Runtime.ExitError; aws-lambda-rie sends no document", func(t *testing.T) {
		p := newPair(t, testfn, 2*time.Second, "TESTFN_INIT=exit")
		ours, theirs := p.invoke(t, `{"action":"echo"}`)
		if ours.Outcome != runtimeapi.OutcomeInitError || ours.Error.Type != "Runtime.ExitError" ||
			!strings.HasSuffix(ours.Error.Message, "Error: Runtime exited with error: exit status 3") {
			t.Errorf("ours: %v %+v; want Runtime.ExitError, exit status 3", ours.Outcome, ours.Error)
		}
		if theirs.Outcome != runtimeapi.OutcomeInitError || len(theirs.Payload) != 0 {
			t.Errorf("aws-lambda-rie: %v %q; want 502 without a body (documented; update docs/local-tooling.md if it changed)", theirs.Outcome, theirs.Payload)
		}
	})
	t.Run("an init that hangs: ours an init error, aws-lambda-rie a timeout", func(t *testing.T) {
		p := newPair(t, testfn, 2*time.Second, "TESTFN_INIT=hang")
		ours, theirs := p.invoke(t, `{"action":"echo"}`)
		if ours.Outcome != runtimeapi.OutcomeInitError || ours.Error.Type != "Sandbox.Timedout" {
			t.Errorf("ours: %v %+v; want an init error, Sandbox.Timedout", ours.Outcome, ours.Error)
		}
		if theirs.Outcome != runtimeapi.OutcomeTimeout {
			t.Errorf("aws-lambda-rie: %v %q; want a timeout (documented; update docs/local-tooling.md if it changed)", theirs.Outcome, theirs.Payload)
		}
	})
}

// sqsEvent builds an SQS event of bodies; a body "GROUP|body" is a message
// of a FIFO queue's group GROUP.
func sqsEvent(t *testing.T, bodies ...string) string {
	t.Helper()
	var ev events.SQSEvent
	for i, b := range bodies {
		m := events.SQSMessage{
			MessageId:      fmt.Sprintf("m-%d", i+1),
			Body:           b,
			EventSource:    "aws:sqs",
			EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:compare",
			AWSRegion:      "us-east-1",
			Attributes:     map[string]string{"ApproximateReceiveCount": "1"},
		}
		if group, body, ok := strings.Cut(b, "|"); ok {
			m.Body = body
			m.Attributes["MessageGroupId"] = group
			m.EventSourceARN += ".fifo"
		}
		ev.Records = append(ev.Records, m)
	}
	raw, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// An SQS function's answers: partial batch responses, the odd answers a
// function can give, and its crash and timeout.
func TestSQSFunction(t *testing.T) {
	p := newPair(t, esmfn, 2*time.Second)
	tests := []struct {
		name   string
		bodies []string
		want   runtimeapi.Outcome
	}{
		{"all succeed", []string{"a", "b", "c"}, runtimeapi.OutcomeSuccess},
		{"a partial batch response", []string{"a", "b fail", "c"}, runtimeapi.OutcomeSuccess},
		{"FIFO: a failed record fails the rest of its group", []string{"A|a1 fail", "B|b1", "A|a2", "B|b2 fail"}, runtimeapi.OutcomeSuccess},
		{"a function error", []string{"a", "b error"}, runtimeapi.OutcomeFunctionError},
		{"an answer that is not JSON", []string{"a invalid"}, runtimeapi.OutcomeSuccess},
		{"a JSON string", []string{"a string"}, runtimeapi.OutcomeSuccess},
		{"a crash", []string{"a", "b crash"}, runtimeapi.OutcomeCrash},
		{"after the crash", []string{"a"}, runtimeapi.OutcomeSuccess},
		{"a timeout", []string{"a sleep=5000"}, runtimeapi.OutcomeTimeout},
		{"after the timeout", []string{"a fail"}, runtimeapi.OutcomeSuccess},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ours, _ := p.same(t, sqsEvent(t, tt.bodies...), tt.want)
			t.Logf("%v %s", ours.Outcome, ours.Payload)
		})
	}
}

// lambdakit's Batch in a real runtime loop: the errorType Lambda reports
// when every record failed.
func TestBatchErrors(t *testing.T) {
	p := newPair(t, batchfn, 2*time.Second)
	p.same(t, sqsEvent(t, `{"id":"1"}`, `{"id":"2","fail":true}`), runtimeapi.OutcomeSuccess)
	ours, _ := p.same(t, sqsEvent(t, `{"id":"3","fail":true}`, `{"id":"4","fail":true}`), runtimeapi.OutcomeFunctionError)
	t.Logf("every record failed: %+v", ours.Error)
}
