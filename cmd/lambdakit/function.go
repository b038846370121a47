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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/arn"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/lambdakit/lambdakit/internal/cmdline"
	"github.com/lambdakit/lambdakit/internal/deployed"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/internal/samtemplate"
)

// What invoke and run share: the function's settings and environment, the
// Runner that runs it, and how they report its invocations.

// Lambda's defaults for a function created without settings, which the
// flags fall back on when neither they nor a template say otherwise.
const (
	lambdaTimeout   = 3 * time.Second
	lambdaMemoryMB  = 128
	lambdaLogFormat = "text"
	// defaultFunctionName names a function that has neither a name nor a
	// logical ID.
	defaultFunctionName = "function"
)

// functionFlags describe the function and its environment: the flags that
// invoke and run share. settle completes them from the template and reads
// the env file.
type functionFlags struct {
	timeout      time.Duration
	memory       int
	functionName string
	region       string
	envFile      string
	logicalID    string
	logFormat    string
	logLevel     string
	perProcess   int // -per-process-concurrency: invocations one process runs at once
	template     string
	function     string // -function: a deployed function
	live         bool   // -live: calls to AWS itself are allowed (see endpoint.go)

	// deployed is the -function's configuration, read by loadDeployed;
	// lambda and awsCfg are what read it, for run's mapping.
	deployed *deployed.Function
	lambda   *lambda.Client
	awsCfg   aws.Config

	extra []string // the deployed function's variables, then the env file's, KEY=value, read by settle
}

// define defines the flags on fs; timeoutHelp ends the -timeout line.
// The flags whose default depends on the template have none of their own,
// so that -h shows the default once, in their help text: settle sets it.
func (f *functionFlags) define(fs *flag.FlagSet, timeoutHelp string) {
	fs.DurationVar(&f.timeout, "timeout", 0, "the function's `timeout`: "+timeoutHelp+" (default: the template's Timeout, else Lambda's 3s)")
	fs.IntVar(&f.memory, "memory", 0, "the function's memory in `MB`, as AWS_LAMBDA_FUNCTION_MEMORY_SIZE, not enforced (default: the template's MemorySize, else Lambda's 128)")
	fs.StringVar(&f.functionName, "function-name", "", "the function's `name`, as AWS_LAMBDA_FUNCTION_NAME and in its ARN (default: the template's FunctionName, else the logical ID, else \""+defaultFunctionName+"\")")
	fs.StringVar(&f.region, "region", "", "the `region` the function runs in (default: AWS_REGION from the env file, else AWS_REGION or AWS_DEFAULT_REGION, else us-east-1)")
	fs.StringVar(&f.envFile, "env-file", "", "extra environment variables from `FILE`, in the JSON shape of 'sam local invoke --env-vars'")
	fs.StringVar(&f.logicalID, "logical-id", "", "the function's logical `ID`: its resource in -template and its section of -env-file (default: the only function of the template, else the only section of the env file)")
	fs.StringVar(&f.logFormat, "log-format", "", "the function's log `format`: text or json, which sets AWS_LAMBDA_LOG_FORMAT=JSON (default: the template's LoggingConfig.LogFormat, else Lambda's text)")
	fs.StringVar(&f.logLevel, "log-level", "", "with -log-format json, the application log `level` in AWS_LAMBDA_LOG_LEVEL: DEBUG, INFO, WARN, ERROR (default: the template's LoggingConfig.ApplicationLogLevel)")
	fs.IntVar(&f.perProcess, "per-process-concurrency", 1, "the `number` of invocations one process runs at once, as Lambda Managed Instances' PerExecutionEnvironmentMaxConcurrency: above 1, the process gets AWS_LAMBDA_MAX_CONCURRENCY (aws-lambda-go v1.51 or later runs that many invocations at once), and that many events, or batches, go to one process at a time")
	fs.StringVar(&f.template, "template", "", "the SAM template `FILE` whose function settings to use where no flag sets them: Timeout, MemorySize, FunctionName, LoggingConfig")
	fs.BoolVar(&f.live, "live", false, liveHelp)
	fs.StringVar(&f.function, "function", "", "a deployed function (`NAME` or ARN) whose settings and environment to use where no flag sets them, from Lambda's GetFunctionConfiguration at the SDK's Lambda endpoint (AWS_ENDPOINT_URL_LAMBDA, AWS_ENDPOINT_URL, else AWS); instead of -template")
}

// loadDeployed reads the function -function names, if any, before settle
// uses it. A function name names no endpoint: like 'records' with a table,
// the command says on standard error where it asks before its first call.
func (f *functionFlags) loadDeployed(ctx context.Context, fs *cmdline.Flags, std stdio, command string) error {
	if f.function == "" {
		return nil
	}
	if f.template != "" {
		return fs.UsageError("-function and -template both describe the function: give one")
	}
	var opts []func(*config.LoadOptions) error
	region := f.region
	if a, err := arn.Parse(f.function); err == nil {
		if region != "" && region != a.Region {
			return fs.UsageError("-region is %s, but the function %s is in %s", region, f.function, a.Region)
		}
		region = a.Region
	}
	if region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return cmdline.CannotRun(fmt.Errorf("AWS configuration: %w", err))
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1" // as for a function without a region elsewhere
	}
	client := lambda.NewFromConfig(cfg)
	if err := checkLive(ctx, std.environ, f.live, "the function "+f.function, "LAMBDA", client.Options().BaseEndpoint, cfg.Region, ""); err != nil {
		return asUsage(fs, err, cmdline.BadInput)
	}
	fmt.Fprintf(std.stderr, "lambdakit %s: function %s %s\n", command, f.function,
		endpointDescription(std.environ, "LAMBDA", "Lambda", client.Options().BaseEndpoint, cfg.Region))
	fn, err := deployed.ReadFunction(ctx, client, f.function)
	if err != nil {
		return cmdline.CannotRun(err)
	}
	if f.region != "" && f.region != fn.Region {
		return fs.UsageError("-region is %s, but the function %s is in %s", f.region, fn.ARN, fn.Region)
	}
	// Where the function's AWS calls go is this run's business: this
	// shell's endpoint variables or the env file's. A deployed endpoint
	// variable is left out: empty, it is a placeholder (as the sample's
	// AWS_ENDPOINT_URL, which sam local's --env-vars can only set if the
	// template declares it), and it would drop the shell's; set, it names
	// an endpoint for where the function is deployed.
	env := fn.Env[:0:0]
	for _, kv := range fn.Env {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case !endpointVariable(k):
			env = append(env, kv)
		case v != "":
			fmt.Fprintf(std.stderr, "lambdakit %s: the deployed %s (%s) is left out: the function's calls go where this shell or -env-file says\n", command, k, v)
		}
	}
	fn.Env = env
	f.deployed, f.lambda, f.awsCfg = &fn, client, cfg
	return nil
}

// checkGiven refuses the flag values given on the command line that no
// template or deployed function could make right, before anything is read.
func (f *functionFlags) checkGiven(fs *cmdline.Flags) error {
	set := fs.Given()
	switch {
	case set["log-format"] && strings.ToLower(f.logFormat) != "text" && strings.ToLower(f.logFormat) != "json":
		return fs.UsageError("-log-format %q: want text or json", f.logFormat)
	case set["timeout"] && f.timeout <= 0:
		return fs.UsageError("-timeout %v: want a positive duration", f.timeout)
	case set["memory"] && f.memory <= 0:
		return fs.UsageError("-memory %d: want a positive number of MB", f.memory)
	case set["function-name"] && f.functionName == "":
		return fs.UsageError("-function-name: want a name")
	case f.perProcess < 1:
		// Zero, like a negative count, runs no invocation: a mistake,
		// not a default.
		return fs.UsageError("-per-process-concurrency %d: want 1 or more", f.perProcess)
	case f.function != "" && f.template != "":
		return fs.UsageError("-function and -template both describe the function: give one")
	}
	return nil
}

// settle completes the flags: what the command line did not set comes from
// the template's function, if -template names one, else Lambda's defaults.
// It reads the env file, and checks the result. Every input is read here,
// before anything starts.
func (f *functionFlags) settle(fs *cmdline.Flags) error {
	set := fs.Given()
	fn, err := f.templateFunction(fs)
	if err != nil {
		return err
	}
	if d := f.deployed; d != nil {
		fn = samtemplate.Function{FunctionName: d.Name, Timeout: int(d.Timeout / time.Second), MemorySize: d.MemoryMB,
			LogFormat: d.LogFormat, ApplicationLogLevel: d.LogLevel}
	}
	if f.logicalID == "" {
		f.logicalID = fn.LogicalID
	}
	if !set["timeout"] {
		f.timeout = lambdaTimeout
		if fn.Timeout > 0 {
			f.timeout = time.Duration(fn.Timeout) * time.Second
		}
	}
	if !set["memory"] {
		f.memory = lambdaMemoryMB
		if fn.MemorySize > 0 {
			f.memory = fn.MemorySize
		}
	}
	if !set["log-format"] {
		f.logFormat = firstNonEmpty(fn.LogFormat, lambdaLogFormat)
	}
	if !set["log-level"] && fn.ApplicationLogLevel != "" {
		f.logLevel = fn.ApplicationLogLevel
	}
	if f.deployed != nil {
		f.extra = slices.Clone(f.deployed.Env)
	}
	if f.envFile != "" {
		var vars []string
		if vars, f.logicalID, err = readEnvFile(f.envFile, f.logicalID); err != nil {
			return cmdline.BadInput(err)
		}
		f.extra = append(f.extra, vars...) // the file's win
	}
	if f.deployed != nil {
		for _, name := range []string{"AWS_REGION", "AWS_DEFAULT_REGION"} {
			if v := lookup(f.extra, name); v != "" && v != f.deployed.Region {
				return fs.UsageError("%s in the env file is %s, but the function %s is in %s", name, v, f.deployed.ARN, f.deployed.Region)
			}
		}
	}
	if !set["function-name"] {
		f.functionName = firstNonEmpty(fn.FunctionName, f.logicalID, defaultFunctionName)
	}
	switch f.logFormat = strings.ToLower(f.logFormat); f.logFormat {
	case "text", "json":
	default:
		return fs.UsageError("-log-format %q: want text or json", f.logFormat)
	}
	switch {
	case f.timeout <= 0:
		return fs.UsageError("-timeout %v: want a positive duration", f.timeout)
	case f.memory <= 0:
		return fs.UsageError("-memory %d: want a positive number of MB", f.memory)
	case f.functionName == "":
		return fs.UsageError("-function-name: want a name")
	}
	return nil
}

// templateFunction returns the function of -template that -logical-id
// names, else its only one, else the one whose section is the only one of
// -env-file; the zero Function without -template.
func (f *functionFlags) templateFunction(fs *cmdline.Flags) (samtemplate.Function, error) {
	if f.template == "" {
		return samtemplate.Function{}, nil
	}
	fns, err := samtemplate.Functions(f.template)
	if err != nil {
		return samtemplate.Function{}, cmdline.BadInput(fmt.Errorf("template: %w", err))
	}
	var ids []string
	for _, fn := range fns {
		ids = append(ids, fn.LogicalID)
	}
	switch {
	case f.logicalID != "":
		fn, err := samtemplate.FindFunction(fns, f.logicalID)
		if err != nil {
			return fn, fs.UsageError("-logical-id %s: template %s has no such function (it has %s)", f.logicalID, f.template, strings.Join(ids, ", "))
		}
		return fn, nil
	case len(fns) == 1:
		return fns[0], nil
	case len(fns) == 0:
		return samtemplate.Function{}, cmdline.BadInput(fmt.Errorf("template %s declares no AWS::Serverless::Function", f.template))
	}
	// Several functions: an env file with one function's section names it,
	// as it would name the section to read.
	if f.envFile != "" {
		if _, section, err := readEnvFile(f.envFile, ""); err == nil && section != "" {
			if fn, err := samtemplate.FindFunction(fns, section); err == nil {
				return fn, nil
			}
		}
	}
	return samtemplate.Function{}, fs.UsageError("template %s has functions %s: choose one with -logical-id", f.template, strings.Join(ids, ", "))
}

// regionOr returns the function's region: a deployed function's, -region,
// else AWS_REGION or AWS_DEFAULT_REGION from the env file, then from
// environ, else fallback.
func (f *functionFlags) regionOr(environ []string, fallback string) string {
	if f.deployed != nil {
		return f.deployed.Region
	}
	return firstNonEmpty(f.region, lookup(f.extra, "AWS_REGION"), lookup(f.extra, "AWS_DEFAULT_REGION"),
		lookup(environ, "AWS_REGION"), lookup(environ, "AWS_DEFAULT_REGION"), fallback)
}

// newRunner prepares a Runner of bootstrap with the function's settings,
// the caller's environment plus the env file's (whose endpoint variables,
// if it has any, replace the caller's: see functionEnviron), and its output
// on standard error. A bootstrap that is missing is an input error.
func (f *functionFlags) newRunner(std stdio, bootstrap, region string) (*runtimeapi.Runner, error) {
	r, err := runtimeapi.NewRunner(bootstrap, func(o *runtimeapi.RunnerOptions) {
		o.FunctionName = f.functionName
		o.Region = region
		o.Timeout = f.timeout
		o.MemoryMB = f.memory
		o.Env = functionEnviron(std.environ, f.extra)
		o.Stdout, o.Stderr = std.stderr, std.stderr
		o.LogFormat = f.logFormat
		o.LogLevel = f.logLevel
		o.MaxConcurrency = f.perProcess
	})
	if err != nil {
		return nil, cmdline.BadInput(err)
	}
	return r, nil
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
// KEY=value in a stable order, and the logical ID of the section it used:
// logicalID, or the file's only function section when logicalID is "".
func readEnvFile(path, logicalID string) (env []string, section string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("env file: %w", err)
	}
	var sections map[string]map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // a number's text, as written, is the value
	if err := dec.Decode(&sections); err != nil {
		return nil, "", fmt.Errorf("env file %s: want {\"LogicalId\": {\"VAR\": \"value\"}, ...}: %w", path, err)
	}
	var functions []string
	for name := range sections {
		if name != "Parameters" {
			functions = append(functions, name)
		}
	}
	slices.Sort(functions)
	switch {
	case logicalID == "" && len(functions) == 1:
		logicalID = functions[0]
	case logicalID == "" && len(functions) > 1:
		return nil, "", fmt.Errorf("env file %s has sections for %s: choose one with -logical-id", path, strings.Join(functions, ", "))
	case logicalID != "" && len(functions) > 0 && !slices.Contains(functions, logicalID):
		return nil, "", fmt.Errorf("env file %s has no section %s (it has %s)", path, logicalID, strings.Join(functions, ", "))
	}

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
				return nil, "", fmt.Errorf("env file %s: %s.%s: want a string, number or boolean", path, section, name)
			}
			if name == "" || strings.ContainsAny(name, "=\x00") {
				return nil, "", fmt.Errorf("env file %s: %s: %q is not a variable name", path, section, name)
			}
			env = append(env, name+"="+value)
		}
	}
	return env, logicalID, nil
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
