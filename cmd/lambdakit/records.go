package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
)

const recordsUsage = `Usage: lambdakit records get    [flags] KEY
       lambdakit records delete [flags] KEY
       lambdakit records stuck  [flags]

Looks at a function's idempotency records in its DynamoDB table. A record's
ID is "<prefix>#<sha256 hex of the key>": -prefix is the function's
IdempotencyOptions.Prefix (the function's name unless the code sets one; the
payment sample sets "payment"), and KEY is the idempotency key its KeyFunc
derives from a message, such as a payment_id. The table holds neither the
key nor the message, only that hash. Flags come before KEY.

  get KEY     prints the record: ID, status, expiry, lease holder and lease
              end, validation hash (SHA-256 of the payload), the size of the
              cached result (never the result), and what it means for the
              next message with the key.
  delete KEY  prints the record, asks for confirmation on standard input
              (unless -yes), and deletes it, provided it did not change in
              the meantime, so that the next message with the key runs the
              handler again. A record in progress whose lease has not ended
              is refused unless -force: its owner may still be running.
              Warm containers that cache completed records (CacheSize; the
              sample keeps 1000) still skip the key until they are replaced.
  stuck       lists the records in progress whose lease ended more than
              -older-than ago: owners that crashed or timed out without
              completing or releasing. Such a record blocks nothing (the next
              message with its key takes it over), but says that a message
              was left half done. stuck scans the whole table, with a filter
              (it needs dynamodb:Scan and is billed for every item read):
              fine for an operator, not for a function.

The endpoint, region and credentials come from the AWS SDK's usual sources:
AWS_ENDPOINT_URL_DYNAMODB or AWS_ENDPOINT_URL for a local DynamoDB,
AWS_REGION, AWS_PROFILE and so on.

Standard output gets the records: as text, or with -json one JSON object per
record, one per line:
  {"id": ..., "status": "COMPLETED", "state": "completed", "expiration": ...,
   "leaseHolder": ..., "leaseEnd": ..., "validation": ..., "resultBytes": N}
where state is "completed", "in progress", "lease ended" or "expired"
(an expired record counts as absent, though DynamoDB's TTL deletes it up to
days later). delete adds "deleted": true or false. Times are UTC RFC 3339.
Standard error gets messages and the prompt.

Flags:
`

const recordsExitStatus = `
Exit status:
  0    get: the record was found; delete: it was deleted; stuck: the list was
       printed, even empty when the prefix has records
  1    no record for KEY, no record at all with -prefix, or delete declined,
       refused, or beaten by a change to the record
  2    usage error
  3    the table does not exist or cannot be read
  130  interrupted
`

type recordsFlags struct {
	action    string // get, delete or stuck
	table     string
	prefix    string
	json      bool
	yes       bool          // delete
	force     bool          // delete
	olderThan time.Duration // stuck
	key       string
}

func parseRecordsFlags(std stdio, args []string) (*recordsFlags, int) {
	f := &recordsFlags{}
	fs := flag.NewFlagSet("records", flag.ContinueOnError)
	fs.SetOutput(std.stderr)
	fs.StringVar(&f.table, "table", lookup(std.environ, "IDEMPOTENCY_TABLE"), "the idempotency `table` (required; default $IDEMPOTENCY_TABLE, the variable the sample function reads)")
	fs.StringVar(&f.prefix, "prefix", "", "the function's record ID `prefix`, without the '#' (required)")
	fs.BoolVar(&f.json, "json", false, "print JSON, one object per record per line")
	fs.BoolVar(&f.yes, "yes", false, "delete: do not ask for confirmation")
	fs.BoolVar(&f.force, "force", false, "delete: delete a record in progress even though its lease has not ended")
	fs.DurationVar(&f.olderThan, "older-than", 0, "stuck: list the records whose lease ended more than this `duration` ago (0: every ended lease)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), recordsUsage)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), recordsExitStatus)
	}
	fail := func(format string, args ...any) (*recordsFlags, int) {
		fmt.Fprintf(std.stderr, "lambdakit records: "+format+"\nRun 'lambdakit records -h' for usage.\n", args...)
		return nil, exitUsage
	}
	if len(args) == 0 {
		return fail("want get, delete or stuck")
	}
	switch f.action = args[0]; f.action {
	case "-h", "-help", "--help", "help":
		fs.Usage()
		return nil, exitOK
	case "get", "delete", "stuck":
	default:
		return fail("unknown action %q: want get, delete or stuck", f.action)
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, exitOK
		}
		return nil, exitUsage // flag has printed the error and the usage
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	for name, action := range map[string]string{"yes": "delete", "force": "delete", "older-than": "stuck"} {
		if set[name] && f.action != action {
			return fail("-%s is for %s only", name, action)
		}
	}
	switch {
	case f.action == "stuck" && fs.NArg() > 0:
		return fail("stuck takes no KEY; got %q", fs.Args())
	case f.action != "stuck" && fs.NArg() == 0:
		return fail("%s needs a KEY", f.action)
	case f.action != "stuck" && fs.NArg() > 1 && strings.HasPrefix(fs.Arg(1), "-"):
		return fail("flags come before KEY: %s", strings.Join(fs.Args()[1:], " "))
	case f.action != "stuck" && fs.NArg() > 1:
		return fail("want one KEY, got %q", fs.Args())
	case f.table == "":
		return fail("-table is required (or set IDEMPOTENCY_TABLE)")
	case f.prefix == "":
		return fail("-prefix is required: the function's IdempotencyOptions.Prefix")
	case strings.HasSuffix(f.prefix, "#"):
		return fail("-prefix %q: give the prefix without its '#'", f.prefix)
	case f.olderThan < 0:
		return fail("-older-than %v: want 0 or more", f.olderThan)
	}
	if f.action != "stuck" {
		f.key = fs.Arg(0)
		if f.key == "" {
			return fail("KEY is empty")
		}
	}
	return f, exitOK
}

// recordOutput is a record as records prints it with -json.
type recordOutput struct {
	ID          string `json:"id"`
	Status      string `json:"status"`
	State       string `json:"state"`
	Expiration  string `json:"expiration,omitempty"`
	LeaseHolder string `json:"leaseHolder,omitempty"`
	LeaseEnd    string `json:"leaseEnd,omitempty"`
	Validation  string `json:"validation,omitempty"`
	ResultBytes int    `json:"resultBytes"`
	Deleted     *bool  `json:"deleted,omitempty"`
}

// Record states, as records prints them.
const (
	stateCompleted  = "completed"
	stateInProgress = "in progress"
	stateLeaseEnded = "lease ended"
	stateExpired    = "expired"
)

// recordState says what rec means at now, as lambdakit.IdempotencyRecord.Live sees it.
func recordState(rec lambdakit.IdempotencyRecord, now time.Time) string {
	switch {
	case !now.Before(rec.Expiration):
		return stateExpired
	case rec.Status == lambdakit.StatusCompleted:
		return stateCompleted
	case rec.Live(now):
		return stateInProgress
	}
	return stateLeaseEnded
}

// stateMeaning is what a state means for the next message with the key.
var stateMeaning = map[string]string{
	stateCompleted:  "the next message with this key is skipped as a duplicate and gets the cached result",
	stateInProgress: "its owner may be running: the next message with this key fails with ErrInProgress until the lease ends",
	stateLeaseEnded: "its owner stopped without completing or releasing it: the next message with this key takes it over and runs",
	stateExpired:    "it counts as absent: the next message with this key runs again",
}

const timeLayout = "2006-01-02T15:04:05.000Z07:00"

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeLayout)
}

func newRecordOutput(rec lambdakit.IdempotencyRecord, now time.Time) recordOutput {
	return recordOutput{
		ID: rec.ID, Status: string(rec.Status), State: recordState(rec, now),
		Expiration: formatTime(rec.Expiration), LeaseHolder: rec.Lease, LeaseEnd: formatTime(rec.InProgressExpiration),
		Validation: rec.Validation, ResultBytes: len(rec.Data),
	}
}

// relative says how far t is from now, in words.
func relative(t, now time.Time) string {
	d := t.Sub(now).Round(time.Second)
	if d >= 0 {
		return "in " + d.String()
	}
	return (-d).String() + " ago"
}

// recordsCmd is one run of the records command.
type recordsCmd struct {
	std     stdio
	f       *recordsFlags
	records *dynamostore.Records
	now     time.Time
}

func runRecords(ctx context.Context, std stdio, args []string) int {
	f, code := parseRecordsFlags(std, args)
	if f == nil {
		return code
	}
	// The SDK reads the process environment itself:
	// AWS_ENDPOINT_URL_DYNAMODB, AWS_REGION, credentials.
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		fmt.Fprintf(std.stderr, "lambdakit records: AWS configuration: %v\n", err)
		return exitCannotRun
	}
	c := &recordsCmd{std: std, f: f, records: dynamostore.NewRecords(dynamodb.NewFromConfig(cfg), f.table), now: time.Now()}
	switch f.action {
	case "get":
		return c.get(ctx)
	case "delete":
		return c.delete(ctx)
	}
	return c.stuck(ctx)
}

// fail reports err and returns the exit status it calls for.
func (c *recordsCmd) fail(ctx context.Context, err error) int {
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(c.std.stderr, "lambdakit records: interrupted")
		return exitInterrupted
	case errors.Is(err, dynamostore.ErrNoTable):
		where := ""
		if ep := firstNonEmpty(lookup(c.std.environ, "AWS_ENDPOINT_URL_DYNAMODB"), lookup(c.std.environ, "AWS_ENDPOINT_URL")); ep != "" {
			where = " at " + ep
		}
		fmt.Fprintf(c.std.stderr, "lambdakit records: table %q does not exist%s (check -table, the region and the endpoint)\n", c.f.table, where)
		return exitCannotRun
	case errors.Is(err, dynamostore.ErrNotFound):
		fmt.Fprintf(c.std.stderr, "lambdakit records: no record for key %q (id %s)\n", c.f.key, c.id())
		return c.checkPrefix(ctx, exitFailed)
	}
	fmt.Fprintf(c.std.stderr, "lambdakit records: %v\n", err)
	return exitCannotRun
}

// checkPrefix tells, after a search came back empty, whether the prefix
// has any record at all, saying so on standard error when it has none. It
// returns the exit status for the empty search, or for the check's own
// failure.
func (c *recordsCmd) checkPrefix(ctx context.Context, empty int) int {
	found, err := c.records.HasPrefix(ctx, c.f.prefix)
	switch {
	case err != nil:
		return c.fail(ctx, err)
	case !found:
		fmt.Fprintf(c.std.stderr, "lambdakit records: no record in table %q has the prefix %q: is -prefix the function's IdempotencyOptions.Prefix?\n", c.f.table, c.f.prefix)
		return exitFailed
	}
	return empty
}

func (c *recordsCmd) id() string { return c.f.prefix + "#" + producer.DedupID(c.f.key) }

func (c *recordsCmd) get(ctx context.Context) int {
	rec, err := c.records.Get(ctx, c.id())
	if err != nil {
		return c.fail(ctx, err)
	}
	c.print(rec, nil)
	return exitOK
}

func (c *recordsCmd) delete(ctx context.Context) int {
	rec, err := c.records.Get(ctx, c.id())
	if err != nil {
		return c.fail(ctx, err)
	}
	deleted := false
	defer func() {
		if c.f.json {
			c.print(rec, &deleted)
		}
	}()
	if !c.f.json {
		c.print(rec, nil)
	}
	if recordState(rec, c.now) == stateInProgress && !c.f.force {
		fmt.Fprintf(c.std.stderr, "lambdakit records: not deleted: the record is in progress and its lease ends at %s (%s); its owner may still be running. Wait for the lease to end, or use -force.\n",
			formatTime(rec.InProgressExpiration), relative(rec.InProgressExpiration, c.now))
		return exitFailed
	}
	if !c.f.yes {
		fmt.Fprintf(c.std.stderr, "Delete %s? The next message with key %q will run the handler again. [y/N] ", rec.ID, c.f.key)
		answer, err := readAnswer(ctx, c.std.stdin)
		if ctx.Err() != nil {
			fmt.Fprintln(c.std.stderr, "\nlambdakit records: interrupted")
			return exitInterrupted
		}
		if err != nil || (answer != "y" && answer != "yes") {
			fmt.Fprintln(c.std.stderr, "lambdakit records: not deleted")
			return exitFailed
		}
	}
	switch err := c.records.Delete(ctx, rec); {
	case errors.Is(err, dynamostore.ErrRecordChanged):
		fmt.Fprintf(c.std.stderr, "lambdakit records: not deleted: %s changed since it was read; look again\n", rec.ID)
		return exitFailed
	case errors.Is(err, dynamostore.ErrNotFound):
		fmt.Fprintf(c.std.stderr, "lambdakit records: not deleted: %s is gone already\n", rec.ID)
		return exitFailed
	case err != nil:
		return c.fail(ctx, err)
	}
	deleted = true
	fmt.Fprintf(c.std.stderr, "lambdakit records: deleted %s\n", rec.ID)
	return exitOK
}

// readAnswer reads one line from in, trimmed and in lower case, or returns
// when ctx ends.
func readAnswer(ctx context.Context, in io.Reader) (string, error) {
	type line struct {
		s   string
		err error
	}
	got := make(chan line, 1)
	go func() {
		s, err := bufio.NewReader(in).ReadString('\n')
		if err != nil && s == "" {
			got <- line{"", err}
			return
		}
		got <- line{strings.ToLower(strings.TrimSpace(s)), nil}
	}()
	select {
	case l := <-got:
		return l.s, l.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (c *recordsCmd) stuck(ctx context.Context) int {
	before := c.now.Add(-c.f.olderThan)
	n := 0
	for rec, err := range c.records.Scan(ctx, dynamostore.ScanFilter{Prefix: c.f.prefix, InProgress: true, LeaseEndedBefore: before}) {
		if err != nil {
			return c.fail(ctx, err)
		}
		n++
		if c.f.json {
			c.print(rec, nil)
			continue
		}
		fmt.Fprintf(c.std.stdout, "%s  lease ended %s (%s)  expires %s  lease %s\n", rec.ID,
			formatTime(rec.InProgressExpiration), relative(rec.InProgressExpiration, c.now), formatTime(rec.Expiration), orNone(rec.Lease))
	}
	if n == 0 {
		if code := c.checkPrefix(ctx, exitOK); code != exitOK {
			return code
		}
	}
	fmt.Fprintf(c.std.stderr, "lambdakit records: %d in progress with a lease that ended more than %v ago (before %s)\n", n, c.f.olderThan, formatTime(before))
	return exitOK
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// print writes rec to standard output: a JSON line, or text.
func (c *recordsCmd) print(rec lambdakit.IdempotencyRecord, deleted *bool) {
	o := newRecordOutput(rec, c.now)
	o.Deleted = deleted
	if c.f.json {
		b, _ := json.Marshal(o)
		fmt.Fprintf(c.std.stdout, "%s\n", b)
		return
	}
	w := c.std.stdout
	fmt.Fprintf(w, "id          %s\n", o.ID)
	fmt.Fprintf(w, "status      %s\n", o.Status)
	fmt.Fprintf(w, "state       %s: %s\n", o.State, stateMeaning[o.State])
	fmt.Fprintf(w, "expires     %s (%s)\n", o.Expiration, relative(rec.Expiration, c.now))
	fmt.Fprintf(w, "lease       %s\n", orNone(o.LeaseHolder))
	if o.LeaseEnd != "" {
		fmt.Fprintf(w, "lease ends  %s (%s)\n", o.LeaseEnd, relative(rec.InProgressExpiration, c.now))
	}
	fmt.Fprintf(w, "validation  %s\n", orNone(o.Validation))
	fmt.Fprintf(w, "result      %d bytes\n", o.ResultBytes)
}
