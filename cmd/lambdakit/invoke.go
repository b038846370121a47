package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/lambdakit/lambdakit/internal/cmdline"
	"github.com/lambdakit/lambdakit/internal/deployed"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/internal/samtemplate"
)

const invokeUsage = `Usage: lambdakit invoke [flags] BOOTSTRAP EVENT_FILE...

Runs BOOTSTRAP, a Lambda function binary built for this machine, under a
local Lambda Runtime API, without Docker, and feeds it each EVENT_FILE in
order ("-" reads standard input), on one warm process as on Lambda (a new
one after a crash, a timeout or a failed init). Standard output gets one
JSON object per event: {"event", "requestId", "outcome", "response" or
"error"}, the outcome being "success", "function error", "init error",
"crash" or "timeout"; standard error gets the function's own output and a
REPORT line per event. The function's settings come from the flags, then
-template (as 'sam local invoke') or a deployed function (-function, which
on AWS needs -live), then Lambda's defaults; its environment is this shell's,
the deployed one's and -env-file's ('sam local invoke --env-vars' format).
Flags come before the arguments. More: the "lambdakit invoke" section of
docs/local-tooling.md.

Flags:
`

const invokeExitStatus = `
Exit status:
  0    every invocation succeeded
  1    at least one invocation failed: function error, init error, crash or timeout
  2    usage error, or an event, env or template file that cannot be read
  3    the bootstrap could not be started (not executable, built for another
       OS or architecture), the local Runtime API failed, or the deployed
       function -function names cannot be read
  130  interrupted
`

// invokeCommand is 'lambdakit invoke': it runs a bootstrap on event files.
type invokeCommand struct {
	stdio
	fn        functionFlags
	bootstrap string
	events    []event
	sqsEvent  bool // -template gives the function an SQS event
}

// event is one event file, read before anything starts so that a typo fails
// fast.
type event struct {
	name string
	body []byte
}

// Run implements command.
func (c *invokeCommand) Run(ctx context.Context, args []string) error {
	if err := c.parse(ctx, args); err != nil {
		return err
	}
	runner, err := c.fn.newRunner(c.stdio, c.bootstrap, c.fn.regionOr(c.environ, "us-east-1"))
	if err != nil {
		return err
	}
	defer runner.Close()

	anyFailed := false
	results := invokeAll(ctx, runner, c.events, c.fn.perProcess)
	for i, ev := range c.events {
		r := <-results[i]
		res, err := r.res, r.err
		if err != nil {
			if ctx.Err() != nil {
				return cmdline.Interrupted(fmt.Errorf("interrupted during %s", ev.name))
			}
			return cmdline.CannotRun(fmt.Errorf("%s: %s", ev.name, startFailure(err, c.bootstrap)))
		}
		report(c.stderr, &c.fn, res)
		c.warnNotSQS(ev, res)
		if res.Outcome != runtimeapi.OutcomeSuccess {
			anyFailed = true
			fmt.Fprintf(c.stderr, "lambdakit invoke: %s: %s\n", ev.name, describe(res, c.fn.timeout))
		}
		if err := printResult(c.stdout, ev.name, res); err != nil {
			return cmdline.CannotRun(fmt.Errorf("write: %w", err))
		}
	}
	if err := runner.Close(); err != nil {
		return cmdline.CannotRun(fmt.Errorf("stop the function: %w", err))
	}
	if anyFailed {
		return cmdline.ErrFailed
	}
	return nil
}

// invoked is what one Invoke returned.
type invoked struct {
	res runtimeapi.Result
	err error
}

// invokeAll runs the events on runner, started in order, perProcess at a
// time (one after the other with 1), and returns a channel per event that
// receives its result.
func invokeAll(ctx context.Context, runner *runtimeapi.Runner, events []event, perProcess int) []chan invoked {
	out := make([]chan invoked, len(events))
	for i := range out {
		out[i] = make(chan invoked, 1)
	}
	sem := make(chan struct{}, max(perProcess, 1))
	go func() {
		for i, ev := range events {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				out[i] <- invoked{err: ctx.Err()}
				continue
			}
			go func() {
				res, err := runner.Invoke(ctx, ev.body)
				<-sem
				out[i] <- invoked{res, err}
			}()
		}
	}()
	return out
}

// parse reads the command line, the deployed function it names, and every
// file it names.
func (c *invokeCommand) parse(ctx context.Context, args []string) error {
	fs := cmdline.NewFlags(c.stderr, "invoke", invokeUsage, invokeExitStatus)
	c.fn.define(fs.FlagSet, "each event's deadline is its start plus this")
	rest, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	if len(rest) < 2 {
		return fs.UsageError("need a BOOTSTRAP and at least one EVENT_FILE")
	}
	if err := c.fn.checkGiven(fs); err != nil {
		return err
	}
	if err := c.fn.loadDeployed(ctx, fs, c.stdio, "invoke"); err != nil {
		return err
	}
	if err := c.fn.settle(fs); err != nil {
		return err
	}
	c.bootstrap = rest[0]
	c.sqsEvent = c.templateHasSQSEvent()
	if d := c.fn.deployed; d != nil {
		// A hint for warnNotSQS only: a mapping that cannot be listed
		// gives none.
		ms, err := deployed.SQSMappings(ctx, c.fn.lambda, *d)
		c.sqsEvent = err == nil && len(ms) > 0
	}
	for _, name := range rest[1:] {
		var body []byte
		var err error
		if name == "-" {
			body, err = io.ReadAll(c.stdin)
		} else {
			body, err = os.ReadFile(name)
		}
		if err != nil {
			return cmdline.BadInput(fmt.Errorf("event: %w", err))
		}
		if !json.Valid(body) {
			// Lambda's Invoke API refuses such a payload before any function runs.
			return cmdline.BadInput(fmt.Errorf("event %s is not valid JSON", name))
		}
		c.events = append(c.events, event{name, body})
	}
	return nil
}

// templateHasSQSEvent reports whether -template gives the function an SQS
// event. It is a hint for warnNotSQS only: a template whose events cannot
// be read gives none.
func (c *invokeCommand) templateHasSQSEvent() bool {
	if c.fn.template == "" {
		return false
	}
	evs, err := samtemplate.SQSEvents(c.fn.template)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(evs, func(ev samtemplate.SQSEvent) bool { return ev.Function == c.fn.logicalID })
}

// warnNotSQS warns when an SQS function got an event that is not an SQS
// event: it ran on no messages, and a success says nothing. invoke runs
// any function, so the event itself is no reason to refuse: a function is
// taken for an SQS function when -template says so or when it answered
// with a partial batch response.
func (c *invokeCommand) warnNotSQS(ev event, res runtimeapi.Result) {
	what := notSQSEvent(ev.body)
	if what == "" {
		return
	}
	why := "its resource in -template has an SQS event"
	if !c.sqsEvent {
		var resp map[string]json.RawMessage
		if res.Outcome != runtimeapi.OutcomeSuccess || json.Unmarshal(res.Payload, &resp) != nil {
			return
		}
		if _, ok := resp["batchItemFailures"]; !ok {
			return
		}
		why = "it answered with batchItemFailures"
	}
	fmt.Fprintf(c.stderr, "lambdakit invoke: warning: %s is not an SQS event (it is %s), but the function takes SQS events (%s): it saw no messages. "+
		`An SQS event is {"Records": [...]}, a record per message, with the message's body as a JSON string in "body"; `+
		"'sam local generate-event sqs receive-message' writes one.\n", ev.name, what, why)
}

// notSQSEvent says what body (valid JSON) is when it is not an SQS event,
// {"Records": [...]} with at least one record and none from another event
// source; "" when it is one.
func notSQSEvent(body []byte) string {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return "not JSON"
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return "a JSON " + jsonKind(v)
	}
	records, ok := obj["Records"]
	if !ok {
		keys := slices.Sorted(maps.Keys(obj))
		switch {
		case len(keys) == 0:
			return "an empty object"
		case len(keys) > 5:
			keys = append(keys[:5], "...")
		}
		quoted := make([]string, len(keys))
		for i, k := range keys {
			quoted[i] = strconv.Quote(k)
		}
		noun := "keys"
		if len(obj) == 1 {
			noun = "key"
		}
		return fmt.Sprintf("an object with the %s %s", noun, strings.Join(quoted, ", "))
	}
	list, ok := records.([]any)
	if !ok || len(list) == 0 {
		return `an object whose "Records" holds no records`
	}
	for _, r := range list {
		rec, _ := r.(map[string]any)
		for _, key := range []string{"eventSource", "EventSource"} { // SNS spells it EventSource
			if src, ok := rec[key].(string); ok && src != "aws:sqs" {
				return fmt.Sprintf("an event with records from %q", src)
			}
		}
	}
	return ""
}

// jsonKind names the kind of a decoded JSON value that is not an object.
func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "array"
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "boolean"
	}
	return "null"
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
