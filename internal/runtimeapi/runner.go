package runtimeapi

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lambdakit/lambdakit/internal/childproc"
)

// RunnerOptions configures a Runner. The zero value of each field means its
// default.
type RunnerOptions struct {
	// Options configures the Runtime API server each process talks to, and
	// so the function settings the process sees in its environment.
	Options
	// Env is the environment the function gets besides the variables Lambda
	// sets, as "KEY=value"; later entries win. Nil gives the function
	// Lambda's variables only: pass os.Environ() first to hand down
	// credentials, AWS_ENDPOINT_URL, PATH. Variables Lambda reserves
	// (AWS_LAMBDA_*, AWS_REGION, AWS_DEFAULT_REGION, _HANDLER, _X_AMZN_TRACE_ID,
	// LAMBDA_TASK_ROOT, LAMBDA_RUNTIME_DIR, AWS_EXECUTION_ENV, TZ) are dropped,
	// as Lambda refuses them in a function's configuration: a stray one from
	// the caller's shell must not change how the function runs. Set them
	// through Options and LogFormat instead.
	Env []string
	// Stdout and Stderr receive the process's output, which Lambda would
	// send to CloudWatch Logs. Nil discards it, as with os/exec. The same
	// writer may serve both.
	Stdout, Stderr io.Writer
	// LogFormat is the function's log format, "Text" (default) or "JSON",
	// in any case. JSON sets AWS_LAMBDA_LOG_FORMAT=JSON, which structured
	// loggers such as aws-lambda-go's lambdacontext.NewLogHandler follow.
	LogFormat string
	// LogLevel, if set with LogFormat JSON, is the application log level in
	// AWS_LAMBDA_LOG_LEVEL (DEBUG, INFO, WARN, ERROR ...), as Lambda sets it
	// only for JSON logs.
	LogLevel string
	// InitTimeout bounds a new process's init, from its start until it asks
	// for an event. Default 10s, Lambda's limit on init.
	InitTimeout time.Duration
	// MaxConcurrency is how many invocations one process runs at once, as
	// on Lambda Managed Instances (PerExecutionEnvironmentMaxConcurrency):
	// above 1, the process gets AWS_LAMBDA_MAX_CONCURRENCY, which makes
	// aws-lambda-go (v1.51 on) poll for events from that many goroutines,
	// and up to that many Invokes share the process, each answer routed to
	// its own invocation by request ID. Default 1: one at a time, as in a
	// Lambda (default) execution environment.
	MaxConcurrency int
}

// shutdownGrace is the time between SIGTERM and SIGKILL when a function
// registered an extension, Lambda's figure for internal extensions.
const shutdownGrace = 500 * time.Millisecond

// Runner runs a bootstrap binary under a Runtime API Server, one process at a
// time, kept warm across invocations the way Lambda keeps an execution
// environment. The process starts on the first Invoke (a cold start) and
// again after it crashed, timed out or failed its init. Invocations are
// served one at a time, or MaxConcurrency at a time in one process; further
// calls to Invoke wait their turn. Served one at a time, the process is
// frozen while it waits for an event, as on Lambda. Close stops the process.
type Runner struct {
	path string
	opts RunnerOptions

	done      chan struct{} // closed by Close
	closeOnce sync.Once
	slots     chan struct{} // holds a token per Invoke running, MaxConcurrency at most
	turn      chan struct{} // holds a token while the process is started, stopped or (one at a time) used
	env       *environment  // the live process, or nil; guarded by turn
	idleBy    time.Time     // when the process should be idle again; guarded by turn
	// live is env, for Kill, which must not wait for the turn that a
	// running Invoke holds.
	live atomic.Pointer[environment]
}

// environment is one process and the Server it talks to, Lambda's execution
// environment.
type environment struct {
	srv    *Server
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait has returned and cmd.ProcessState is set
}

// NewRunner prepares to run the bootstrap binary at path. It checks the file
// and the options; the process starts with the first Invoke.
func NewRunner(path string, optFns ...func(*RunnerOptions)) (*Runner, error) {
	o := RunnerOptions{Options: defaultOptions(), InitTimeout: 10 * time.Second}
	for _, fn := range optFns {
		fn(&o)
	}
	if err := o.finish(); err != nil {
		return nil, err
	}
	switch strings.ToUpper(o.LogFormat) {
	case "", "TEXT":
		o.LogFormat = "Text"
	case "JSON":
		o.LogFormat = "JSON"
	default:
		return nil, fmt.Errorf("runtimeapi: log format %q is neither Text nor JSON", o.LogFormat)
	}
	switch {
	case o.MaxConcurrency == 0:
		o.MaxConcurrency = 1
	case o.MaxConcurrency < 0:
		return nil, fmt.Errorf("runtimeapi: max concurrency %d is negative", o.MaxConcurrency)
	}
	switch {
	case o.InitTimeout == 0:
		o.InitTimeout = 10 * time.Second
	case o.InitTimeout < 0:
		return nil, fmt.Errorf("runtimeapi: init timeout %v is negative", o.InitTimeout)
	}
	// Absolute, because the process runs in the binary's directory (its
	// LAMBDA_TASK_ROOT), and exec resolves a relative path from there.
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("runtimeapi: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("runtimeapi: bootstrap: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("runtimeapi: bootstrap %s is not a regular file", path)
	}
	return &Runner{path: abs, opts: o, done: make(chan struct{}), slots: make(chan struct{}, o.MaxConcurrency),
		turn: make(chan struct{}, 1)}, nil
}

// Capacity is how many invocations a Runner serves at once: MaxConcurrency,
// one unless set, as a Lambda (default) execution environment does.
func (r *Runner) Capacity() int { return r.opts.MaxConcurrency }

// Invoke runs one event through the function and returns what it produced.
// It starts a process first if none is running, or if the last one is gone
// or did not become idle in time after its previous event. A process that
// times out or crashes is killed, and the next Invoke starts a new one.
//
// Failures of the function, including a crash, a timeout and an init error,
// are reported in the Result. The error is non-nil only when ctx ends, the
// Runner closes, or the process cannot be started; ending ctx during an
// invocation kills the process, whose state is then unknown.
func (r *Runner) Invoke(ctx context.Context, event []byte, optFns ...func(*InvokeOptions)) (Result, error) {
	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	case <-r.done:
		return Result{}, ErrClosed
	}
	defer func() { <-r.slots }()
	select {
	case <-r.done:
		return Result{}, ErrClosed
	default:
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// Close must be able to end an invocation that waits on the function.
	go func() {
		select {
		case <-r.done:
			cancel(ErrClosed)
		case <-ctx.Done():
		}
	}()
	invoke := r.invokeAlone
	if r.opts.MaxConcurrency > 1 {
		invoke = r.invokeShared
	}
	res, err := invoke(ctx, event, optFns...)
	if err != nil && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	return res, err
}

// takeTurn waits for the turn: the right to start, stop or (one invocation
// at a time) use the process. ctx ends when the Runner closes.
func (r *Runner) takeTurn(ctx context.Context) error {
	select {
	case r.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// invokeAlone runs one invocation on a process that runs nothing else,
// holding the turn throughout.
func (r *Runner) invokeAlone(ctx context.Context, event []byte, optFns ...func(*InvokeOptions)) (Result, error) {
	if err := r.takeTurn(ctx); err != nil {
		return Result{}, err
	}
	defer func() { <-r.turn }()
	if r.env != nil {
		idle, err := r.waitIdle(ctx)
		if err != nil {
			return Result{}, err
		}
		if !idle {
			r.stopEnv(false)
		}
	}
	var initDur time.Duration
	if r.env == nil {
		start := time.Now()
		res, err := r.startEnv(ctx)
		initDur = time.Since(start)
		if err != nil || res.Outcome != OutcomeNone {
			res.InitDuration = initDur
			return res, err
		}
	}

	env := r.env
	// The process is idle, so frozen: thaw it for the event, as Lambda does.
	childproc.Freeze(env.cmd, false)
	res, err := env.srv.invoke(ctx, event, env.exited, optFns...)
	res.InitDuration = initDur
	switch {
	case errors.Is(err, errAborted):
		r.stopEnv(false)
		return crashResult(env, res), nil
	case err != nil:
		r.stopEnv(false)
		return res, err
	case res.Outcome == OutcomeTimeout:
		r.stopEnv(false)
	default:
		r.idleBy = res.deadline
	}
	return res, nil
}

// crashResult is the result of invocation res on env, whose process
// exited before it answered.
func crashResult(env *environment, res Result) Result {
	state := env.cmd.ProcessState
	crash := newFailure(res.RequestID, OutcomeCrash, "Runtime.ExitError", "Runtime exited with error: %v", state)
	crash.ExitCode = state.ExitCode()
	crash.Duration = res.Duration
	crash.InitDuration = res.InitDuration
	return crash
}

// invokeShared runs one invocation on a process that runs up to
// MaxConcurrency at once: the turn is held only to start the process. A
// crash or a timeout ends the process, as on Lambda, and so every
// invocation it was running: those end as crashes.
func (r *Runner) invokeShared(ctx context.Context, event []byte, optFns ...func(*InvokeOptions)) (Result, error) {
	env, initRes, err := r.sharedEnv(ctx)
	if env == nil {
		return initRes, err
	}
	res, err := env.srv.invoke(ctx, event, env.exited, optFns...)
	res.InitDuration = initRes.InitDuration
	switch {
	case ctx.Err() == nil && (errors.Is(err, errAborted) || errors.Is(err, ErrClosed) && exited(env)):
		// Another invocation's timeout may have stopped the process, and
		// closed its server: either way, the process is gone.
		r.retire(env)
		return crashResult(env, res), nil
	case err != nil || res.Outcome == OutcomeTimeout:
		r.retire(env)
	}
	return res, err
}

// sharedEnv returns the live process, started if there is none (or the last
// one is gone). When its init fails, env is nil and res (or err) says why;
// otherwise res carries the init's duration if this call started it.
func (r *Runner) sharedEnv(ctx context.Context) (env *environment, res Result, err error) {
	if err := r.takeTurn(ctx); err != nil {
		return nil, Result{}, err
	}
	defer func() { <-r.turn }()
	if r.env != nil && exited(r.env) {
		r.stopEnv(false)
	}
	if r.env != nil {
		return r.env, Result{}, nil
	}
	start := time.Now()
	res, err = r.startEnv(ctx)
	res.InitDuration = time.Since(start)
	if err != nil || res.Outcome != OutcomeNone {
		return nil, res, err
	}
	return r.env, Result{InitDuration: res.InitDuration}, nil
}

// retire stops env unless it is already gone from the Runner.
func (r *Runner) retire(env *environment) {
	r.turn <- struct{}{}
	defer func() { <-r.turn }()
	if r.env == env {
		r.stopEnv(false)
	}
}

// exited reports whether env's process has exited.
func exited(env *environment) bool {
	select {
	case <-env.exited:
		return true
	default:
		return false
	}
}

// waitIdle waits for the warm process to ask for its next event. It reports
// false if the process exited instead (as aws-lambda-go does after a panic)
// or is still busy a while after its previous deadline: Lambda would not
// send it another event either.
func (r *Runner) waitIdle(ctx context.Context) (bool, error) {
	wait := max(time.Until(r.idleBy), time.Second)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-r.env.exited:
			// Gone while it waited for an event (killed, say): a server
			// that has not noticed yet still counts it as waiting.
			return false, nil
		default:
		}
		idle, _, changed := r.env.srv.state()
		if idle {
			return true, nil
		}
		select {
		case <-changed:
		case <-r.env.exited:
			return false, nil
		case <-timer.C:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// startEnv starts a process and waits until it asks for an event. If its
// init fails, it returns the failure as a Result and leaves no process.
func (r *Runner) startEnv(ctx context.Context) (Result, error) {
	srv, err := New(func(o *Options) { *o = r.opts.Options })
	if err != nil {
		return Result{}, err
	}
	cmd := exec.Command(r.path)
	cmd.Dir = filepath.Dir(r.path)
	cmd.Env = r.environ(srv.Addr())
	cmd.Stdout, cmd.Stderr = r.opts.Stdout, r.opts.Stderr
	// Wait must not hang on output pipes that a stray grandchild holds open.
	cmd.WaitDelay = time.Second
	childproc.Setup(cmd)
	if err := cmd.Start(); err != nil {
		_ = srv.Close()
		return Result{}, fmt.Errorf("runtimeapi: start bootstrap: %w", err)
	}
	env := &environment{srv: srv, cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // the exit status is in cmd.ProcessState
		close(env.exited)
	}()
	r.env = env
	r.live.Store(env)
	if r.opts.MaxConcurrency == 1 {
		// Lambda freezes an idle environment; Managed Instances, which run
		// several invocations at once, do not.
		srv.setFreeze(func() { childproc.Freeze(cmd, true) })
	}

	id := newRequestID()
	timer := time.NewTimer(r.opts.InitTimeout)
	defer timer.Stop()
	for {
		idle, initErr, changed := srv.state()
		switch {
		case initErr:
			res := srv.initFailure(id)
			r.stopEnv(false)
			return res, nil
		case idle:
			return Result{}, nil
		}
		select {
		case <-changed:
		case <-env.exited:
			if _, initErr, _ := srv.state(); initErr {
				continue // it posted an init error and then exited, as it should
			}
			state := cmd.ProcessState
			// Lambda's words for an exit, during init as during an
			// invocation; the outcome tells the two apart.
			res := newFailure(id, OutcomeInitError, "Runtime.ExitError", "Runtime exited with error: %v", state)
			res.ExitCode = state.ExitCode()
			r.stopEnv(false)
			return res, nil
		case <-timer.C:
			res := newFailure(id, OutcomeInitError, "Sandbox.Timedout", "init did not finish within %v: the runtime never asked for an event", r.opts.InitTimeout)
			r.stopEnv(false)
			return res, nil
		case <-ctx.Done():
			r.stopEnv(false)
			return Result{}, ctx.Err()
		}
	}
}

// stopEnv ends the process and its server. Graceful is for a normal
// shutdown: a function that registered an extension gets SIGTERM and a
// moment, as on Lambda; otherwise, and after that moment, SIGKILL to its
// whole process group.
func (r *Runner) stopEnv(graceful bool) {
	env := r.env
	if env == nil {
		return
	}
	r.env = nil
	r.live.Store(nil)
	if graceful && env.srv.hasExtensions() {
		// Lambda thaws the environment to shut it down; a frozen process
		// would not see SIGTERM or the SHUTDOWN event. Shutdown first, so
		// that the runtime's next request, which may still be on its way
		// after its last response, no longer freezes it (handleNext), and
		// then thawed for good.
		env.srv.shutdownExtensions(time.Now().Add(shutdownGrace))
		childproc.Freeze(env.cmd, false)
		childproc.Signal(env.cmd, false)
		select {
		case <-env.exited:
		case <-time.After(shutdownGrace):
		}
	}
	// Even after the bootstrap exited: whatever it started is still in its
	// group.
	childproc.Signal(env.cmd, true)
	select {
	case <-env.exited:
	case <-time.After(10 * time.Second): // SIGKILL cannot be ignored; this is a guard, not a path
	}
	_ = env.srv.Close()
}

// Kill ends the running process and whatever it started with SIGKILL, as
// when an execution environment dies under a function (the host fails, the
// process runs out of memory), and waits for it to be gone. An Invoke in
// progress then reports OutcomeCrash, and the next Invoke starts a new
// process. Kill does not wait for an Invoke to finish: it may be called
// from anywhere, at any time, for instance from a test's fake dependency
// while the function waits for it. It reports whether there was a process
// to kill.
func (r *Runner) Kill() bool {
	env := r.live.Load()
	if env == nil {
		return false
	}
	childproc.Signal(env.cmd, true)
	select {
	case <-env.exited:
	case <-time.After(10 * time.Second): // SIGKILL cannot be ignored; this is a guard, not a path
	}
	return true
}

// Close stops the process, waiting for it to be gone. An Invoke in progress
// ends with ErrClosed, and so does every later one.
func (r *Runner) Close() error {
	r.closeOnce.Do(func() { close(r.done) })
	r.turn <- struct{}{}
	defer func() { <-r.turn }()
	r.stopEnv(true)
	return nil
}

// reserved reports whether Lambda reserves the variable name, so that the
// caller's environment cannot set it.
func reserved(name string) bool {
	switch name {
	case "AWS_REGION", "AWS_DEFAULT_REGION", "_HANDLER", "_X_AMZN_TRACE_ID",
		"LAMBDA_TASK_ROOT", "LAMBDA_RUNTIME_DIR", "AWS_EXECUTION_ENV", "TZ":
		return true
	}
	return strings.HasPrefix(name, "AWS_LAMBDA_")
}

// environ returns the process environment: Env without reserved names, then
// the variables Lambda sets for a provided.al2023 function.
func (r *Runner) environ(addr string) []string {
	o := r.opts
	var env []string
	for _, kv := range o.Env {
		name, _, _ := strings.Cut(kv, "=")
		if !reserved(name) {
			env = append(env, kv)
		}
	}
	var stream [16]byte
	_, _ = rand.Read(stream[:])
	env = append(env,
		"AWS_LAMBDA_RUNTIME_API="+addr,
		"AWS_LAMBDA_FUNCTION_NAME="+o.FunctionName,
		"AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE="+strconv.Itoa(o.MemoryMB),
		"AWS_LAMBDA_INITIALIZATION_TYPE=on-demand",
		"AWS_LAMBDA_LOG_GROUP_NAME=/aws/lambda/"+o.FunctionName,
		fmt.Sprintf("AWS_LAMBDA_LOG_STREAM_NAME=%s/[$LATEST]%x", time.Now().UTC().Format("2006/01/02"), stream),
		"AWS_REGION="+o.Region,
		"AWS_DEFAULT_REGION="+o.Region,
		"_HANDLER="+o.Handler,
		"LAMBDA_TASK_ROOT="+filepath.Dir(r.path),
		"TZ=:UTC",
	)
	if o.MaxConcurrency > 1 {
		env = append(env, "AWS_LAMBDA_MAX_CONCURRENCY="+strconv.Itoa(o.MaxConcurrency))
	}
	if o.LogFormat == "JSON" {
		env = append(env, "AWS_LAMBDA_LOG_FORMAT=JSON")
		if o.LogLevel != "" {
			env = append(env, "AWS_LAMBDA_LOG_LEVEL="+strings.ToUpper(o.LogLevel))
		}
	}
	return env
}
