package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// The tests build the CLI and an echo bootstrap once, and run the CLI as a
// user would: arguments in, exit status and output out. The tests that
// need AWS share one moto_server.

var moto testenv.Moto

func TestMain(m *testing.M) { moto.Run(m) }

// binaries returns the paths of the lambdakit CLI and the echo bootstrap.
func binaries(t testing.TB) (cli, echo string) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("invoke needs a unix")
	}
	return testenv.Build(t, "."), testenv.Build(t, "./testdata/echo")
}

type cliResult struct {
	code           int
	stdout, stderr string
}

// lambdakit runs the CLI with args and nothing on standard input; see cli.
func lambdakit(t testing.TB, env []string, args ...string) cliResult {
	t.Helper()
	return cli(t, env, "", args...)
}

// cli runs the CLI with stdin as its standard input, bounded in time, with
// env added to this process's environment: KEY=value sets KEY, a KEY
// without "=" removes it.
func cli(t testing.TB, env []string, stdin string, args ...string) cliResult {
	t.Helper()
	bin, _ := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = environ(env)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("lambdakit %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("lambdakit %v did not finish within 60s; stderr:\n%s", args, stderr.String())
	}
	return cliResult{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

// environ is this process's environment with env applied: KEY=value sets
// KEY, a KEY without "=" removes it.
func environ(env []string) []string {
	out := os.Environ()
	for _, kv := range env {
		if !strings.Contains(kv, "=") {
			out = slices.DeleteFunc(out, func(e string) bool { return strings.HasPrefix(e, kv+"=") })
			continue
		}
		out = append(out, kv)
	}
	return out
}

// offline keeps a run of the CLI on loopback whatever its endpoints say:
// every HTTP(S) request to a host that is not loopback goes to a proxy
// that is a dead loopback port (the SDK's HTTP client takes the proxy from
// the environment, and never proxies loopback), so a test that a change
// breaks fails on a refused connection instead of reaching AWS. No name is
// resolved either: the proxy would.
var offline = []string{"HTTPS_PROXY=" + deadEndpoint, "HTTP_PROXY=" + deadEndpoint, "https_proxy", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"}

// noEndpoints is the environment of a run of the CLI with no AWS endpoint
// configured at all, as in a shell that forgot the export: static test
// credentials, no endpoint variable, no config file, offline; more comes
// last.
func noEndpoints(more ...string) []string {
	env := append(motoserver.Env(deadEndpoint), "AWS_SESSION_TOKEN=", "AWS_PROFILE=", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_ENDPOINT_URL")
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "AWS_ENDPOINT_URL_") {
			env = append(env, k)
		}
	}
	env = append(env, "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_DYNAMODB")
	env = append(env, offline...)
	return append(env, more...)
}

// at returns queueURL on endpoint (a proxy in front of moto_server, say):
// its scheme and host replaced by endpoint's. The CLI sends a queue's calls
// to the host its URL names.
func at(endpoint, queueURL string) string {
	u, err := url.Parse(queueURL)
	if err != nil {
		panic(err)
	}
	e, err := url.Parse(endpoint)
	if err != nil {
		panic(err)
	}
	u.Scheme, u.Host = e.Scheme, e.Host
	return u.String()
}

// deadEndpoint leads nowhere: a loopback port nothing listens on.
const deadEndpoint = "http://127.0.0.1:1"

// awsEnv is the environment of a run of the CLI whose SDK must find AWS at
// endpoint through the service's own variable (AWS_ENDPOINT_URL_SQS,
// AWS_ENDPOINT_URL_DYNAMODB) only: the general AWS_ENDPOINT_URL leads
// nowhere, so a CLI that ignored the service's variable would fail. The
// credentials are static test ones, with no profile or session token from
// the shell; more comes last.
func awsEnv(service, endpoint string, more ...string) []string {
	env := append(motoserver.Env(deadEndpoint), "AWS_ENDPOINT_URL_"+service+"="+endpoint, "AWS_SESSION_TOKEN=", "AWS_PROFILE=")
	return append(env, more...)
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
	Got             map[string]any `json:"got"`
	Function        string         `json:"function"`
	Region          string         `json:"region"`
	Logs            string         `json:"logs"`
	Var             string         `json:"var"`
	Global          string         `json:"global"`
	Memory          string         `json:"memory"`
	Level           string         `json:"level"`
	DeadlineSeconds int            `json:"deadlineSeconds"`
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

// jsonLines decodes output of one JSON value per line, blank lines aside.
func jsonLines[T any](t testing.TB, stdout string) []T {
	t.Helper()
	var out []T
	for l := range logline.Lines(strings.NewReader(stdout)) { // a string reader does not fail
		var v T
		if err := json.Unmarshal([]byte(l.Text), &v); err != nil {
			t.Fatalf("stdout line %d %q: %v", l.N, l.Text, err)
		}
		out = append(out, v)
	}
	return out
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
		// Without a name, a template or a logical ID, the function gets
		// Lambda's defaults and a neutral name.
		if resp.Got["n"] != want.n || resp.Function != "function" || resp.Region != "ap-southeast-2" || resp.Logs != "" || resp.Memory != "128" {
			t.Errorf("object %d response = %+v; want n=%v from function \"function\" in ap-southeast-2, text logs, 128 MB", i, resp, want.n)
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

// -per-process-concurrency runs the events at once in one process, with
// AWS_LAMBDA_MAX_CONCURRENCY set, and still prints them in order.
func TestInvokePerProcessConcurrency(t *testing.T) {
	_, echo := binaries(t)
	dir := t.TempDir()
	var files []string
	for n := range 3 {
		files = append(files, writeFile(t, dir, fmt.Sprintf("%d.json", n), fmt.Sprintf(`{"n": %d, "env": ["AWS_LAMBDA_MAX_CONCURRENCY"]}`, n)))
	}
	r := lambdakit(t, nil, append([]string{"invoke", "-timeout", "5s", "-per-process-concurrency", "3", echo}, files...)...)
	if r.code != 0 {
		t.Fatalf("exit status %d; want 0\nstderr:\n%s", r.code, r.stderr)
	}
	outs := outputs(t, r.stdout)
	if len(outs) != len(files) {
		t.Fatalf("got %d objects on stdout; want %d:\n%s", len(outs), len(files), r.stdout)
	}
	for i, o := range outs {
		var resp struct {
			echoResponse
			Env map[string]any `json:"env"`
		}
		if o.Event != files[i] || json.Unmarshal(o.Response, &resp) != nil || resp.Got["n"] != float64(i) {
			t.Errorf("object %d = %+v; want the answer to %s", i, o, files[i])
		}
		if got := resp.Env["AWS_LAMBDA_MAX_CONCURRENCY"]; got != "3" {
			t.Errorf("object %d: AWS_LAMBDA_MAX_CONCURRENCY = %v; want 3", i, got)
		}
	}
	if n := strings.Count(r.stderr, "Init Duration"); n != 1 {
		t.Errorf("%d Init Durations; want 1 (one process)\n%s", n, r.stderr)
	}
}

func TestInvokeEnvFile(t *testing.T) {
	_, echo := binaries(t)
	dir := t.TempDir()
	ev := writeFile(t, dir, "event.json", `{}`)
	oneFunction := writeFile(t, dir, "template.yaml", "Resources:\n  Consumer:\n    Type: AWS::Serverless::Function\n")
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
			name:       "several sections: the template's function chooses",
			file:       `{"Other": {"ECHO_VAR": "other"}, "Consumer": {"ECHO_VAR": "consumer", "PORT": 8080}}`,
			args:       []string{"-template", oneFunction},
			wantVar:    "consumer",
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

// The settings no flag gives come from the function's resource in
// -template; flags win over it.
func TestInvokeTakesSettingsFromTheTemplate(t *testing.T) {
	_, echo := binaries(t)
	dir := t.TempDir()
	ev := writeFile(t, dir, "event.json", `{}`)
	tpl := writeFile(t, dir, "template.yaml", `Globals:
  Function:
    MemorySize: 512
Resources:
  Consumer:
    Type: AWS::Serverless::Function
    Properties:
      FunctionName: orders-consumer
      Timeout: 7
      LoggingConfig:
        LogFormat: JSON
        ApplicationLogLevel: WARN
  Other:
    Type: AWS::Serverless::Function
    Properties:
      Timeout: 9
`)
	for _, c := range []struct {
		name    string
		args    []string
		want    echoResponse // Function, Memory, Logs, Level
		timeout int
	}{
		{"the function's own settings over Globals", []string{"-logical-id", "Consumer"},
			echoResponse{Function: "orders-consumer", Memory: "512", Logs: "JSON", Level: "WARN"}, 7},
		{"without FunctionName, the logical ID names it", []string{"-logical-id", "Other"},
			echoResponse{Function: "Other", Memory: "512"}, 9},
		{"flags win", []string{"-logical-id", "Consumer", "-timeout", "4s", "-memory", "256", "-function-name", "mine", "-log-format", "text"},
			echoResponse{Function: "mine", Memory: "256"}, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := lambdakit(t, nil, append(append([]string{"invoke", "-template", tpl}, c.args...), echo, ev)...)
			if r.code != 0 {
				t.Fatalf("exit status %d; want 0\nstderr:\n%s", r.code, r.stderr)
			}
			outs := outputs(t, r.stdout)
			var got echoResponse
			if len(outs) != 1 || json.Unmarshal(outs[0].Response, &got) != nil {
				t.Fatalf("stdout:\n%s\nwant one echo response", r.stdout)
			}
			if got.Function != c.want.Function || got.Memory != c.want.Memory || got.Logs != c.want.Logs || got.Level != c.want.Level {
				t.Errorf("function saw name %q, memory %s, log format %q, level %q; want %q, %s, %q, %q",
					got.Function, got.Memory, got.Logs, got.Level, c.want.Function, c.want.Memory, c.want.Logs, c.want.Level)
			}
			// The deadline is the invocation's start plus the timeout.
			if got.DeadlineSeconds > c.timeout || got.DeadlineSeconds < c.timeout-2 {
				t.Errorf("deadline %ds away; want the timeout, %ds", got.DeadlineSeconds, c.timeout)
			}
		})
	}
	t.Run("usage errors", func(t *testing.T) {
		for _, c := range []struct {
			name string
			args []string
			code int
			want string
		}{
			{"two functions, no -logical-id", []string{"-template", tpl}, 2, "has functions Consumer, Other: choose one with -logical-id"},
			{"no such function", []string{"-template", tpl, "-logical-id", "Nope"}, 2, "-logical-id Nope: template " + tpl + " has no such function (it has Consumer, Other)"},
			{"no template", []string{"-template", filepath.Join(dir, "nope.yaml")}, 2, "nope.yaml"},
		} {
			t.Run(c.name, func(t *testing.T) {
				r := lambdakit(t, nil, append(append([]string{"invoke"}, c.args...), echo, ev)...)
				if r.code != c.code || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
					t.Errorf("exit status %d, stdout %q, stderr:\n%s\nwant %d, nothing on stdout, and %q", r.code, r.stdout, r.stderr, c.code, c.want)
				}
			})
		}
	})
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
	for _, want := range []string{"Exit status:", "-env-file FILE", "-logical-id ID", "-timeout timeout", "-template FILE"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("invoke -h does not mention %q:\n%s", want, r.stderr)
		}
	}
}

// Every command answers -h with its full usage, its flags included, and
// exit status 0. None is a tool of the payment sample: those are the
// sample's own command (go run ./functions/payment/demo).
func TestEveryCommandHasHelp(t *testing.T) {
	for _, args := range [][]string{
		{"invoke", "-h"},
		{"run", "-h"},
		{"publish", "-h"},
		{"records", "-h"},
		{"records", "stuck", "-h"},
		{"redrive", "-help"},
		{"resend", "-h"},
		{"deploy-local", "-h"},
		{"up", "-h"},
	} {
		r := lambdakit(t, nil, args...)
		if r.code != 0 || !strings.Contains(r.stderr, "Usage: lambdakit "+args[0]) || !strings.Contains(r.stderr, "Flags:\n  -") {
			t.Errorf("lambdakit %v: exit status %d, stderr:\n%s\nwant 0 and the usage with the flags", args, r.code, r.stderr)
		}
		if strings.Contains(r.stderr, "payment sample") {
			t.Errorf("lambdakit %v: says it is a tool of the payment sample:\n%s", args, r.stderr)
		}
	}
	r := lambdakit(t, nil, "help")
	for _, name := range []string{"local", "demo"} {
		if regexp.MustCompile(`(?m)^  ` + name + ` `).MatchString(r.stdout) {
			t.Errorf("lambdakit help lists %s, the payment sample's:\n%s", name, r.stdout)
		}
		if c := lambdakit(t, nil, name, "-h"); c.code != 2 || !strings.Contains(c.stderr, "unknown command") {
			t.Errorf("lambdakit %s -h: exit status %d, stderr:\n%s\nwant 2 and an unknown command", name, c.code, c.stderr)
		}
	}
}

// -h is short: the synopsis, one paragraph, the flags and the exit
// statuses. The details are in docs/local-tooling.md and docs/operations.md,
// which the paragraph names.
func TestHelpIsShort(t *testing.T) {
	for _, name := range []string{"invoke", "run", "publish", "redrive", "resend", "records", "deploy-local", "up"} {
		r := lambdakit(t, nil, name, "-h")
		usage, _, found := strings.Cut(r.stderr, "\nFlags:\n")
		if !found {
			t.Errorf("%s -h has no flags:\n%s", name, r.stderr)
			continue
		}
		blocks := strings.Split(strings.TrimSpace(usage), "\n\n")
		if len(blocks) != 2 || strings.Count(blocks[1], "\n") >= 16 || !strings.Contains(blocks[1], "docs/") {
			t.Errorf("%s -h: %d blocks before the flags, the paragraph %d lines; want the synopsis and one paragraph under 16 lines that names its docs page:\n%s",
				name, len(blocks), strings.Count(blocks[len(blocks)-1], "\n")+1, usage)
		}
	}
}

// Every command tells a usage error in the short form, before it starts
// anything: none of these reaches an AWS endpoint or starts a server.
func TestUsageErrorsAreShort(t *testing.T) {
	_, echo := binaries(t)
	ev := writeFile(t, t.TempDir(), "event.json", `{}`)
	const queue = "http://127.0.0.1:1/123456789012/orders"
	for _, c := range []struct {
		name    string
		command string
		args    []string
		want    string
	}{
		{"invoke unknown flag", "invoke", []string{"-frobnicate", echo, ev}, "flag provided but not defined: -frobnicate"},
		{"invoke flag after the arguments", "invoke", []string{echo, ev, "-timeout", "5s"}, "flag -timeout after the arguments"},
		{"invoke missing value", "invoke", []string{"-timeout"}, "flag needs an argument: -timeout"},
		{"run unknown flag", "run", []string{"-frobnicate", echo}, "flag provided but not defined: -frobnicate"},
		{"run flag after the arguments", "run", []string{"-queue", queue, echo, "-until-empty"}, "flag -until-empty after the arguments"},
		{"publish unknown flag", "publish", []string{"-frobnicate", ev}, "flag provided but not defined: -frobnicate"},
		{"publish flag after the arguments", "publish", []string{"-queue", queue, ev, "-max-size", "5"}, "flag -max-size after the arguments"},
		{"records unknown flag", "records", []string{"get", "-frobnicate", "k"}, "flag provided but not defined: -frobnicate"},
		{"records flag after the arguments", "records", []string{"get", "-table", "t", "k", "-prefix", "p"}, "flag -prefix after the arguments"},
		{"records without an action", "records", nil, "want get, delete, stuck or failed"},
		{"redrive unknown flag", "redrive", []string{"-frobnicate"}, "flag provided but not defined: -frobnicate"},
		{"redrive flag after the arguments", "redrive", []string{"-from", queue, "extra", "-to", queue + "2"}, "flag -to after the arguments"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := lambdakit(t, nil, append([]string{c.command}, c.args...)...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit status %d, stderr:\n%s\nwant 2 and %q", r.code, r.stderr, c.want)
			}
			checkShortUsage(t, r, c.command)
		})
	}
}

// "--" lets an argument start with "-"; "-" alone is standard input.
func TestInvokeDashArguments(t *testing.T) {
	_, echo := binaries(t)
	dir := t.TempDir()
	writeFile(t, dir, "-event.json", `{"n": 1}`)
	cli, _ := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, "invoke", "-timeout", "10s", "--", echo, "-event.json", "-")
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(`{"n": 2}`)
	out, err := cmd.Output()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		t.Fatalf("exit status %d; stderr:\n%s", exitErr.ExitCode(), exitErr.Stderr)
	} else if err != nil {
		t.Fatal(err)
	}
	if got := len(outputs(t, string(out))); got != 2 {
		t.Errorf("%d results; want 2 (the file named -event.json, then standard input)\n%s", got, out)
	}
}

// checkShortUsage checks that a usage error is told in a few lines that
// say where the full usage is, and nothing goes to standard output.
func checkShortUsage(t *testing.T, r cliResult, command string) {
	t.Helper()
	if n := strings.Count(r.stderr, "\n"); n > 3 {
		t.Errorf("usage error in %d lines; want 3 at most:\n%s", n, r.stderr)
	}
	if want := "Run 'lambdakit " + command + " -h'"; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr:\n%s\nwant it to say %q", r.stderr, want)
	}
	if r.stdout != "" {
		t.Errorf("stdout = %q; want nothing", r.stdout)
	}
}

// The generic commands default to nothing of the payment sample: no table,
// prefix, function name, logical ID or port of it. What the sample needs,
// flags or its template give.
func TestGenericCommandsHaveNoSampleDefaults(t *testing.T) {
	for _, name := range []string{"invoke", "run", "publish", "records", "redrive", "resend", "deploy-local", "up"} {
		r := lambdakit(t, []string{"IDEMPOTENCY_TABLE="}, name, "-h")
		if name == "records" {
			r = lambdakit(t, []string{"IDEMPOTENCY_TABLE="}, name, "get", "-h")
		}
		_, flags, ok := strings.Cut(r.stderr, "Flags:\n")
		if !ok {
			t.Fatalf("%s -h has no flags:\n%s", name, r.stderr)
		}
		for _, line := range strings.Split(flags, "\n") {
			lower := strings.ToLower(line)
			if strings.Contains(lower, "(default") && (strings.Contains(lower, "payment") || strings.Contains(lower, "lambdakit-") ||
				strings.Contains(lower, "5000") || strings.Contains(lower, "8080")) {
				t.Errorf("%s -h: a default of the payment sample: %s", name, strings.TrimSpace(line))
			}
		}
	}
}

// The CLI shares its helpers with the tests through internal packages
// (logline ...), never through a test package: the binary must not link
// package testing, whose flags and init would come with it.
func TestCLIDoesNotLinkTesting(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, dep := range deps {
		if dep == "testing" || strings.HasSuffix(dep, "/testenv") || strings.HasSuffix(dep, "test") && strings.Contains(dep, "lambdakit/") {
			t.Errorf("the CLI depends on %s", dep)
		}
	}
	if len(deps) < 10 {
		t.Errorf("go list gave %d packages; want the whole dependency graph", len(deps))
	}
}

// invoke runs any function built with aws-lambda-go, so an event that is
// not an SQS event is run, not refused. But an SQS function given one (a
// message body on its own, the first mistake with a consumer) sees no
// records and answers with a success: a warning on standard error says what
// the event is and what an SQS function wants. A function that is not an
// SQS function gets no warning.
func TestInvokeWarnsWhenAnSQSFunctionGetsAnotherEvent(t *testing.T) {
	_, echo := binaries(t)
	sqsFn := testenv.Build(t, "../../internal/esm/testdata/esmfn") // answers with batchItemFailures
	dir := t.TempDir()
	bare := writeFile(t, dir, "bare.json", `{"payment_id":"p1"}`)
	sqsEvent := writeFile(t, dir, "sqs.json", `{"Records":[{"messageId":"m1","body":"ok","eventSource":"aws:sqs"}]}`)
	snsEvent := writeFile(t, dir, "sns.json", `{"Records":[{"EventSource":"aws:sns","Sns":{"Message":"x"}}]}`)
	tpl := writeFile(t, dir, "template.yaml", `Resources:
  Queue:
    Type: AWS::SQS::Queue
  Consumer:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        Orders:
          Type: SQS
          Properties:
            Queue: !GetAtt Queue.Arn
`)
	for _, c := range []struct {
		name string
		args []string
		want []string // in the warning; none: no warning
	}{
		{"an SQS function, a message body", []string{sqsFn, bare},
			[]string{"lambdakit invoke: warning: " + bare + " is not an SQS event", `an object with the key "payment_id"`, `{"Records": [...]}`, `"body"`}},
		{"an SQS function, an SNS event", []string{sqsFn, snsEvent},
			[]string{"lambdakit invoke: warning: " + snsEvent + " is not an SQS event", `records from "aws:sns"`}},
		{"the template's SQS function, a message body", []string{"-template", tpl, echo, bare},
			[]string{"lambdakit invoke: warning: " + bare + " is not an SQS event"}},
		{"an SQS function, an SQS event", []string{sqsFn, sqsEvent}, nil},
		{"another function, any event", []string{echo, bare}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := lambdakit(t, nil, append([]string{"invoke"}, c.args...)...)
			if r.code != 0 {
				t.Fatalf("exit status %d; want 0\n%s", r.code, r.stderr)
			}
			if outs := outputs(t, r.stdout); len(outs) != 1 || outs[0].Outcome != "success" {
				t.Errorf("stdout:\n%s\nwant one success, as before", r.stdout)
			}
			if c.want == nil && strings.Contains(r.stderr, "warning") {
				t.Errorf("stderr:\n%s\nwant no warning", r.stderr)
			}
			for _, want := range c.want {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
				}
			}
		})
	}
}

// The flag package appends "(default X)" to a flag's help when its default
// is not the zero value; a help text that states the default itself must
// not get a second one.
func TestFlagHelpShowsOneDefault(t *testing.T) {
	// Left to run.go's owner, who is changing it: remove them from here
	// once fixed.
	known := map[string]bool{}
	appended := regexp.MustCompile(` \(default [^()]*\)$`)
	for _, args := range [][]string{{"invoke", "-h"}, {"run", "-h"}, {"publish", "-h"}, {"records", "get", "-h"}, {"redrive", "-h"}} {
		// A table in the environment gives records' -table a value.
		r := lambdakit(t, []string{"IDEMPOTENCY_TABLE=orders-idempotency"}, args...)
		_, flags, ok := strings.Cut(r.stderr, "Flags:\n")
		if !ok {
			t.Fatalf("%s -h has no flags:\n%s", args[0], r.stderr)
		}
		flags, _, _ = strings.Cut(flags, "\nExit status:")
		for _, entry := range regexp.MustCompile(`(?m)^  -`).Split(flags, -1)[1:] {
			name, _, _ := strings.Cut(entry, " ")
			name, _, _ = strings.Cut(name, "\n")
			help := strings.Join(strings.Fields(entry), " ")
			if loc := appended.FindStringIndex(help); loc != nil && strings.Contains(strings.ToLower(help[:loc[0]]), "default") {
				id := args[0] + " -" + name
				if known[id] {
					t.Logf("%s: two defaults, left to run.go: %s", id, help)
					continue
				}
				t.Errorf("%s: two defaults: %s", id, help)
			}
		}
	}
}
