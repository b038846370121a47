// Command testfn is a Lambda bootstrap for the runtimeapi tests: one binary
// whose behaviour each event (and, for init, each environment) chooses, so
// that the tests build a single binary.
//
// Init, from TESTFN_INIT: "exit" exits with status 3, "initerror" posts an
// init error and exits, "hang" never asks for an event, "sigterm" asks
// aws-lambda-go for SIGTERM at shutdown and prints "testfn: SIGTERM" when it
// comes. TESTFN_PIDFILE, if set, receives the process ID at start.
//
// Events are {"action": ..., "value": ..., "code": ..., "ms": ...}; see
// handle. The default action, "echo", answers with what the function saw.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

type event struct {
	Action string `json:"action"`
	Value  any    `json:"value"`
	Code   int    `json:"code"`
	MS     int    `json:"ms"`
}

type response struct {
	Value       any               `json:"value"`
	PID         int               `json:"pid"`
	RequestID   string            `json:"requestId"`
	FunctionARN string            `json:"functionArn"`
	DeadlineMS  int64             `json:"deadlineMs"`
	NowMS       int64             `json:"nowMs"`
	Dir         string            `json:"dir"`
	Env         map[string]string `json:"env"`
	ChildPID    int               `json:"childPid,omitempty"`
}

// declinedError gives the error a type name of its own, which aws-lambda-go
// reports as errorType.
type declinedError struct{ reason string }

func (e *declinedError) Error() string { return "declined: " + e.reason }

var envNames = []string{
	"AWS_LAMBDA_FUNCTION_NAME", "AWS_LAMBDA_FUNCTION_VERSION", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
	"AWS_LAMBDA_LOG_FORMAT", "AWS_LAMBDA_LOG_LEVEL", "AWS_LAMBDA_LOG_GROUP_NAME", "AWS_LAMBDA_INITIALIZATION_TYPE",
	"AWS_REGION", "AWS_DEFAULT_REGION", "_HANDLER", "LAMBDA_TASK_ROOT", "TZ", "TESTFN_CUSTOM", "AWS_LAMBDA_MAX_CONCURRENCY",
}

// failingReader is a response that fails half-way, which aws-lambda-go
// reports in HTTP trailers after the part already sent.
type failingReader struct{ sent bool }

func (r *failingReader) Read(p []byte) (int, error) {
	if !r.sent {
		r.sent = true
		return copy(p, "partial"), nil
	}
	return 0, errors.New("disk on fire")
}

func handle(ctx context.Context, ev event) (any, error) {
	lc, _ := lambdacontext.FromContext(ctx)
	fmt.Printf("testfn: %s %s\n", ev.Action, lc.AwsRequestID)
	switch ev.Action {
	case "error":
		return nil, &declinedError{reason: fmt.Sprint(ev.Value)}
	case "panic":
		panic("kaboom")
	case "sleep":
		time.Sleep(time.Duration(ev.MS) * time.Millisecond) // ignores ctx on purpose
	case "exit":
		os.Exit(ev.Code)
	case "badreader":
		return &failingReader{}, nil
	case "background":
		// Work left running after the answer: it writes the file named by
		// value ms milliseconds later, if the process runs that long.
		go func() {
			time.Sleep(time.Duration(ev.MS) * time.Millisecond)
			_ = os.WriteFile(fmt.Sprint(ev.Value), []byte("done"), 0o644)
		}()
	}
	deadline, _ := ctx.Deadline()
	dir, _ := os.Getwd()
	res := &response{
		Value:       ev.Value,
		PID:         os.Getpid(),
		RequestID:   lc.AwsRequestID,
		FunctionARN: lc.InvokedFunctionArn,
		DeadlineMS:  deadline.UnixMilli(),
		NowMS:       time.Now().UnixMilli(),
		Dir:         dir,
		Env:         map[string]string{},
	}
	for _, name := range envNames {
		if v, ok := os.LookupEnv(name); ok {
			res.Env[name] = v
		}
	}
	if ev.Action == "spawn" {
		// A grandchild in the function's process group, which the Runner
		// must kill along with the function.
		child := exec.Command(os.Args[0])
		child.Env = append(os.Environ(), "TESTFN_CHILD=1")
		if err := child.Start(); err != nil {
			return nil, err
		}
		res.ChildPID = child.Process.Pid
	}
	return res, nil
}

func main() {
	if os.Getenv("TESTFN_CHILD") != "" {
		time.Sleep(time.Hour)
		return
	}
	if f := os.Getenv("TESTFN_PIDFILE"); f != "" {
		if err := os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "testfn:", err)
			os.Exit(1)
		}
	}
	var opts []lambda.Option
	switch os.Getenv("TESTFN_INIT") {
	case "exit":
		fmt.Fprintln(os.Stderr, "testfn: failing init")
		os.Exit(3)
	case "initerror":
		url := "http://" + os.Getenv("AWS_LAMBDA_RUNTIME_API") + "/2018-06-01/runtime/init/error"
		body := `{"errorType":"Config.Missing","errorMessage":"TABLE_NAME is not set"}`
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Lambda-Runtime-Function-Error-Type", "Config.Missing")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		os.Exit(1)
	case "hang":
		time.Sleep(time.Hour)
	case "sigterm":
		opts = append(opts, lambda.WithEnableSIGTERM(func() {
			fmt.Println("testfn: SIGTERM")
			os.Exit(0)
		}))
	}
	lambda.StartWithOptions(handle, opts...)
}
