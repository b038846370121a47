// Command rieinvoke runs event files through a bootstrap under
// aws-lambda-rie, AWS's Runtime Interface Emulator (the one in Lambda's base
// images and in `sam local invoke`'s container), built from the version
// internal/rie/tool pins, and prints each answer as `lambdakit invoke`
// prints its own: so that the two emulators can be run on the same events
// and compared. `make invoke RIE=1` runs it on the sample. Run it from the
// repository:
//
//	go run ./internal/rie/rieinvoke [-template template.yaml] [-logical-id ID] \
//	    [-env-file FILE] BOOTSTRAP EVENT_FILE...
//
// It answers -h with its full usage.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/lambdakit/lambdakit/internal/cmdline"
	"github.com/lambdakit/lambdakit/internal/rie"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/internal/samtemplate"
)

const usage = `Usage: go run ./internal/rie/rieinvoke [flags] BOOTSTRAP EVENT_FILE...

Runs BOOTSTRAP under aws-lambda-rie, AWS's Lambda Runtime Interface Emulator,
the version internal/rie/tool/go.mod pins (go builds it from the module
proxy on first use), and posts each EVENT_FILE to it in order, on one warm
process. Run it from the repository, on Linux (the emulator runs nowhere
else).

Standard output gets one pretty-printed JSON object per event, as 'lambdakit
invoke' prints them, plus "status", the emulator's HTTP status:
  {"event": FILE, "requestId": ID, "status": 200, "outcome": "success", "response": ...}
  {"event": FILE, "requestId": ID, "status": 502, "outcome": OUTCOME, "error": {...}}
The emulator answers less than Lambda does, and the outcome is read from its
answer (see internal/rie's Response.Result): a timeout comes as plain text,
and an init error the runtime posted looks like a function error.
Standard error gets the emulator's log and the function's output.

The function's settings (timeout, memory, name, log format and level) come
from its resource in -template; the timeout must be whole seconds. Its
environment is the -env-file variables and those Lambda sets, nothing of
this shell's: the emulator hands its own environment to the function, as
'sam local invoke' passes only what the template declares.

-env-file takes the file of 'sam local invoke --env-vars' and 'lambdakit
invoke -env-file': {"Parameters": {...}, "LogicalID": {...}}, the section of
-logical-id (or the file's only function section) on top of "Parameters".
AWS_REGION there sets the region (default us-east-1).

Flags:
`

const exitStatus = `
Exit status:
  0    every invocation succeeded
  1    at least one invocation failed
  2    usage error, or an unreadable file
  3    the emulator could not be built or started, or failed
  130  interrupted
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout, os.Stderr, os.Args[1:])
	stop()
	os.Exit(cmdline.ExitStatus(os.Stderr, "rieinvoke", "go run ./internal/rie/rieinvoke -h", err))
}

type event struct {
	name string
	body []byte
}

// settings are what the command line and its files say about the function.
type settings struct {
	opts   rie.Options
	events []event
	boot   string
}

func parse(stderr io.Writer, args []string) (settings, error) {
	var s settings
	fs := cmdline.NewFlags(stderr, "rieinvoke", usage, exitStatus)
	template := fs.String("template", "", "the SAM `template` whose function's settings to use")
	logicalID := fs.String("logical-id", "", "the function's logical `ID` in -template and -env-file (default: the only one)")
	envFile := fs.String("env-file", "", "the function's environment, the `file` of 'sam local invoke --env-vars'")
	rest, err := fs.ParseArgs(args)
	if err != nil {
		return s, err
	}
	if len(rest) < 2 {
		return s, fs.UsageError("need a BOOTSTRAP and at least one EVENT_FILE")
	}
	s.boot = rest[0]
	id := *logicalID
	if *template != "" {
		fns, err := samtemplate.Functions(*template)
		if err != nil {
			return s, cmdline.BadInput(err)
		}
		if id == "" && len(fns) == 1 {
			id = fns[0].LogicalID
		}
		fn, err := samtemplate.FindFunction(fns, id)
		if err != nil {
			return s, cmdline.BadInput(err)
		}
		s.opts.FunctionName = fn.FunctionName
		if s.opts.FunctionName == "" {
			s.opts.FunctionName = fn.LogicalID
		}
		s.opts.Timeout = time.Duration(fn.Timeout) * time.Second
		s.opts.MemoryMB = fn.MemorySize
		s.opts.LogFormat, s.opts.LogLevel = fn.LogFormat, fn.ApplicationLogLevel
	}
	if *envFile != "" {
		if s.opts.Env, err = readEnvFile(*envFile, id); err != nil {
			return s, cmdline.BadInput(err)
		}
		for _, kv := range s.opts.Env {
			if v, ok := strings.CutPrefix(kv, "AWS_REGION="); ok {
				s.opts.Region = v
			}
		}
	}
	for _, name := range rest[1:] {
		body, err := os.ReadFile(name)
		if err != nil {
			return s, cmdline.BadInput(err)
		}
		if !json.Valid(body) {
			return s, cmdline.BadInput(fmt.Errorf("event %s is not valid JSON", name))
		}
		s.events = append(s.events, event{name, body})
	}
	return s, nil
}

// readEnvFile returns the variables of a --env-vars file for the function
// id: "Parameters", then its own section, which wins.
func readEnvFile(path, id string) ([]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var file map[string]map[string]string
	if err := json.Unmarshal(raw, &file); err != nil {
		return nil, fmt.Errorf("env file %s: want {\"Parameters\": {...}, \"Function\": {...}} of strings: %w", path, err)
	}
	if id == "" {
		for k := range file {
			if k == "Parameters" {
				continue
			}
			if id != "" {
				return nil, fmt.Errorf("env file %s has several function sections: name one with -logical-id", path)
			}
			id = k
		}
	}
	var env []string
	for _, section := range []string{"Parameters", id} {
		keys := make([]string, 0, len(file[section]))
		for k := range file[section] {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			env = append(env, k+"="+file[section][k])
		}
	}
	return env, nil
}

// output is what the command prints for one event: `lambdakit invoke`'s
// object, and the emulator's status.
type output struct {
	Event     string                    `json:"event"`
	RequestID string                    `json:"requestId"`
	Status    int                       `json:"status"`
	Outcome   string                    `json:"outcome"`
	Response  any                       `json:"response,omitempty"`
	Error     *runtimeapi.FunctionError `json:"error,omitempty"`
}

func run(ctx context.Context, stdout, stderr io.Writer, args []string) error {
	s, err := parse(stderr, args)
	if err != nil {
		return err
	}
	bin, err := rie.Build(ctx)
	if err != nil {
		return cmdline.CannotRun(err)
	}
	if v, err := rie.Version(ctx); err == nil {
		fmt.Fprintf(stderr, "rieinvoke: aws-lambda-rie %s\n", v)
	}
	s.opts.Stdout, s.opts.Stderr = stderr, stderr
	emu, err := rie.Start(bin, s.boot, func(o *rie.Options) { *o = s.opts })
	if err != nil {
		return cmdline.CannotRun(err)
	}
	defer emu.Close()
	anyFailed := false
	for _, ev := range s.events {
		resp, err := emu.Invoke(ctx, ev.body)
		switch {
		case ctx.Err() != nil:
			return cmdline.Interrupted(fmt.Errorf("interrupted during %s", ev.name))
		case err != nil:
			return cmdline.CannotRun(fmt.Errorf("%s: %w", ev.name, err))
		}
		res := resp.Result()
		out := output{Event: ev.name, RequestID: res.RequestID, Status: resp.Status, Outcome: res.Outcome.String(), Error: res.Error}
		if res.Outcome == runtimeapi.OutcomeSuccess {
			switch p := bytes.TrimSpace(res.Payload); {
			case len(p) == 0:
				out.Response = json.RawMessage("null")
			case json.Valid(p):
				out.Response = json.RawMessage(p)
			default:
				out.Response = string(res.Payload) // a function may answer with raw bytes
			}
		} else {
			anyFailed = true
		}
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return cmdline.CannotRun(err)
		}
		if _, err := stdout.Write(append(b, '\n')); err != nil {
			return cmdline.CannotRun(fmt.Errorf("write: %w", err))
		}
	}
	if anyFailed {
		return cmdline.ErrFailed
	}
	return nil
}
