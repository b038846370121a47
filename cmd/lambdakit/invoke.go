package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lambdakit/lambdakit/internal/runtimeapi"
)

const invokeUsage = `Usage: lambdakit invoke [flags] BOOTSTRAP EVENT_FILE...

Runs BOOTSTRAP, a Lambda function binary built for this machine (a Go program
using aws-lambda-go, runtime provided.al2023), under a local Lambda Runtime
API, without Docker, and feeds it each EVENT_FILE in order ("-" reads standard
input). One process serves every event and stays warm between them, as on
Lambda; after a crash, a timeout or a failed init, the next event gets a new
process. Flags come before the arguments.

Standard output gets one pretty-printed JSON object per event, in order:
  {"event": FILE, "requestId": ID, "outcome": "success", "response": ...}
  {"event": FILE, "requestId": ID, "outcome": OUTCOME, "error": {"errorType": ..., "errorMessage": ...}}
where OUTCOME is "function error", "init error", "crash" or "timeout".
Standard error gets the function's own output, a REPORT line per event and a
line for each failure, so that standard output stays machine-readable.

The function sees the variables Lambda sets (AWS_LAMBDA_RUNTIME_API,
AWS_LAMBDA_FUNCTION_NAME, AWS_LAMBDA_FUNCTION_VERSION=$LATEST,
AWS_LAMBDA_FUNCTION_MEMORY_SIZE, AWS_REGION, _HANDLER=bootstrap,
LAMBDA_TASK_ROOT, TZ=:UTC, AWS_LAMBDA_LOG_FORMAT=JSON with -log-format json),
on top of this shell's environment and the -env-file variables. It runs in
BOOTSTRAP's directory.

-env-file takes the file of 'sam local invoke --env-vars':
  {"Parameters": {"VAR": "value"}, "PaymentFunction": {"VAR": "value"}}
Variables under "Parameters" apply to every function; the section of the
function, chosen by -logical-id, adds to them and wins. Without -logical-id,
the file's one function section is used, or PaymentFunction when there are
several. Unlike sam, every variable in the section is set, not only those the
template declares. Variables Lambda reserves (AWS_LAMBDA_*, _HANDLER, TZ ...)
are ignored, except that AWS_REGION sets the region when -region is not given.

Flags:
`

const invokeExitStatus = `
Exit status:
  0    every invocation succeeded
  1    at least one invocation failed: function error, init error, crash or timeout
  2    usage error, or an event or env file that cannot be read
  3    the bootstrap could not be started (not executable, built for another
       OS or architecture) or the local Runtime API failed
  130  interrupted
`

// defaultLogicalID is the function the env file section defaults to when the
// file has several: the sample function's logical ID in template.yaml.
const defaultLogicalID = "PaymentFunction"

// functionFlags describe the function and its environment: the flags that
// invoke and run share.
type functionFlags struct {
	timeout      time.Duration
	memory       int
	functionName string
	region       string
	envFile      string
	logicalID    string
	logFormat    string
	logLevel     string
}

// define defines the flags on fs; timeoutHelp ends the -timeout line.
func (f *functionFlags) define(fs *flag.FlagSet, timeout time.Duration, timeoutHelp string) {
	fs.DurationVar(&f.timeout, "timeout", timeout, "the function's `timeout`: "+timeoutHelp)
	fs.IntVar(&f.memory, "memory", 256, "the function's memory in `MB`, as AWS_LAMBDA_FUNCTION_MEMORY_SIZE (not enforced)")
	fs.StringVar(&f.functionName, "function-name", "payment", "the function's `name`, as AWS_LAMBDA_FUNCTION_NAME and in its ARN")
	fs.StringVar(&f.region, "region", "", "the `region` the function runs in (default: AWS_REGION from the env file, else AWS_REGION or AWS_DEFAULT_REGION, else us-east-1)")
	fs.StringVar(&f.envFile, "env-file", "", "extra environment variables from `FILE`, in the JSON shape of 'sam local invoke --env-vars'")
	fs.StringVar(&f.logicalID, "logical-id", "", "the function's logical `ID`: which section of -env-file to use (default: the only one, else "+defaultLogicalID+")")
	fs.StringVar(&f.logFormat, "log-format", "json", "the function's log `format`: json (as template.yaml) or text; json sets AWS_LAMBDA_LOG_FORMAT=JSON")
	fs.StringVar(&f.logLevel, "log-level", "", "with -log-format json, the application log `level` in AWS_LAMBDA_LOG_LEVEL (DEBUG, INFO, WARN, ERROR)")
}

// check validates the flags, normalizing -log-format, and returns what is
// wrong in a line, or "".
func (f *functionFlags) check() string {
	switch f.logFormat = strings.ToLower(f.logFormat); f.logFormat {
	case "text", "json":
	default:
		return fmt.Sprintf("-log-format %q: want text or json", f.logFormat)
	}
	if f.timeout <= 0 {
		return fmt.Sprintf("-timeout %v: want a positive duration", f.timeout)
	}
	if f.memory <= 0 {
		return fmt.Sprintf("-memory %d: want a positive number of MB", f.memory)
	}
	if f.functionName == "" {
		return "-function-name: want a name"
	}
	return ""
}

// environment reads -env-file, if given, and returns its variables and the
// function's region: -region, else AWS_REGION or AWS_DEFAULT_REGION from the
// env file, then from environ, else fallback.
func (f *functionFlags) environment(environ []string, fallback string) (extra []string, region string, err error) {
	if f.envFile != "" {
		if extra, err = readEnvFile(f.envFile, f.logicalID); err != nil {
			return nil, "", err
		}
	}
	region = firstNonEmpty(f.region, lookup(extra, "AWS_REGION"), lookup(extra, "AWS_DEFAULT_REGION"),
		lookup(environ, "AWS_REGION"), lookup(environ, "AWS_DEFAULT_REGION"), fallback)
	return extra, region, nil
}

// newRunner prepares a Runner of bootstrap with the function's settings, the
// caller's environment plus extra, and its output on standard error.
func (f *functionFlags) newRunner(std stdio, bootstrap, region string, extra []string) (*runtimeapi.Runner, error) {
	return runtimeapi.NewRunner(bootstrap, func(o *runtimeapi.RunnerOptions) {
		o.FunctionName = f.functionName
		o.Region = region
		o.Timeout = f.timeout
		o.MemoryMB = f.memory
		o.Env = append(slices.Clip(std.environ), extra...)
		o.Stdout, o.Stderr = std.stderr, std.stderr
		o.LogFormat = f.logFormat
		o.LogLevel = f.logLevel
	})
}

// startFailure explains an error that kept the bootstrap from starting.
func startFailure(err error, bootstrap string) string {
	switch {
	case errors.Is(err, syscall.ENOEXEC):
		return fmt.Sprintf("%v\nThe bootstrap is not a program for this machine: build it with GOOS=%s GOARCH=%s (a bootstrap built for Lambda's arm64 will not run here otherwise).", err, runtime.GOOS, runtime.GOARCH)
	case errors.Is(err, os.ErrPermission):
		return fmt.Sprintf("%v\nThe bootstrap is not executable: chmod +x %s", err, bootstrap)
	}
	return err.Error()
}

// invokeFlags holds the parsed command line of invoke.
type invokeFlags struct {
	functionFlags
	bootstrap string
	events    []string
}

func parseInvokeFlags(std stdio, args []string) (*invokeFlags, int) {
	f := &invokeFlags{}
	fs := newFlags("invoke", invokeUsage, invokeExitStatus)
	f.define(fs.FlagSet, 60*time.Second, "each event's deadline is its start plus this (template.yaml says 60s)")
	rest, code, ok := fs.parse(std, args)
	if !ok {
		return nil, code
	}
	if len(rest) < 2 {
		return nil, fs.usageError(std, "need a BOOTSTRAP and at least one EVENT_FILE")
	}
	f.bootstrap, f.events = rest[0], rest[1:]
	if msg := f.check(); msg != "" {
		return nil, fs.usageError(std, "%s", msg)
	}
	return f, exitOK
}

// event is one event file, read before anything starts so that a typo fails
// fast.
type event struct {
	name string
	body []byte
}

func runInvoke(ctx context.Context, std stdio, args []string) int {
	f, code := parseInvokeFlags(std, args)
	if f == nil {
		return code
	}
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(std.stderr, "lambdakit invoke: "+format+"\n", args...)
		return code
	}

	events := make([]event, 0, len(f.events))
	for _, name := range f.events {
		var body []byte
		var err error
		if name == "-" {
			body, err = io.ReadAll(std.stdin)
		} else {
			body, err = os.ReadFile(name)
		}
		if err != nil {
			return fail(exitUsage, "event: %v", err)
		}
		if !json.Valid(body) {
			// Lambda's Invoke API refuses such a payload before any function runs.
			return fail(exitUsage, "event %s is not valid JSON", name)
		}
		events = append(events, event{name, body})
	}
	extra, region, err := f.environment(std.environ, "us-east-1")
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	runner, err := f.newRunner(std, f.bootstrap, region, extra)
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	defer runner.Close()

	failed := false
	for _, ev := range events {
		res, err := runner.Invoke(ctx, ev.body)
		if err != nil {
			if ctx.Err() != nil {
				return fail(exitInterrupted, "interrupted during %s", ev.name)
			}
			return fail(exitCannotRun, "%s: %s", ev.name, startFailure(err, f.bootstrap))
		}
		report(std.stderr, &f.functionFlags, res)
		if res.Outcome != runtimeapi.OutcomeSuccess {
			failed = true
			fmt.Fprintf(std.stderr, "lambdakit invoke: %s: %s\n", ev.name, describe(res, f.timeout))
		}
		if err := printResult(std.stdout, ev.name, res); err != nil {
			return fail(exitCannotRun, "write: %v", err)
		}
	}
	if err := runner.Close(); err != nil {
		return fail(exitCannotRun, "stop the function: %v", err)
	}
	if failed {
		return exitFailed
	}
	return exitOK
}

// describe says in a line what went wrong and what happens next.
func describe(res runtimeapi.Result, timeout time.Duration) string {
	e := res.Error
	exited := "exited with status " + strconv.Itoa(res.ExitCode)
	if res.ExitCode < 0 {
		exited = "was killed by a signal"
	}
	switch res.Outcome {
	case runtimeapi.OutcomeFunctionError:
		return fmt.Sprintf("function error: %s: %s", e.Type, e.Message)
	case runtimeapi.OutcomeInitError:
		if e.Type == "Runtime.ExitError" {
			return fmt.Sprintf("init error: the process %s before asking for an event (%s); the next event starts a new process", exited, e.Type)
		}
		return fmt.Sprintf("init error: %s: %s; the next event starts a new process", e.Type, e.Message)
	case runtimeapi.OutcomeCrash:
		return fmt.Sprintf("crash: the process %s during the invocation (%s); the next event starts a new process", exited, e.Type)
	case runtimeapi.OutcomeTimeout:
		return fmt.Sprintf("timeout: no answer within %v; the process was killed and the next event starts a new one", timeout)
	}
	return res.Outcome.String()
}

// output is what invoke prints on standard output for one event.
type output struct {
	Event     string                    `json:"event"`
	RequestID string                    `json:"requestId"`
	Outcome   string                    `json:"outcome"`
	Response  any                       `json:"response,omitempty"`
	Error     *runtimeapi.FunctionError `json:"error,omitempty"`
}

func printResult(w io.Writer, name string, res runtimeapi.Result) error {
	out := output{Event: name, RequestID: res.RequestID, Outcome: res.Outcome.String(), Error: res.Error}
	if res.Outcome == runtimeapi.OutcomeSuccess {
		switch p := bytes.TrimSpace(res.Payload); {
		case len(p) == 0:
			out.Response = json.RawMessage("null")
		case json.Valid(p):
			out.Response = json.RawMessage(p)
		default:
			out.Response = string(res.Payload) // a function may answer with raw bytes
		}
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// report writes Lambda's REPORT line for the invocation, in the log format
// the function uses, so that durations can be read as on CloudWatch.
func report(w io.Writer, f *functionFlags, res runtimeapi.Result) {
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Millisecond)*100) / 100 }
	billed := int64(math.Ceil(float64(res.Duration+res.InitDuration) / float64(time.Millisecond)))
	status := "success"
	switch res.Outcome {
	case runtimeapi.OutcomeSuccess, runtimeapi.OutcomeFunctionError:
	case runtimeapi.OutcomeTimeout:
		status = "timeout"
	default:
		status = "error"
	}
	if f.logFormat == "json" {
		// Field order as in Lambda's platform.report records.
		type metrics struct {
			DurationMS       float64  `json:"durationMs"`
			BilledDurationMS int64    `json:"billedDurationMs"`
			MemorySizeMB     int      `json:"memorySizeMB"`
			InitDurationMS   *float64 `json:"initDurationMs,omitempty"`
		}
		type record struct {
			RequestID string  `json:"requestId"`
			Metrics   metrics `json:"metrics"`
			Status    string  `json:"status"`
			ErrorType string  `json:"errorType,omitempty"`
		}
		rec := record{RequestID: res.RequestID, Status: status,
			Metrics: metrics{DurationMS: ms(res.Duration), BilledDurationMS: billed, MemorySizeMB: f.memory}}
		if res.InitDuration > 0 {
			d := ms(res.InitDuration)
			rec.Metrics.InitDurationMS = &d
		}
		if status == "error" {
			rec.ErrorType = res.Error.Type
		}
		b, _ := json.Marshal(struct {
			Time   string `json:"time"`
			Type   string `json:"type"`
			Record record `json:"record"`
		}{time.Now().UTC().Format(time.RFC3339Nano), "platform.report", rec})
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	line := "REPORT RequestId: " + res.RequestID
	if res.InitDuration > 0 {
		line += fmt.Sprintf("\tInit Duration: %.2f ms", ms(res.InitDuration))
	}
	line += fmt.Sprintf("\tDuration: %.2f ms\tBilled Duration: %d ms\tMemory Size: %d MB", ms(res.Duration), billed, f.memory)
	if status != "success" {
		line += "\tStatus: " + status
		if status == "error" {
			line += "\tError Type: " + res.Error.Type
		}
	}
	fmt.Fprintln(w, line)
}

// readEnvFile reads a 'sam local invoke --env-vars' file and returns the
// variables for the function logicalID (see invokeUsage for the rules), as
// KEY=value in a stable order.
func readEnvFile(path, logicalID string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("env file: %w", err)
	}
	var sections map[string]map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // a number's text, as written, is the value
	if err := dec.Decode(&sections); err != nil {
		return nil, fmt.Errorf("env file %s: want {\"LogicalId\": {\"VAR\": \"value\"}, ...}: %w", path, err)
	}
	var functions []string
	for name := range sections {
		if name != "Parameters" {
			functions = append(functions, name)
		}
	}
	slices.Sort(functions)
	if logicalID == "" {
		switch {
		case len(functions) == 1:
			logicalID = functions[0]
		case len(functions) > 1 && slices.Contains(functions, defaultLogicalID):
			logicalID = defaultLogicalID
		case len(functions) > 1:
			return nil, fmt.Errorf("env file %s has sections for %s: choose one with -logical-id", path, strings.Join(functions, ", "))
		}
	} else if _, ok := sections[logicalID]; !ok && len(functions) > 0 {
		return nil, fmt.Errorf("env file %s has no section %s (it has %s)", path, logicalID, strings.Join(functions, ", "))
	}

	var env []string
	for _, section := range []string{"Parameters", logicalID} {
		vars := sections[section]
		names := make([]string, 0, len(vars))
		for name := range vars {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			var value string
			switch v := vars[name].(type) {
			case string:
				value = v
			case json.Number:
				value = v.String() // sam accepts numbers and booleans and passes their text
			case bool:
				value = fmt.Sprint(v)
			case nil:
				continue
			default:
				return nil, fmt.Errorf("env file %s: %s.%s: want a string, number or boolean", path, section, name)
			}
			if name == "" || strings.ContainsAny(name, "=\x00") {
				return nil, fmt.Errorf("env file %s: %s: %q is not a variable name", path, section, name)
			}
			env = append(env, name+"="+value)
		}
	}
	return env, nil
}

// lookup returns the last value of name in env, or "".
func lookup(env []string, name string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == name {
			return v
		}
	}
	return ""
}

func firstNonEmpty(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}
