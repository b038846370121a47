package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests build the CLI and an echo bootstrap once, and run the CLI as a
// user would: arguments in, exit status and output out.

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// binaries returns the paths of the lambdakit CLI and the echo bootstrap.
func binaries(t testing.TB) (cli, echo string) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("invoke needs a unix")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "lambdakit-test-")
		if buildErr != nil {
			return
		}
		// One go build for both: it compiles their shared packages once.
		cmd := exec.Command("go", "build", "-o", buildDir+string(filepath.Separator), ".", "./testdata/echo")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = errors.New("go build: " + err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "lambdakit"), filepath.Join(buildDir, "echo")
}

type cliResult struct {
	code           int
	stdout, stderr string
}

// lambdakit runs the CLI with args, bounded in time, with env added to this
// process's environment.
func lambdakit(t testing.TB, env []string, args ...string) cliResult {
	t.Helper()
	cli, _ := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
	default:
		t.Fatalf("lambdakit %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("lambdakit %v did not finish within 60s; stderr:\n%s", args, stderr.String())
	}
	return cliResult{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

// writeFile writes content to name in dir and returns its path.
func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

type output struct {
	Event     string          `json:"event"`
	RequestID string          `json:"requestId"`
	Outcome   string          `json:"outcome"`
	Response  json.RawMessage `json:"response"`
	Error     *struct {
		Type    string `json:"errorType"`
		Message string `json:"errorMessage"`
	} `json:"error"`
}

type echoResponse struct {
	Got      map[string]any `json:"got"`
	Function string         `json:"function"`
	Region   string         `json:"region"`
	Logs     string         `json:"logs"`
	Var      string         `json:"var"`
	Global   string         `json:"global"`
}

// outputs decodes the stream of JSON objects on standard output.
func outputs(t testing.TB, stdout string) []output {
	t.Helper()
	var outs []output
	dec := json.NewDecoder(strings.NewReader(stdout))
	for {
		var o output
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return outs
		}
		if err != nil {
			t.Fatalf("stdout is not a stream of JSON objects: %v\n%s", err, stdout)
		}
		outs = append(outs, o)
	}
}

func TestInvokeTwoEvents(t *testing.T) {
	_, echo := binaries(t)
	dir := t.TempDir()
	first := writeFile(t, dir, "first.json", `{"n": 1}`)
	second := writeFile(t, dir, "second.json", `{"n": 2}`)

	r := lambdakit(t, []string{"AWS_REGION=ap-southeast-2"}, "invoke", "-timeout", "5s", "-log-format", "text", echo, first, second)
	if r.code != 0 {
		t.Fatalf("exit status %d; want 0\nstderr:\n%s", r.code, r.stderr)
	}
	outs := outputs(t, r.stdout)
	if len(outs) != 2 {
		t.Fatalf("got %d objects on stdout; want 2:\n%s", len(outs), r.stdout)
	}
	for i, want := range []struct {
		file string
		n    float64
	}{{first, 1}, {second, 2}} {
		o := outs[i]
		if o.Event != want.file || o.Outcome != "success" || o.RequestID == "" || o.Error != nil {
			t.Errorf("object %d = %+v; want a success for %s", i, o, want.file)
		}
		var resp echoResponse
		if err := json.Unmarshal(o.Response, &resp); err != nil {
			t.Fatalf("object %d response %s: %v", i, o.Response, err)
		}
		if resp.Got["n"] != want.n || resp.Function != "payment" || resp.Region != "ap-southeast-2" || resp.Logs != "" {
			t.Errorf("object %d response = %+v; want n=%v from function payment in ap-southeast-2, text logs", i, resp, want.n)
		}
	}
	if outs[0].RequestID == outs[1].RequestID {
		t.Errorf("both events have request ID %s; want distinct IDs", outs[0].RequestID)
	}
	if !strings.Contains(r.stdout, "\n  \"response\": {\n") {
		t.Errorf("stdout is not pretty-printed:\n%s", r.stdout)
	}

	t.Run("function output goes to stderr", func(t *testing.T) {
		if strings.Count(r.stderr, "echo: log line from the function") != 2 || strings.Contains(r.stdout, "log line") {
			t.Errorf("stdout:\n%s\nstderr:\n%s\nwant the function's two log lines on stderr only", r.stdout, r.stderr)
		}
	})
	t.Run("REPORT per event, init only on the first", func(t *testing.T) {
		if n := strings.Count(r.stderr, "REPORT RequestId: "); n != 2 {
			t.Errorf("%d REPORT lines; want 2\n%s", n, r.stderr)
		}
		if n := strings.Count(r.stderr, "Init Duration"); n != 1 {
			t.Errorf("%d Init Durations; want 1 (one warm process)\n%s", n, r.stderr)
		}
	})
}

func TestInvokeEnvFile(t *testing.T) {
	_, echo := binaries(t)
	dir := t.TempDir()
	ev := writeFile(t, dir, "event.json", `{}`)
	tests := []struct {
		name       string
		file       string
		args       []string
		wantVar    string
		wantGlobal string
		wantRegion string
	}{
		{
			name:       "one section, Parameters beneath it",
			file:       `{"Parameters": {"ECHO_GLOBAL": "g", "ECHO_VAR": "from-parameters"}, "Fn": {"ECHO_VAR": "from-fn", "AWS_REGION": "eu-north-1"}}`,
			wantVar:    "from-fn",
			wantGlobal: "g",
			wantRegion: "eu-north-1",
		},
		{
			name:       "several sections default to PaymentFunction",
			file:       `{"Other": {"ECHO_VAR": "other"}, "PaymentFunction": {"ECHO_VAR": "payment", "PORT": 8080}}`,
			wantVar:    "payment",
			wantRegion: "us-east-1",
		},
		{
			name:       "-logical-id picks a section",
			file:       `{"Other": {"ECHO_VAR": "other"}, "PaymentFunction": {"ECHO_VAR": "payment"}}`,
			args:       []string{"-logical-id", "Other", "-region", "sa-east-1"},
			wantVar:    "other",
			wantRegion: "sa-east-1",
		},
		{
			name:       "Parameters only",
			file:       `{"Parameters": {"ECHO_GLOBAL": "g"}}`,
			wantGlobal: "g",
			wantRegion: "us-east-1",
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			envFile := writeFile(t, dir, "env"+string(rune('a'+i))+".json", tt.file)
			args := append([]string{"invoke", "-env-file", envFile, "-log-format", "json"}, tt.args...)
			r := lambdakit(t, []string{"AWS_REGION=", "AWS_DEFAULT_REGION="}, append(args, echo, ev)...)
			if r.code != 0 {
				t.Fatalf("exit status %d; want 0\nstderr:\n%s", r.code, r.stderr)
			}
			outs := outputs(t, r.stdout)
			var resp echoResponse
			if len(outs) != 1 || json.Unmarshal(outs[0].Response, &resp) != nil {
				t.Fatalf("stdout:\n%s\nwant one echo response", r.stdout)
			}
			if resp.Var != tt.wantVar || resp.Global != tt.wantGlobal || resp.Region != tt.wantRegion || resp.Logs != "JSON" {
				t.Errorf("function saw %+v; want ECHO_VAR=%q ECHO_GLOBAL=%q AWS_REGION=%q AWS_LAMBDA_LOG_FORMAT=JSON", resp, tt.wantVar, tt.wantGlobal, tt.wantRegion)
			}
			if !strings.Contains(r.stderr, `"type":"platform.report"`) {
				t.Errorf("stderr:\n%s\nwant a JSON platform.report record", r.stderr)
			}
		})
	}
}

func TestInvokeFailureExitStatus(t *testing.T) {
	_, echo := binaries(t)
	dir := t.TempDir()
	bad := writeFile(t, dir, "bad.json", `{"fail": "card declined"}`)
	good := writeFile(t, dir, "good.json", `{"n": 3}`)

	r := lambdakit(t, nil, "invoke", echo, bad, good)
	if r.code != 1 {
		t.Fatalf("exit status %d; want 1\nstderr:\n%s", r.code, r.stderr)
	}
	outs := outputs(t, r.stdout)
	if len(outs) != 2 {
		t.Fatalf("got %d objects on stdout; want 2 (the later event still runs):\n%s", len(outs), r.stdout)
	}
	if o := outs[0]; o.Outcome != "function error" || o.Error == nil || o.Error.Type != "errorString" || o.Error.Message != "card declined" {
		t.Errorf("first object = %+v; want a function error errorString \"card declined\"", o)
	}
	if outs[1].Outcome != "success" {
		t.Errorf("second object = %+v; want a success", outs[1])
	}
	if want := "lambdakit invoke: " + bad + ": function error: errorString: card declined"; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr:\n%s\nwant %q", r.stderr, want)
	}
}

func TestInvokeUsageErrors(t *testing.T) {
	_, echo := binaries(t)
	dir := t.TempDir()
	ev := writeFile(t, dir, "event.json", `{}`)
	notJSON := writeFile(t, dir, "env.txt", `A=b`)
	twoSections := writeFile(t, dir, "two.json", `{"A": {}, "B": {}}`)
	notExec := writeFile(t, dir, "bootstrap", "not a program")
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"no command", nil, 2, "Usage: lambdakit <command>"},
		{"unknown command", []string{"deploy"}, 2, `unknown command "deploy"`},
		{"no event file", []string{"invoke", echo}, 2, "need a BOOTSTRAP and at least one EVENT_FILE"},
		{"missing event file", []string{"invoke", echo, filepath.Join(dir, "nope.json")}, 2, "nope.json"},
		{"event not JSON", []string{"invoke", echo, notJSON}, 2, "is not valid JSON"},
		{"missing bootstrap", []string{"invoke", filepath.Join(dir, "nope"), ev}, 2, "nope"},
		{"bad flag", []string{"invoke", "-frobnicate", echo, ev}, 2, "flag provided but not defined"},
		{"bad log format", []string{"invoke", "-log-format", "xml", echo, ev}, 2, "-log-format"},
		{"env file not JSON", []string{"invoke", "-env-file", notJSON, echo, ev}, 2, "env file"},
		{"env file section ambiguous", []string{"invoke", "-env-file", twoSections, echo, ev}, 2, "choose one with -logical-id"},
		{"env file section missing", []string{"invoke", "-env-file", twoSections, "-logical-id", "C", echo, ev}, 2, "no section C"},
		{"bootstrap not executable", []string{"invoke", notExec, ev}, 3, "not executable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := lambdakit(t, nil, tt.args...)
			if r.code != tt.wantCode || !strings.Contains(r.stderr, tt.wantErr) {
				t.Errorf("exit status %d, stderr:\n%s\nwant %d and %q", r.code, r.stderr, tt.wantCode, tt.wantErr)
			}
			if r.stdout != "" {
				t.Errorf("stdout = %q; want nothing", r.stdout)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"invoke", "-h"}} {
		r := lambdakit(t, nil, args...)
		if r.code != 0 {
			t.Errorf("lambdakit %v: exit status %d; want 0", args, r.code)
		}
		if all := r.stdout + r.stderr; !strings.Contains(all, "invoke") {
			t.Errorf("lambdakit %v printed %q; want usage", args, all)
		}
	}
	r := lambdakit(t, nil, "invoke", "-h")
	for _, want := range []string{"Exit status:", "-env-file FILE", "-logical-id ID", "-timeout timeout"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("invoke -h does not mention %q:\n%s", want, r.stderr)
		}
	}
}
