package rie

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lambdakit/lambdakit/internal/childproc"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
)

// Module is the emulator's Go module; internal/rie/tool/go.mod pins its
// version.
const Module = "github.com/aws/aws-lambda-runtime-interface-emulator"

// toolModuleDir is the pinning module's folder, from the main module's root.
const toolModuleDir = "internal/rie/tool"

// invokePath is the emulator's invoke endpoint, the Lambda Invoke API's
// path for a function named "function".
const invokePath = "/2015-03-31/functions/function/invocations"

// timedOut starts the body aws-lambda-rie answers a timeout with: plain
// text, "Task timed out after 3.00 seconds", not an error document.
const timedOut = "Task timed out after "

// toolDir returns the folder of the module that pins the emulator. It
// finds the main module from the working directory, so it works anywhere
// inside the repository: a test's package folder, the root for make.
func toolDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("rie: go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("rie: not inside the lambdakit module: run from the repository")
	}
	dir := filepath.Join(filepath.Dir(gomod), filepath.FromSlash(toolModuleDir))
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("rie: the module pinning aws-lambda-rie: %w", err)
	}
	return dir, nil
}

// Build builds aws-lambda-rie, the version internal/rie/tool pins, and
// returns the path of the binary. It runs `go tool -n aws-lambda-rie` in
// that module: go downloads the module from the module proxy if the module
// cache lacks it, checks it against the module's go.sum, and keeps the
// binary in the build cache, so that a second Build costs nothing.
func Build(ctx context.Context) (string, error) {
	path, err := goInTool(ctx, "tool", "-n", "aws-lambda-rie")
	if err != nil {
		return "", err
	}
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("rie: go tool -n printed %q, which is not a binary", path)
	}
	return path, nil
}

// Version returns the emulator's pinned module version.
func Version(ctx context.Context) (string, error) {
	return goInTool(ctx, "list", "-m", "-f", "{{.Version}}", Module)
}

// goInTool runs the go command with args in the module that pins the
// emulator and returns its standard output, trimmed.
func goInTool(ctx context.Context, args ...string) (string, error) {
	dir, err := toolDir(ctx)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("rie: go %s in %s: %w\n%s", strings.Join(args, " "), toolModuleDir, err, stderr.Bytes())
	}
	return strings.TrimSpace(string(out)), nil
}

// Options configures an Emulator like runtimeapi.RunnerOptions configures
// a Runner, so that the function sees the same settings under both. The
// zero value of each field means its default, the Runner's.
type Options struct {
	// FunctionName is AWS_LAMBDA_FUNCTION_NAME. Default "function".
	FunctionName string
	// Region is AWS_REGION and AWS_DEFAULT_REGION. Default "us-east-1".
	Region string
	// Timeout is the function's timeout, AWS_LAMBDA_FUNCTION_TIMEOUT: a
	// whole number of seconds, which is all aws-lambda-rie takes. Default
	// 3s.
	Timeout time.Duration
	// MemoryMB is AWS_LAMBDA_FUNCTION_MEMORY_SIZE. Default 128.
	MemoryMB int
	// LogFormat "JSON" sets AWS_LAMBDA_LOG_FORMAT=JSON, and LogLevel then
	// AWS_LAMBDA_LOG_LEVEL, as the Runner does.
	LogFormat, LogLevel string
	// Env is the function's environment besides the variables Lambda sets,
	// as "KEY=value". aws-lambda-rie hands its own environment to the
	// function, so Env is the emulator's environment too: nothing of this
	// process's environment is passed unless Env holds it. Names Lambda
	// reserves (AWS_LAMBDA_*, AWS_REGION, _HANDLER, TZ ...) are dropped, as
	// the Runner drops them.
	Env []string
	// Stdout and Stderr receive the emulator's output: its log, its START,
	// END and REPORT lines, and the function's own output. Nil discards it.
	Stdout, Stderr io.Writer
}

func (o *Options) finish() error {
	if o.FunctionName == "" {
		o.FunctionName = "function"
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Second
	}
	if o.MemoryMB == 0 {
		o.MemoryMB = 128
	}
	if o.Timeout < time.Second || o.Timeout%time.Second != 0 {
		return fmt.Errorf("rie: timeout %v: aws-lambda-rie takes whole seconds only", o.Timeout)
	}
	switch strings.ToUpper(o.LogFormat) {
	case "", "TEXT":
		o.LogFormat = "Text"
	case "JSON":
		o.LogFormat = "JSON"
	default:
		return fmt.Errorf("rie: log format %q is neither Text nor JSON", o.LogFormat)
	}
	return nil
}

// lambdaSets are the names, besides AWS_LAMBDA_*, that Lambda sets itself
// and a function's configuration cannot.
var lambdaSets = map[string]bool{
	"AWS_REGION": true, "AWS_DEFAULT_REGION": true, "_HANDLER": true, "_X_AMZN_TRACE_ID": true,
	"LAMBDA_TASK_ROOT": true, "LAMBDA_RUNTIME_DIR": true, "AWS_EXECUTION_ENV": true, "TZ": true,
}

// environ is the emulator's environment: Env less the reserved names, then
// the variables the Runner sets for a provided.al2023 function, then the
// emulator's timeout.
func (o *Options) environ(taskRoot string) []string {
	var env []string
	for _, kv := range o.Env {
		name, _, _ := strings.Cut(kv, "=")
		// AWS_LAMBDA_MAX_CONCURRENCY, among them, would switch the emulator
		// to Lambda Managed Instances.
		if !strings.HasPrefix(name, "AWS_LAMBDA_") && !lambdaSets[name] {
			env = append(env, kv)
		}
	}
	env = append(env,
		"AWS_LAMBDA_FUNCTION_NAME="+o.FunctionName,
		"AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE="+strconv.Itoa(o.MemoryMB),
		"AWS_LAMBDA_FUNCTION_TIMEOUT="+strconv.Itoa(int(o.Timeout/time.Second)),
		"AWS_LAMBDA_INITIALIZATION_TYPE=on-demand",
		"AWS_LAMBDA_LOG_GROUP_NAME=/aws/lambda/"+o.FunctionName,
		"AWS_REGION="+o.Region,
		"AWS_DEFAULT_REGION="+o.Region,
		"_HANDLER=bootstrap",
		"LAMBDA_TASK_ROOT="+taskRoot,
		"TZ=:UTC",
	)
	if o.LogFormat == "JSON" {
		env = append(env, "AWS_LAMBDA_LOG_FORMAT=JSON")
		if o.LogLevel != "" {
			env = append(env, "AWS_LAMBDA_LOG_LEVEL="+strings.ToUpper(o.LogLevel))
		}
	}
	return env
}

// Emulator is one aws-lambda-rie process serving one bootstrap, on two
// loopback ports of its own: its invoke endpoint and the Runtime API it
// serves the function. It starts the bootstrap on the first invocation and
// again after a crash, a timeout or a failed init, as Lambda does.
// Invocations are served one at a time. Close stops it.
type Emulator struct {
	opts     Options
	cmd      *exec.Cmd
	exited   chan struct{} // closed once cmd.Wait has returned
	url      string        // the invoke endpoint
	apiAddr  string        // the Runtime API's address
	client   *http.Client
	mu       sync.Mutex // one invocation at a time, as the emulator serves them
	stopOnce sync.Once
}

// startBound bounds the wait for a new emulator to listen.
const startBound = 10 * time.Second

// Start starts aws-lambda-rie (the binary at rie, from Build) to serve the
// bootstrap at bootstrap, in the bootstrap's folder as the Runner runs it.
func Start(rie, bootstrap string, optFns ...func(*Options)) (*Emulator, error) {
	var o Options
	for _, fn := range optFns {
		fn(&o)
	}
	if err := o.finish(); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(bootstrap)
	if err != nil {
		return nil, fmt.Errorf("rie: %w", err)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("rie: bootstrap %s is not a file", bootstrap)
	}
	// A free port can be taken between the probe and the emulator's
	// listen; a start that fails so is tried again on other ports.
	var errs []error
	for range 3 {
		e, err := start(rie, abs, o)
		if err == nil {
			return e, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func start(rie, bootstrap string, o Options) (*Emulator, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	apiAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(rie,
		"--runtime-interface-emulator-address", addr,
		"--runtime-api-address", apiAddr,
		bootstrap)
	cmd.Dir = filepath.Dir(bootstrap)
	cmd.Env = o.environ(cmd.Dir)
	cmd.Stdout, cmd.Stderr = o.Stdout, o.Stderr
	cmd.WaitDelay = time.Second
	childproc.Setup(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("rie: start aws-lambda-rie: %w", err)
	}
	e := &Emulator{
		opts:    o,
		cmd:     cmd,
		exited:  make(chan struct{}),
		url:     "http://" + addr + invokePath,
		apiAddr: apiAddr,
		// Loopback only, and no proxy from the environment.
		client: &http.Client{Transport: &http.Transport{Proxy: nil}},
	}
	go func() {
		_ = cmd.Wait()
		close(e.exited)
	}()
	// Ready once both ports accept: the emulator binds the Runtime API's at
	// start too, and exits if either is taken.
	deadline := time.Now().Add(startBound)
	for {
		if listening(addr) && listening(apiAddr) {
			return e, nil
		}
		select {
		case <-e.exited:
			return nil, fmt.Errorf("rie: aws-lambda-rie exited before it listened on %s: %v", addr, cmd.ProcessState)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			e.Close()
			return nil, fmt.Errorf("rie: aws-lambda-rie did not listen on %s and %s within %v", addr, apiAddr, startBound)
		}
	}
}

// listening reports whether something accepts connections on addr.
func listening(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// freeAddr returns a loopback address with a port nothing listens on.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("rie: find a free port: %w", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr, nil
}

// Response is the emulator's answer to an invocation, as it came.
type Response struct {
	// RequestID is the invocation's request ID, which Invoke chose and sent
	// in X-Amzn-RequestId, the header aws-lambda-rie takes it from.
	RequestID string
	// Status is the HTTP status: 200 when the function answered (with a
	// response, an error document, or the text of a timeout), 502 when its
	// process exited during the invocation or its init failed.
	Status int
	// Body is the answer's body.
	Body []byte
	// Duration is the time from the post to the answer, init included.
	Duration time.Duration
}

// maxBody bounds the answer Invoke reads: more than Lambda's 6 MB limit on
// a response, which the emulator enforces.
const maxBody = 8 << 20

// Invoke posts event and returns the emulator's answer. Failures of the
// function are in the Response; the error is non-nil when ctx ends, the
// emulator cannot be reached or exits, or it answers with a status other
// than 200 and 502 (a request it refused).
func (e *Emulator) Invoke(ctx context.Context, event []byte) (Response, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-e.exited:
		return Response{}, fmt.Errorf("rie: aws-lambda-rie is not running: %v", e.cmd.ProcessState)
	default:
	}
	// The emulator ends an invocation at its timeout, init included; the
	// rest is room for a reset and a slow machine.
	ctx, cancel := context.WithTimeout(ctx, e.opts.Timeout+30*time.Second)
	defer cancel()
	id := newRequestID()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(event))
	if err != nil {
		return Response{}, fmt.Errorf("rie: %w", err)
	}
	req.Header.Set("X-Amzn-RequestId", id)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := e.client.Do(req)
	if err != nil {
		return Response{RequestID: id}, fmt.Errorf("rie: invoke: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return Response{RequestID: id}, fmt.Errorf("rie: read the answer: %w", err)
	}
	r := Response{RequestID: id, Status: resp.StatusCode, Body: body, Duration: time.Since(start)}
	if r.Status != http.StatusOK && r.Status != http.StatusBadGateway {
		return r, fmt.Errorf("rie: aws-lambda-rie answered %s: %q", resp.Status, body)
	}
	return r, nil
}

// RuntimeAPIAddr is the address of the Runtime API the emulator serves the
// function, its AWS_LAMBDA_RUNTIME_API.
func (e *Emulator) RuntimeAPIAddr() string { return e.apiAddr }

// PID is the emulator's process ID; the function's process runs in its
// process group.
func (e *Emulator) PID() int { return e.cmd.Process.Pid }

// KillFunction kills the function's process with SIGKILL, as when an
// execution environment dies under a function, like runtimeapi.Runner.Kill:
// an invocation in progress then ends as a crash, and the emulator starts a
// new process for the next one. It reports whether there was a process to
// kill. It reads /proc, as the emulator runs on Linux only.
func (e *Emulator) KillFunction() bool {
	killed := false
	for _, p := range e.functions() {
		killed = p.kill() || killed
	}
	return killed
}

// process is a process by its ID and its start time, which tell it from a
// later process that reuses the ID.
type process struct {
	pid   int
	start string
}

// kill sends SIGKILL to p if it is still the process it was.
func (p process) kill() bool {
	if f := childproc.Stat(p.pid); len(f) < 20 || f[19] != p.start {
		return false
	}
	proc, err := os.FindProcess(p.pid)
	return err == nil && proc.Kill() == nil
}

// functions returns the emulator's child processes: the function's, which
// the emulator starts in a process group of their own, out of reach of a
// signal to the emulator's group.
func (e *Emulator) functions() []process {
	parent := strconv.Itoa(e.cmd.Process.Pid)
	var procs []process
	for _, p := range childproc.Processes(func(f []string) bool { return len(f) >= 20 && f[1] == parent }) {
		procs = append(procs, process{p.PID, p.Stat[19]})
	}
	return procs
}

// Close stops the emulator and the function with it: SIGTERM to the
// emulator, which then kills the function, as `docker stop` would; SIGKILL
// to both if that takes too long.
func (e *Emulator) Close() error {
	e.stopOnce.Do(func() {
		functions := e.functions()
		childproc.Signal(e.cmd, false)
		select {
		case <-e.exited:
		case <-time.After(5 * time.Second):
		}
		childproc.Signal(e.cmd, true)
		select {
		case <-e.exited:
		case <-time.After(10 * time.Second): // SIGKILL cannot be ignored; a guard, not a path
		}
		// Gone already, unless the emulator was killed before it could
		// stop them.
		for _, p := range functions {
			p.kill()
		}
	})
	return nil
}

// Result reads the answer as the runtimeapi.Result that Lambda's answer
// would give, so that it can be compared with a Runner's. The Payload is
// the body as the emulator sent it. aws-lambda-rie drops the
// X-Amz-Function-Error header that tells Lambda's caller a failure from a
// response, so Result reads the body:
//
//   - 200 with the text "Task timed out after N.00 seconds": a timeout;
//     Error is the document Lambda would send, type Sandbox.Timedout.
//   - 200 with an error document (an object of errorType, errorMessage and
//     stackTrace only): a function error.
//   - 200 with anything else: a success.
//   - 502 with a document of type Runtime.ExitError: a crash.
//   - 502 with another document: a function error after which the process
//     exited (aws-lambda-go exits after a panic), or an init error the
//     runtime posted; the answer does not tell them apart.
//   - 502 without a body: an init that failed without posting an error
//     (the process exited); the emulator sends no document.
func (r Response) Result() runtimeapi.Result {
	res := runtimeapi.Result{RequestID: r.RequestID, Payload: r.Body, Duration: r.Duration}
	fe := errorDocument(r.Body)
	switch {
	case r.Status == http.StatusOK && bytes.HasPrefix(r.Body, []byte(timedOut)):
		res.Outcome = runtimeapi.OutcomeTimeout
		res.Error = &runtimeapi.FunctionError{Type: "Sandbox.Timedout", Message: "RequestId: " + r.RequestID + " Error: " + string(r.Body)}
	case r.Status == http.StatusOK && fe != nil:
		res.Outcome, res.Error = runtimeapi.OutcomeFunctionError, fe
	case r.Status == http.StatusOK:
		res.Outcome = runtimeapi.OutcomeSuccess
	case len(bytes.TrimSpace(r.Body)) == 0:
		res.Outcome = runtimeapi.OutcomeInitError
		res.Error = &runtimeapi.FunctionError{Type: "Runtime.Unknown", Message: "aws-lambda-rie answered 502 without a document: the init failed"}
	case fe == nil:
		res.Outcome = runtimeapi.OutcomeFunctionError
		res.Error = &runtimeapi.FunctionError{Type: "Runtime.Unknown", Message: string(r.Body)}
	case fe.Type == "Runtime.ExitError":
		res.Outcome, res.Error = runtimeapi.OutcomeCrash, fe
	default:
		res.Outcome, res.Error = runtimeapi.OutcomeFunctionError, fe
	}
	return res
}

// errorDocument returns body as an error document of the Runtime API, or
// nil when it is not one.
func errorDocument(body []byte) *runtimeapi.FunctionError {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || len(fields) == 0 {
		return nil
	}
	for k := range fields {
		switch k {
		case "errorType", "errorMessage", "stackTrace":
		default:
			return nil
		}
	}
	var fe runtimeapi.FunctionError
	if err := json.Unmarshal(body, &fe); err != nil || (fe.Type == "" && fe.Message == "") {
		return nil
	}
	return &fe
}

// newRequestID returns a random (version 4) UUID, the form of Lambda's
// request IDs.
func newRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[:4], b[4:6], b[6:8], b[8:10], b[10:])
}
