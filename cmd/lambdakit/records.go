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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/internal/cmdline"
	"github.com/lambdakit/lambdakit/lambdakit"
)

const recordsUsage = `Usage: lambdakit records get    [flags] KEY
       lambdakit records delete [flags] KEY
       lambdakit records stuck  [flags]
       lambdakit records failed [flags]

Looks at a function's idempotency records in its DynamoDB table: get prints
the record of KEY (the key its KeyFunc derives, such as a payment_id; the
record's ID is "<prefix>#<sha256 hex of the key>", or "<prefix>#<key>" with
-readable-ids) and what it means for the next message with that key; delete
removes it after asking, so that the next message runs the handler again;
stuck lists the records in progress whose lease ended (-older-than ago);
failed lists those completed with a failure. stuck and failed scan the whole
table. An item whose status is neither INPROGRESS nor COMPLETED (a ledger
row read without -status-attr) is refused, never deleted. On a table shared
with Powertools functions (a composite key), give -sort-key-attr and
-static-pk-value: only the function's records are read, and stuck and failed
query its partition instead of scanning the table. The table's
endpoint is the SDK's (AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL); DynamoDB
on AWS needs -live. Flags come before KEY. More, with the -json fields: the
"Stuck, failed and unwanted records" section of docs/operations.md.

Flags:
`

const recordsExitStatus = `
Exit status:
  0    get: the record was found; delete: it was deleted; stuck, failed:
       the list was printed, even empty when the prefix has records
  1    no record for KEY, no record at all with -prefix, or delete declined,
       refused, or beaten by a change to the record
  2    usage error
  3    the table does not exist or cannot be read, as in every lambdakit
       command: a missing queue or table is 3
  130  interrupted
`

// recordsCommand is 'lambdakit records': an operator's look at the
// idempotency records of a function's table.
type recordsCommand struct {
	stdio
	action    string // get, delete or stuck
	table     string
	prefix    string
	json      bool
	live      bool
	yes       bool          // delete
	force     bool          // delete
	olderThan time.Duration // stuck
	key       string
	// readableIDs, keyAttr, statusAttr, sortKeyAttr and staticPK say
	// how the function stores its records: lambdakit.Options.ReadableIDs,
	// and dynamostore.Options' names (empty: the default).
	readableIDs                     bool
	keyAttr, statusAttr             string
	sortKeyAttr, staticPartitionKey string

	flags   *cmdline.Flags
	db      *dynamodb.Client
	records *dynamostore.Records
	where   string // where the calls go, in words: see endpointDescription
	now     time.Time
}

// parse reads the command line: the action, then its flags and KEY.
func (c *recordsCommand) parse(args []string) error {
	fs := cmdline.NewFlags(c.stderr, "records", recordsUsage, recordsExitStatus)
	c.flags = fs
	// No default of the flag's own: -h would show it a second time.
	tableHelp := "the idempotency `table` (required; default $IDEMPOTENCY_TABLE, the variable lambdakit's examples give the function)"
	if env := lookup(c.environ, "IDEMPOTENCY_TABLE"); env != "" {
		tableHelp = strings.TrimSuffix(tableHelp, ")") + fmt.Sprintf(", here %q)", env)
	}
	fs.StringVar(&c.table, "table", "", tableHelp)
	fs.StringVar(&c.prefix, "prefix", "", "the function's record ID `prefix`, without the '#' (required)")
	fs.BoolVar(&c.json, "json", false, "print JSON, one object per record per line")
	fs.BoolVar(&c.live, "live", false, liveHelp)
	fs.BoolVar(&c.yes, "yes", false, "delete: do not ask for confirmation")
	fs.BoolVar(&c.force, "force", false, "delete: delete a record in progress even though its lease has not ended")
	fs.DurationVar(&c.olderThan, "older-than", 0, "stuck: list the records whose lease ended more than this `duration` ago (0: every ended lease)")
	fs.BoolVar(&c.readableIDs, "readable-ids", false, "record IDs are \"<prefix>#<key>\", not the key's SHA-256 (lambdakit.Options.ReadableIDs)")
	fs.StringVar(&c.keyAttr, "key-attr", "", "the table's partition key `attribute`, if the function renamed it (dynamostore.Options.KeyAttr; default id)")
	fs.StringVar(&c.sortKeyAttr, "sort-key-attr", "", "the table's sort key `attribute`, which holds the record IDs in Powertools' composite-key layout (dynamostore.Options.SortKeyAttr); needs -static-pk-value")
	fs.StringVar(&c.staticPartitionKey, "static-pk-value", "", "with -sort-key-attr, the partition key `value` of the function's records (dynamostore.Options.StaticPartitionKey; Powertools' default is idempotency#<function name>)")
	fs.StringVar(&c.statusAttr, "status-attr", "", "the record's status `attribute`, if the function renamed it (dynamostore.Options.StatusAttr; default status)")
	if len(args) == 0 {
		return fs.UsageError("want get, delete, stuck or failed")
	}
	switch c.action = args[0]; c.action {
	case "-h", "-help", "--help", "help":
		fs.PrintHelp()
		return flag.ErrHelp
	case "get", "delete", "stuck", "failed":
	default:
		return fs.UsageError("unknown action %q: want get, delete, stuck or failed", c.action)
	}
	listing := c.action == "stuck" || c.action == "failed"
	rest, err := fs.ParseArgs(args[1:])
	if err != nil {
		return err
	}
	set := fs.Given()
	if !set["table"] {
		c.table = lookup(c.environ, "IDEMPOTENCY_TABLE")
	}
	for name, action := range map[string]string{"yes": "delete", "force": "delete", "older-than": "stuck"} {
		if set[name] && c.action != action {
			return fs.UsageError("-%s is for %s only", name, action)
		}
	}
	switch {
	case listing && len(rest) > 0:
		return fs.UsageError("%s takes no KEY; got %q", c.action, rest)
	case !listing && len(rest) == 0:
		return fs.UsageError("%s needs a KEY", c.action)
	case !listing && len(rest) > 1:
		return fs.UsageError("want one KEY, got %q", rest)
	case c.table == "":
		return fs.UsageError("-table is required (or set IDEMPOTENCY_TABLE)")
	case c.prefix == "":
		return fs.UsageError("-prefix is required: the function's lambdakit.Options.Prefix")
	case strings.HasSuffix(c.prefix, "#"):
		return fs.UsageError("-prefix %q: give the prefix without its '#'", c.prefix)
	case (c.sortKeyAttr == "") != (c.staticPartitionKey == ""):
		return fs.UsageError("-sort-key-attr and -static-pk-value go together: a composite-key table holds a function's records under its partition key value (Powertools' default: idempotency#<function name>)")
	case c.olderThan < 0:
		return fs.UsageError("-older-than %v: want 0 or more", c.olderThan)
	}
	if !listing {
		c.key = rest[0]
		if c.key == "" {
			return fs.UsageError("KEY is empty")
		}
	}
	return nil
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
	Failure     string `json:"failure,omitempty"`
	Effect      string `json:"effect,omitempty"`
	Deleted     *bool  `json:"deleted,omitempty"`
}

// Record states, as records prints them.
const (
	stateCompleted  = "completed"
	stateFailed     = "failed"
	stateInProgress = "in progress"
	stateLeaseEnded = "lease ended"
	stateStopped    = "stopped after its effect"
	stateExpired    = "expired"
)

// recordState says what rec means at now, as lambdakit.IdempotencyRecord.Live sees it.
// A zero Expiration never ends (lambdakit.NeverExpire).
func recordState(rec lambdakit.IdempotencyRecord, now time.Time) string {
	switch {
	case !rec.Expiration.IsZero() && !now.Before(rec.Expiration):
		return stateExpired
	case rec.Status == lambdakit.StatusCompleted && rec.Failure != "":
		return stateFailed
	case rec.Status == lambdakit.StatusCompleted:
		return stateCompleted
	case rec.Effect != "" && !now.Before(rec.InProgressExpiration):
		return stateStopped
	case rec.Live(now):
		return stateInProgress
	}
	return stateLeaseEnded
}

// stateMeaning is what a state means for the next message with the key.
var stateMeaning = map[string]string{
	stateCompleted:  "the next message with this key is skipped as a duplicate and gets the cached result",
	stateFailed:     "its work ran, then failed (see failure): the next message with this key fails permanently without running the work again",
	stateInProgress: "its owner may be running: the next message with this key fails with ErrInProgress until the lease ends",
	stateLeaseEnded: "its owner stopped without completing or releasing it: the next message with this key takes it over and runs",
	stateStopped:    "its owner stopped after its effect (see effect), before completing: the next message with this key fails permanently without running; reconcile, then delete it to let the message run again",
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
		Validation: rec.Validation, ResultBytes: len(rec.Data), Failure: rec.Failure, Effect: rec.Effect,
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

// Run implements command.
func (c *recordsCommand) Run(ctx context.Context, args []string) error {
	if err := c.parse(args); err != nil {
		return err
	}
	// The SDK reads the process environment itself:
	// AWS_ENDPOINT_URL_DYNAMODB, AWS_REGION, credentials. A table name
	// names no endpoint, so the command says which one it uses before its
	// first call: a shell without AWS_ENDPOINT_URL reaches AWS.
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return cmdline.CannotRun(fmt.Errorf("AWS configuration: %w", err))
	}
	c.db = dynamodb.NewFromConfig(cfg)
	if err := checkLive(ctx, c.environ, c.live, "the table "+c.table, "DYNAMODB", c.db.Options().BaseEndpoint, cfg.Region, ""); err != nil {
		return asUsage(c.flags, err, cmdline.BadInput)
	}
	c.where = endpointDescription(c.environ, "DYNAMODB", "DynamoDB", c.db.Options().BaseEndpoint, cfg.Region)
	fmt.Fprintf(c.stderr, "lambdakit records: table %s %s\n", c.table, c.where)
	c.records, c.now = dynamostore.NewRecords(c.db, c.table, func(o *dynamostore.Options) {
		o.KeyAttr, o.StatusAttr = c.keyAttr, c.statusAttr
		o.SortKeyAttr, o.StaticPartitionKey = c.sortKeyAttr, c.staticPartitionKey
	}), time.Now()
	switch c.action {
	case "get":
		return c.get(ctx)
	case "delete":
		return c.delete(ctx)
	case "failed":
		return c.failed(ctx)
	}
	return c.stuck(ctx)
}

// fail returns err as the exit status it calls for.
func (c *recordsCommand) fail(ctx context.Context, err error) error {
	var notRecord *dynamostore.StatusError
	switch {
	case ctx.Err() != nil:
		return cmdline.ErrInterrupted
	case errors.As(err, &notRecord):
		// A ledger row's own status (CHARGED) read as the record's would
		// look like an abandoned lock, and deleting the row would charge
		// again on the next message: refuse, and name the flag.
		return c.flags.UsageError("%s has %q in its attribute %q, which is no record status (%s or %s), so it was neither shown nor changed: if the function keeps its record status in another attribute (dynamostore.Options.StatusAttr), give it with -status-attr",
			notRecord.ID, notRecord.Status, notRecord.Attr, lambdakit.StatusInProgress, lambdakit.StatusCompleted)
	case errors.Is(err, dynamostore.ErrNoTable):
		return cmdline.CannotRun(fmt.Errorf("table %q does not exist %s (check -table, the region and the endpoint)", c.table, c.where))
	case errors.Is(err, dynamostore.ErrNotFound):
		fmt.Fprintf(c.stderr, "lambdakit records: no record for key %q (id %s)\n", c.key, c.id())
		if err := c.checkPrefix(ctx); err != nil {
			return err
		}
		return cmdline.ErrFailed
	}
	if hint := c.otherKey(ctx, err); hint != "" {
		return c.flags.UsageError("%s", hint)
	}
	return cmdline.CannotRun(err)
}

// otherKey says which flag to give when err is DynamoDB refusing a key (a
// ValidationException) because the table's key is not the one -key-attr
// and -sort-key-attr name, and returns "" otherwise. DynamoDB's message
// names no attribute; the table's description does (it needs
// dynamodb:DescribeTable, asked only after the refusal).
func (c *recordsCommand) otherKey(ctx context.Context, err error) string {
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "ValidationException" {
		return ""
	}
	return c.keyHint(ctx)
}

// keyHint says which flag to give when the table's key is not the one
// -key-attr and -sort-key-attr name, and returns "" when it is, or when
// the table cannot be described.
func (c *recordsCommand) keyHint(ctx context.Context) string {
	out, derr := c.db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(c.table)})
	if derr != nil || out.Table == nil {
		return ""
	}
	for _, k := range out.Table.KeySchema {
		name := aws.ToString(k.AttributeName)
		switch {
		case k.KeyType == types.KeyTypeHash && name != firstNonEmpty(c.keyAttr, "id"):
			return fmt.Sprintf("the partition key of table %q is %q, not %q: give -key-attr %s (dynamostore.Options.KeyAttr)", c.table, name, firstNonEmpty(c.keyAttr, "id"), name)
		case k.KeyType == types.KeyTypeRange && name != c.sortKeyAttr:
			return fmt.Sprintf("table %q has the sort key %q: give -sort-key-attr %s and -static-pk-value, the partition key value of the function's records (dynamostore.Options.SortKeyAttr, StaticPartitionKey)", c.table, name, name)
		}
	}
	if c.sortKeyAttr != "" && len(out.Table.KeySchema) == 1 {
		return fmt.Sprintf("table %q has no sort key: leave out -sort-key-attr and -static-pk-value", c.table)
	}
	return ""
}

// checkPrefix tells, after a search came back empty, whether the prefix
// has any record at all: a failure when it has none.
func (c *recordsCommand) checkPrefix(ctx context.Context) error {
	found, err := c.records.HasPrefix(ctx, c.prefix)
	switch {
	case err != nil:
		return c.fail(ctx, err)
	case !found:
		// A Scan of a composite-key table without -sort-key-attr, or
		// one with -key-attr naming another attribute, is refused by
		// nothing: it finds no record. Name the flag rather than blame
		// -prefix.
		if hint := c.keyHint(ctx); hint != "" {
			return c.flags.UsageError("%s", hint)
		}
		return cmdline.Failed(fmt.Errorf("no record in table %q has the prefix %q: is -prefix the function's lambdakit.Options.Prefix?", c.table, c.prefix))
	}
	return nil
}

func (c *recordsCommand) id() string {
	if c.readableIDs {
		return c.prefix + "#" + c.key
	}
	return lambdakit.RecordID(c.prefix, c.key)
}

func (c *recordsCommand) get(ctx context.Context) error {
	rec, err := c.records.Get(ctx, c.id())
	if err != nil {
		return c.fail(ctx, err)
	}
	c.print(rec, nil)
	return nil
}

func (c *recordsCommand) delete(ctx context.Context) error {
	rec, err := c.records.Get(ctx, c.id())
	if err != nil {
		return c.fail(ctx, err)
	}
	deleted := false
	defer func() {
		if c.json {
			c.print(rec, &deleted)
		}
	}()
	if !c.json {
		c.print(rec, nil)
	}
	if recordState(rec, c.now) == stateInProgress && !c.force {
		return cmdline.Failed(fmt.Errorf("not deleted: the record is in progress and its lease ends at %s (%s); its owner may still be running. Wait for the lease to end, or use -force",
			formatTime(rec.InProgressExpiration), relative(rec.InProgressExpiration, c.now)))
	}
	if !c.yes {
		again := ""
		if rec.Failure != "" {
			again = " Its work ran already: deleting the record runs it a second time."
		}
		fmt.Fprintf(c.stderr, "Delete %s? The next message with key %q will run the handler again.%s [y/N] ", rec.ID, c.key, again)
		answer, err := readAnswer(ctx, c.stdin)
		if ctx.Err() != nil {
			fmt.Fprintln(c.stderr) // end the prompt's line
			return cmdline.ErrInterrupted
		}
		if err != nil || (answer != "y" && answer != "yes") {
			return cmdline.Failed(errors.New("not deleted"))
		}
	}
	switch err := c.records.Delete(ctx, rec); {
	case errors.Is(err, dynamostore.ErrRecordChanged):
		return cmdline.Failed(fmt.Errorf("not deleted: %s changed since it was read; look again", rec.ID))
	case errors.Is(err, dynamostore.ErrNotFound):
		return cmdline.Failed(fmt.Errorf("not deleted: %s is gone already", rec.ID))
	case err != nil:
		return c.fail(ctx, err)
	}
	deleted = true
	fmt.Fprintf(c.stderr, "lambdakit records: deleted %s\n", rec.ID)
	return nil
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

func (c *recordsCommand) stuck(ctx context.Context) error {
	before := c.now.Add(-c.olderThan)
	n, err := c.list(ctx, dynamostore.ScanFilter{Prefix: c.prefix, InProgress: true, LeaseEndedBefore: before}, func(rec lambdakit.IdempotencyRecord) string {
		return fmt.Sprintf("lease ended %s (%s)  expires %s  lease %s", formatTime(rec.InProgressExpiration), relative(rec.InProgressExpiration, c.now), formatTime(rec.Expiration), orNone(rec.Lease))
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "lambdakit records: %d in progress with a lease that ended more than %v ago (before %s)\n", n, c.olderThan, formatTime(before))
	return nil
}

// failed lists the records completed with a failure: messages whose work
// ran and then failed, which now fail without running it.
func (c *recordsCommand) failed(ctx context.Context) error {
	n, err := c.list(ctx, dynamostore.ScanFilter{Prefix: c.prefix, Failed: true}, func(rec lambdakit.IdempotencyRecord) string {
		return fmt.Sprintf("expires %s  failure %q", c.expires(rec), rec.Failure)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "lambdakit records: %d completed with a failure\n", n)
	return nil
}

// list prints the records f selects, one a line: with -json as get does,
// else the ID and what line says of it. It returns how many it printed;
// none at all when the prefix has no record is a failure.
func (c *recordsCommand) list(ctx context.Context, f dynamostore.ScanFilter, line func(lambdakit.IdempotencyRecord) string) (int, error) {
	n := 0
	for rec, err := range c.records.Scan(ctx, f) {
		if err != nil {
			return n, c.fail(ctx, err)
		}
		n++
		if c.json {
			c.print(rec, nil)
			continue
		}
		fmt.Fprintf(c.stdout, "%s  %s\n", rec.ID, line(rec))
	}
	if n == 0 {
		if err := c.checkPrefix(ctx); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// expires says when rec expires: a time, and how far it is, or never.
func (c *recordsCommand) expires(rec lambdakit.IdempotencyRecord) string {
	if rec.Expiration.IsZero() {
		return "never"
	}
	return fmt.Sprintf("%s (%s)", formatTime(rec.Expiration), relative(rec.Expiration, c.now))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// print writes rec to standard output: a JSON line, or text.
func (c *recordsCommand) print(rec lambdakit.IdempotencyRecord, deleted *bool) {
	o := newRecordOutput(rec, c.now)
	o.Deleted = deleted
	if c.json {
		b, _ := json.Marshal(o)
		fmt.Fprintf(c.stdout, "%s\n", b)
		return
	}
	w := c.stdout
	fmt.Fprintf(w, "id          %s\n", o.ID)
	fmt.Fprintf(w, "status      %s\n", o.Status)
	fmt.Fprintf(w, "state       %s: %s\n", o.State, stateMeaning[o.State])
	if o.Failure != "" {
		fmt.Fprintf(w, "failure     %s\n", o.Failure)
	}
	if o.Effect != "" {
		fmt.Fprintf(w, "effect      %s\n", o.Effect)
	}
	fmt.Fprintf(w, "expires     %s\n", c.expires(rec))
	fmt.Fprintf(w, "lease       %s\n", orNone(o.LeaseHolder))
	if o.LeaseEnd != "" {
		fmt.Fprintf(w, "lease ends  %s (%s)\n", o.LeaseEnd, relative(rec.InProgressExpiration, c.now))
	}
	fmt.Fprintf(w, "validation  %s\n", orNone(o.Validation))
	fmt.Fprintf(w, "result      %s\n", cmdline.Count(o.ResultBytes, "byte", "bytes"))
}
