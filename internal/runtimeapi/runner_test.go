//go:build unix

package runtimeapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lambdakit/lambdakit/internal/childproc"
	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// The Runner tests run testdata/testfn, a real aws-lambda-go bootstrap,
// built once per test binary. They need a unix: they check for leftover
// processes with kill(pid, 0).

func TestMain(m *testing.M) { testenv.Main(m) }

// bootstrap returns the path of the test function's binary, building it on
// first use.
func bootstrap(t testing.TB) string {
	t.Helper()
	return testenv.Build(t, "./testdata/testfn")
}

func newRunner(t testing.TB, optFns ...func(*runtimeapi.RunnerOptions)) (*runtimeapi.Runner, *logline.Buffer) {
	t.Helper()
	out := &logline.Buffer{}
	fns := append([]func(*runtimeapi.RunnerOptions){func(o *runtimeapi.RunnerOptions) {
		o.Stdout, o.Stderr = out, out
		o.Timeout = 5 * time.Second
	}}, optFns...)
	r, err := runtimeapi.NewRunner(bootstrap(t), fns...)
	if err != nil {
		t.Fatalf("NewRunner: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r, out
}

type echo struct {
	Value      any               `json:"value"`
	PID        int               `json:"pid"`
	RequestID  string            `json:"requestId"`
	ARN        string            `json:"functionArn"`
	DeadlineMS int64             `json:"deadlineMs"`
	NowMS      int64             `json:"nowMs"`
	Dir        string            `json:"dir"`
	Env        map[string]string `json:"env"`
	ChildPID   int               `json:"childPid"`
}

// invoke runs event with a bound on the whole call and fails the test on an
// error return.
func invoke(t testing.TB, r *runtimeapi.Runner, event string) runtimeapi.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := r.Invoke(ctx, []byte(event))
	if err != nil {
		t.Fatalf("Invoke(%s): %v", event, err)
	}
	return res
}

// invokeEcho runs an echo event and decodes what the function saw.
func invokeEcho(t testing.TB, r *runtimeapi.Runner, value string) (runtimeapi.Result, echo) {
	t.Helper()
	res := invoke(t, r, `{"action":"echo","value":`+value+`}`)
	if res.Outcome != runtimeapi.OutcomeSuccess {
		t.Fatalf("echo: outcome %v (%v); want success", res.Outcome, res.Error)
	}
	var e echo
	if err := json.Unmarshal(res.Payload, &e); err != nil {
		t.Fatalf("echo payload %s: %v", res.Payload, err)
	}
	return res, e
}

// alive reports whether pid is a live process; a zombie counts as dead.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return runtime.GOOS != "linux"
	}
	// The state follows the command name in parentheses.
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// assertGone fails unless pid is gone within a second (a killed process
// group's members die asynchronously).
func assertGone(t testing.TB, what string, pid int) {
	t.Helper()
	for range 100 {
		if !alive(pid) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("%s (pid %d) is still running", what, pid)
}

func TestRunnerEcho(t *testing.T) {
	r, out := newRunner(t, func(o *runtimeapi.RunnerOptions) {
		o.FunctionName = "payment"
		o.Region = "eu-central-1"
		o.MemoryMB = 256
		o.Timeout = 7 * time.Second
		o.Env = []string{"TESTFN_CUSTOM=from-env", "AWS_LAMBDA_FUNCTION_NAME=stray", "TZ=Europe/Paris"}
		o.LogFormat = "json"
		o.LogLevel = "debug"
	})

	start := time.Now()
	res, first := invokeEcho(t, r, `{"n":1}`)
	if res.InitDuration <= 0 {
		t.Errorf("first InitDuration = %v; want a cold start", res.InitDuration)
	}
	if got, _ := json.Marshal(first.Value); string(got) != `{"n":1}` {
		t.Errorf("echoed value = %s; want {\"n\":1}", got)
	}
	if first.RequestID != res.RequestID {
		t.Errorf("function saw request ID %q; Result says %q", first.RequestID, res.RequestID)
	}
	if want := "arn:aws:lambda:eu-central-1:123456789012:function:payment"; first.ARN != want {
		t.Errorf("function ARN = %q; want %q", first.ARN, want)
	}

	t.Run("context deadline is now plus the timeout", func(t *testing.T) {
		d := time.UnixMilli(first.DeadlineMS).Sub(start)
		if d < 6*time.Second || d > 7*time.Second+res.InitDuration+time.Second {
			t.Errorf("deadline = start + %v; want about 7s", d)
		}
		if left := time.Duration(first.DeadlineMS-first.NowMS) * time.Millisecond; left < 6*time.Second || left > 7*time.Second {
			t.Errorf("time left in the handler = %v; want just under 7s", left)
		}
	})

	t.Run("environment is Lambda's", func(t *testing.T) {
		dir := filepath.Dir(bootstrap(t))
		want := map[string]string{
			"AWS_LAMBDA_FUNCTION_NAME":        "payment",
			"AWS_LAMBDA_FUNCTION_VERSION":     "$LATEST",
			"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
			"AWS_LAMBDA_LOG_FORMAT":           "JSON",
			"AWS_LAMBDA_LOG_LEVEL":            "DEBUG",
			"AWS_LAMBDA_LOG_GROUP_NAME":       "/aws/lambda/payment",
			"AWS_LAMBDA_INITIALIZATION_TYPE":  "on-demand",
			"AWS_REGION":                      "eu-central-1",
			"AWS_DEFAULT_REGION":              "eu-central-1",
			"_HANDLER":                        "bootstrap",
			"LAMBDA_TASK_ROOT":                dir,
			"TZ":                              ":UTC",
			"TESTFN_CUSTOM":                   "from-env",
		}
		for k, v := range want {
			if got := first.Env[k]; got != v {
				t.Errorf("%s = %q; want %q", k, got, v)
			}
		}
		if first.Dir != dir {
			t.Errorf("working directory = %q; want %q", first.Dir, dir)
		}
	})

	t.Run("process stays warm and request IDs differ", func(t *testing.T) {
		seen := map[string]bool{first.RequestID: true}
		for i := range 3 {
			res, e := invokeEcho(t, r, strconv.Itoa(i))
			if e.PID != first.PID {
				t.Errorf("invocation %d ran in pid %d; want the warm pid %d", i, e.PID, first.PID)
			}
			if res.InitDuration != 0 {
				t.Errorf("invocation %d InitDuration = %v; want 0 on a warm process", i, res.InitDuration)
			}
			if seen[e.RequestID] {
				t.Errorf("request ID %s seen twice", e.RequestID)
			}
			seen[e.RequestID] = true
		}
	})

	t.Run("output reaches the writer", func(t *testing.T) {
		if want := "testfn: echo " + first.RequestID; !strings.Contains(out.String(), want) {
			t.Errorf("output = %q; want it to contain %q", out.String(), want)
		}
	})

	t.Run("Close leaves no process", func(t *testing.T) {
		if err := r.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		assertGone(t, "function", first.PID)
		if _, err := r.Invoke(context.Background(), []byte(`{}`)); !errors.Is(err, runtimeapi.ErrClosed) {
			t.Errorf("Invoke after Close: %v; want ErrClosed", err)
		}
	})
}

func TestRunnerFunctionError(t *testing.T) {
	r, _ := newRunner(t)
	_, before := invokeEcho(t, r, `0`)

	res := invoke(t, r, `{"action":"error","value":"insufficient funds"}`)
	if res.Outcome != runtimeapi.OutcomeFunctionError {
		t.Fatalf("outcome = %v; want a function error", res.Outcome)
	}
	if res.Error.Type != "declinedError" || res.Error.Message != "declined: insufficient funds" {
		t.Errorf("Error = %q %q; want declinedError \"declined: insufficient funds\"", res.Error.Type, res.Error.Message)
	}
	var doc map[string]any
	if err := json.Unmarshal(res.Payload, &doc); err != nil || doc["errorType"] != "declinedError" {
		t.Errorf("Payload = %s; want the error document", res.Payload)
	}

	// A returned error leaves the process healthy: Lambda reuses it.
	if _, after := invokeEcho(t, r, `1`); after.PID != before.PID {
		t.Errorf("after a function error the pid changed from %d to %d; want it reused", before.PID, after.PID)
	}
}

func TestRunnerResponseFailsHalfway(t *testing.T) {
	r, _ := newRunner(t)
	res := invoke(t, r, `{"action":"badreader"}`)
	if res.Outcome != runtimeapi.OutcomeFunctionError || res.Error.Type != "errorString" || res.Error.Message != "disk on fire" {
		t.Errorf("outcome = %v %+v; want the reader's error, from the trailers", res.Outcome, res.Error)
	}
}

func TestRunnerPanic(t *testing.T) {
	r, _ := newRunner(t)
	_, before := invokeEcho(t, r, `0`)

	res := invoke(t, r, `{"action":"panic"}`)
	if res.Outcome != runtimeapi.OutcomeFunctionError || res.Error.Message != "kaboom" {
		t.Fatalf("outcome = %v %+v; want the panic as a function error", res.Outcome, res.Error)
	}
	if len(res.Error.StackTrace) == 0 {
		t.Error("panic has no stack trace; want aws-lambda-go's")
	}

	// aws-lambda-go exits after reporting a panic; the next event gets a
	// new process.
	res, after := invokeEcho(t, r, `1`)
	if after.PID == before.PID || res.InitDuration == 0 {
		t.Errorf("after a panic: pid %d (was %d), InitDuration %v; want a cold start", after.PID, before.PID, res.InitDuration)
	}
	assertGone(t, "panicked function", before.PID)
}

func TestRunnerTimeout(t *testing.T) {
	r, _ := newRunner(t, func(o *runtimeapi.RunnerOptions) { o.Timeout = time.Second })
	_, before := invokeEcho(t, r, `0`)

	start := time.Now()
	res := invoke(t, r, `{"action":"sleep","ms":60000}`)
	if res.Outcome != runtimeapi.OutcomeTimeout {
		t.Fatalf("outcome = %v; want a timeout", res.Outcome)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("timeout reported after %v; want about 1s", took)
	}
	if res.Error.Type != "Sandbox.Timedout" || !strings.Contains(res.Error.Message, res.RequestID) {
		t.Errorf("Error = %+v; want Sandbox.Timedout naming the request", res.Error)
	}
	assertGone(t, "timed-out function", before.PID)

	res, after := invokeEcho(t, r, `1`)
	if after.PID == before.PID || res.InitDuration == 0 {
		t.Errorf("after a timeout: pid %d (was %d), InitDuration %v; want a cold start", after.PID, before.PID, res.InitDuration)
	}
}

// Lambda freezes the execution environment once the runtime asks for the
// next event and none is pending ("Understanding the Lambda execution
// environment lifecycle", the Invoke phase): work a handler left running
// stops until the next invocation thaws it. A local run must not finish
// that work while the function is idle, or a test would pass that counts on
// it.
func TestRunnerFreezesIdleProcess(t *testing.T) {
	r, _ := newRunner(t)
	done := filepath.Join(t.TempDir(), "done")
	res := invoke(t, r, `{"action":"background","value":`+strconv.Quote(done)+`,"ms":100}`)
	var e echo
	if err := json.Unmarshal(res.Payload, &e); res.Outcome != runtimeapi.OutcomeSuccess || err != nil {
		t.Fatalf("background: outcome %v (%v), payload %s; want success", res.Outcome, res.Error, res.Payload)
	}
	// Four times the work's delay, with nothing invoked meanwhile.
	for range 40 {
		if _, err := os.Stat(done); err == nil {
			t.Fatalf("the idle function finished its background work; Lambda would have frozen it")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if f := childproc.Stat(e.PID); runtime.GOOS == "linux" && (len(f) == 0 || f[0] != "T") {
		t.Errorf("idle function's /proc stat %q; want state T (stopped)", f)
	}

	// The next invocation thaws it, and the work resumes, as on Lambda.
	invokeEcho(t, r, `1`)
	for range 200 {
		if _, err := os.Stat(done); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("the background work did not resume within 2s of the next invocation")
}

func TestRunnerCrash(t *testing.T) {
	r, _ := newRunner(t)
	_, before := invokeEcho(t, r, `0`)

	res := invoke(t, r, `{"action":"exit","code":7}`)
	if res.Outcome != runtimeapi.OutcomeCrash || res.ExitCode != 7 {
		t.Fatalf("outcome = %v, exit code %d; want a crash with code 7", res.Outcome, res.ExitCode)
	}
	if res.Error.Type != "Runtime.ExitError" || !strings.Contains(res.Error.Message, "exit status 7") || res.RequestID == "" {
		t.Errorf("Error = %+v, RequestID %q; want Runtime.ExitError with exit status 7", res.Error, res.RequestID)
	}

	res, after := invokeEcho(t, r, `1`)
	if after.PID == before.PID || res.InitDuration == 0 {
		t.Errorf("after a crash: pid %d (was %d), InitDuration %v; want a cold start", after.PID, before.PID, res.InitDuration)
	}
}

func TestRunnerInitFailure(t *testing.T) {
	tests := []struct {
		init        string
		initTimeout time.Duration // short only where the test waits it out
		wantType    string
		wantMsg     string
		wantCode    int
	}{
		{"exit", 0, "Runtime.ExitError", "exit status 3", 3},
		{"initerror", 0, "Config.Missing", "TABLE_NAME is not set", 0},
		{"hang", 500 * time.Millisecond, "Sandbox.Timedout", "init did not finish within 500ms", 0},
	}
	for _, tt := range tests {
		t.Run(tt.init, func(t *testing.T) {
			pidfile := filepath.Join(t.TempDir(), "pid")
			r, out := newRunner(t, func(o *runtimeapi.RunnerOptions) {
				o.Env = []string{"TESTFN_INIT=" + tt.init, "TESTFN_PIDFILE=" + pidfile}
				o.InitTimeout = tt.initTimeout
			})
			for i := range 2 { // the second one retries init on a new process
				res := invoke(t, r, `{"action":"echo"}`)
				if res.Outcome != runtimeapi.OutcomeInitError {
					t.Fatalf("invocation %d: outcome = %v; want an init error", i, res.Outcome)
				}
				if res.InitDuration <= 0 {
					t.Errorf("invocation %d: InitDuration = %v; want the time init took", i, res.InitDuration)
				}
				if res.Error.Type != tt.wantType || !strings.Contains(res.Error.Message, tt.wantMsg) || res.ExitCode != tt.wantCode {
					t.Errorf("invocation %d: Error = %+v, exit code %d; want %s containing %q, code %d", i, res.Error, res.ExitCode, tt.wantType, tt.wantMsg, tt.wantCode)
				}
				b, err := os.ReadFile(pidfile)
				if err != nil {
					t.Fatalf("pid file: %v", err)
				}
				pid, _ := strconv.Atoi(string(b))
				assertGone(t, "function that failed init", pid)
			}
			if tt.init == "exit" && !strings.Contains(out.String(), "testfn: failing init") {
				t.Errorf("output = %q; want the init log", out.String())
			}
		})
	}
}

func TestRunnerKillsProcessGroup(t *testing.T) {
	r, _ := newRunner(t)
	res := invoke(t, r, `{"action":"spawn"}`)
	var e echo
	if err := json.Unmarshal(res.Payload, &e); err != nil || e.ChildPID == 0 {
		t.Fatalf("spawn: %s %v; want a child pid", res.Payload, err)
	}
	if !alive(e.ChildPID) {
		t.Fatalf("child %d is not running before Close", e.ChildPID)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	assertGone(t, "function", e.PID)
	assertGone(t, "function's child", e.ChildPID)
}

func TestRunnerShutdownSendsSIGTERMToExtensionUsers(t *testing.T) {
	r, out := newRunner(t, func(o *runtimeapi.RunnerOptions) { o.Env = []string{"TESTFN_INIT=sigterm"} })
	_, e := invokeEcho(t, r, `0`)
	if strings.Contains(out.String(), "WARNING") {
		t.Errorf("output = %q; want no warning about the extension", out.String())
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	assertGone(t, "function", e.PID)
	if !strings.Contains(out.String(), "testfn: SIGTERM") {
		t.Errorf("output = %q; want the SIGTERM handler's line", out.String())
	}
}

func TestRunnerContextEnds(t *testing.T) {
	r, _ := newRunner(t)
	_, before := invokeEcho(t, r, `0`)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := r.Invoke(ctx, []byte(`{"action":"sleep","ms":60000}`)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Invoke error = %v; want context.DeadlineExceeded", err)
	}
	assertGone(t, "abandoned function", before.PID)
	if _, after := invokeEcho(t, r, `1`); after.PID == before.PID {
		t.Errorf("pid %d reused after an abandoned invocation; want a new process", after.PID)
	}
}

func TestRunnerCloseDuringInvoke(t *testing.T) {
	r, _ := newRunner(t)
	_, e := invokeEcho(t, r, `0`)
	errc := make(chan error, 1)
	go func() {
		_, err := r.Invoke(context.Background(), []byte(`{"action":"sleep","ms":60000}`))
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, runtimeapi.ErrClosed) {
			t.Errorf("Invoke error = %v; want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Invoke did not return within 10s of Close")
	}
	assertGone(t, "function", e.PID)
}

func TestRunnerKill(t *testing.T) {
	r, out := newRunner(t, func(o *runtimeapi.RunnerOptions) { o.Timeout = 30 * time.Second })
	if r.Kill() {
		t.Error("Kill before any process started reported a process")
	}

	t.Run("during an invocation, the invocation is a crash", func(t *testing.T) {
		_, before := invokeEcho(t, r, `0`)
		type outcome struct {
			res runtimeapi.Result
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := r.Invoke(ctx, []byte(`{"action":"sleep","ms":60000}`))
			done <- outcome{res, err}
		}()
		// Kill once the function is inside its handler.
		for i := 0; !strings.Contains(out.String(), "testfn: sleep"); i++ {
			if i == 500 {
				t.Fatalf("the function never started the event; output:\n%s", out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !r.Kill() {
			t.Fatal("Kill during an invocation reported no process")
		}
		assertGone(t, "killed function", before.PID)
		var got outcome
		select {
		case got = <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Invoke did not return within 10s of Kill")
		}
		if got.err != nil || got.res.Outcome != runtimeapi.OutcomeCrash || !strings.Contains(got.res.Error.Message, "signal: killed") {
			t.Fatalf("Invoke = %v, %v (%+v); want a crash by signal: killed", got.res.Outcome, got.err, got.res.Error)
		}
		res, after := invokeEcho(t, r, `1`)
		if after.PID == before.PID || res.InitDuration == 0 {
			t.Errorf("after Kill: pid %d (was %d), InitDuration %v; want a cold start", after.PID, before.PID, res.InitDuration)
		}
	})

	t.Run("while idle, the next invocation starts a new process", func(t *testing.T) {
		_, before := invokeEcho(t, r, `2`)
		if !r.Kill() {
			t.Fatal("Kill of a warm process reported no process")
		}
		assertGone(t, "killed function", before.PID)
		res, after := invokeEcho(t, r, `3`)
		if after.PID == before.PID || res.InitDuration == 0 {
			t.Errorf("after Kill: pid %d (was %d), InitDuration %v; want a cold start", after.PID, before.PID, res.InitDuration)
		}
	})
}

func TestNewRunnerRejects(t *testing.T) {
	dir := t.TempDir()
	tests := map[string]struct {
		path  string
		optFn func(*runtimeapi.RunnerOptions)
	}{
		"missing binary":           {filepath.Join(dir, "nope"), nil},
		"a directory":              {dir, nil},
		"bad log format":           {bootstrap(t), func(o *runtimeapi.RunnerOptions) { o.LogFormat = "xml" }},
		"negative timeout":         {bootstrap(t), func(o *runtimeapi.RunnerOptions) { o.Timeout = -time.Second }},
		"negative max concurrency": {bootstrap(t), func(o *runtimeapi.RunnerOptions) { o.MaxConcurrency = -1 }},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var fns []func(*runtimeapi.RunnerOptions)
			if tt.optFn != nil {
				fns = append(fns, tt.optFn)
			}
			if _, err := runtimeapi.NewRunner(tt.path, fns...); err == nil {
				t.Error("NewRunner succeeded; want an error")
			}
		})
	}
}

func TestRunnerStartFailure(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "bootstrap")
	if err := os.WriteFile(notExec, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := runtimeapi.NewRunner(notExec)
	if err != nil {
		t.Fatalf("NewRunner: %v", err)
	}
	defer r.Close()
	if _, err := r.Invoke(context.Background(), []byte(`{}`)); !errors.Is(err, os.ErrPermission) {
		t.Errorf("Invoke error = %v; want a permission error", err)
	}
}

// invokeAll runs the events at once and returns their results in order.
func invokeAll(t *testing.T, r *runtimeapi.Runner, events ...string) []runtimeapi.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	results := make([]runtimeapi.Result, len(events))
	errs := make([]error, len(events))
	var wg sync.WaitGroup
	for i, ev := range events {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = r.Invoke(ctx, []byte(ev))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Invoke(%s): %v", events[i], err)
		}
	}
	return results
}

func TestRunnerMaxConcurrencySharesOneProcess(t *testing.T) {
	const n = 4
	r, _ := newRunner(t, func(o *runtimeapi.RunnerOptions) { o.MaxConcurrency = n })
	if got := r.Capacity(); got != n {
		t.Errorf("Capacity() = %d; want %d", got, n)
	}
	invokeEcho(t, r, `0`) // the cold start, out of the timing below

	// Each sleeps 500 ms: one at a time, they would take 2 s.
	events := make([]string, n)
	for i := range events {
		events[i] = `{"action":"sleep","ms":500,"value":` + strconv.Itoa(i) + `}`
	}
	start := time.Now()
	results := invokeAll(t, r, events...)
	if took := time.Since(start); took >= n*500*time.Millisecond {
		t.Errorf("%d invocations of 500 ms took %v; want them run at once", n, took)
	}
	pids := map[int]bool{}
	for i, res := range results {
		var e echo
		if res.Outcome != runtimeapi.OutcomeSuccess || json.Unmarshal(res.Payload, &e) != nil {
			t.Fatalf("invocation %d: outcome %v, payload %s; want an echo", i, res.Outcome, res.Payload)
		}
		// Each answer went to its own invocation.
		if e.RequestID != res.RequestID || e.Value != float64(i) {
			t.Errorf("invocation %d (request %s) got the answer to %v (request %s)", i, res.RequestID, e.Value, e.RequestID)
		}
		if got := e.Env["AWS_LAMBDA_MAX_CONCURRENCY"]; got != strconv.Itoa(n) {
			t.Errorf("AWS_LAMBDA_MAX_CONCURRENCY = %q; want %d", got, n)
		}
		pids[e.PID] = true
	}
	if len(pids) != 1 {
		t.Errorf("invocations ran in processes %v; want one", pids)
	}
}

func TestRunnerMaxConcurrencyCrashEndsEveryInvocationOfTheProcess(t *testing.T) {
	r, _ := newRunner(t, func(o *runtimeapi.RunnerOptions) { o.MaxConcurrency = 2 })
	_, before := invokeEcho(t, r, `0`)

	// The other invocation exits the process: the sleeper, running or still
	// queued for it, ends as a crash too.
	results := invokeAll(t, r, `{"action":"sleep","ms":3000}`, `{"action":"exit","code":7}`)
	for i, res := range results {
		if res.Outcome != runtimeapi.OutcomeCrash || res.ExitCode != 7 {
			t.Errorf("invocation %d: outcome %v, exit code %d; want a crash with code 7", i, res.Outcome, res.ExitCode)
		}
	}
	res, after := invokeEcho(t, r, `1`)
	if after.PID == before.PID || res.InitDuration == 0 {
		t.Errorf("after a crash: pid %d (was %d), InitDuration %v; want a cold start", after.PID, before.PID, res.InitDuration)
	}
}
