package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/tools/internal/e2egw"
)

// crashSwitch is the payment function's fault switch (functions/payment):
// "<function name>:<payment_id>".
const crashSwitch = "E2E_CRASH_AFTER_CHARGE"

// target is a deployed stack that something else runs: the story sees it
// only from the outside, as a producer and an auditor would.
type target struct {
	cfg       aws.Config
	stackName string
	// gateway is the gateway's base URL, whose GET /charges the story
	// counts; empty: the payment function's PAYMENT_GATEWAY_URL.
	gateway string
	// cli is the lambdakit binary the story publishes with; env its
	// environment, and live gives it -live (a queue on AWS).
	cli  string
	env  []string
	live bool
	// wait bounds each wait for an outcome; poll is the pause between
	// looks.
	wait, poll time.Duration
	// runID makes the story's payment IDs its own, so that a stack can
	// be played again.
	runID string
	out   io.Writer
	dir   string // for the files the story publishes
}

// stack is what the story reads from the stack's outputs.
type stack struct {
	queue, dlq, eventsDLQ, relayFailures string // queue URLs
	payments, ledger, function           string // tables, the payment function
}

// payment is one line the story publishes.
type payment struct {
	PaymentID  string `json:"payment_id"`
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
	// SendID names the message for SQS deduplication when the story
	// sends a payment again (publish -key-field send_id).
	SendID string `json:"send_id,omitempty"`
}

// errCheckFailed is a broken promise of the story.
var errCheckFailed = errors.New("check failed")

// ids are the story's payment IDs.
func (t *target) ids() (fresh []string, poison, crash string) {
	for i := 1; i <= 4; i++ {
		fresh = append(fresh, fmt.Sprintf("e2e-%s-%d", t.runID, i))
	}
	return fresh, "e2e-" + t.runID + "-poison", "e2e-" + t.runID + "-crash"
}

// play runs the story: new payments and a poison one, the same payments
// sent again, a crash after a charge; each charge through the outbox, the
// relay and the events queue to the ledger. It returns errCheckFailed (the
// report says which) or the error that stopped it.
func (t *target) play(ctx context.Context) error {
	s, err := t.readStack(ctx)
	if err != nil {
		return err
	}
	if t.gateway == "" {
		if t.gateway, err = t.functionEnv(ctx, s.function, "PAYMENT_GATEWAY_URL"); err != nil {
			return err
		}
	}
	t.say("stack %s: payment queue %s, gateway %s", t.stackName, s.queue, t.gateway)
	fresh, poison, crash := t.ids()
	failed := false
	check := func(ok bool, format string, args ...any) {
		status := "PASS"
		if !ok {
			status, failed = "FAIL", true
		}
		t.say("%s  %s", status, fmt.Sprintf(format, args...))
	}

	t.say("1. new payments, and a poison one (amount 0) that can never succeed")
	lines := []payment{}
	for i, id := range fresh {
		lines = append(lines, t.payment(id, i))
	}
	bad := t.payment(poison, 0)
	bad.Amount = 0
	if err := t.publish(ctx, s.queue, "payment_id", append(lines, bad)); err != nil {
		return err
	}
	err = t.waitFor(ctx, "the new payments charged and in the ledger, the poison one in the DLQ", func() (bool, error) {
		done, err := t.allDone(ctx, s, fresh)
		if err != nil || !done {
			return false, err
		}
		return t.inQueue(ctx, s.dlq, poison)
	})
	if err != nil {
		return err
	}
	counts, err := t.counts(ctx)
	if err != nil {
		return err
	}
	for _, id := range fresh {
		check(counts[id] == e2egw.Count{Requests: 1, Charges: 1}, "%s: charged once at the gateway (%+v)", id, counts[id])
	}
	check(counts[poison].Requests == 0, "%s: never reached the gateway (%+v), in the DLQ", poison, counts[poison])

	t.say("2. the same payments sent again (new deduplication IDs, as a producer's retry after SQS's 5 minutes)")
	for i := range lines {
		lines[i].SendID = lines[i].PaymentID + "-again"
	}
	if err := t.publish(ctx, s.queue, "send_id", lines); err != nil {
		return err
	}
	if err := t.waitFor(ctx, "the payment queue empty", func() (bool, error) { return t.drained(ctx, s.queue) }); err != nil {
		return err
	}
	if counts, err = t.counts(ctx); err != nil {
		return err
	}
	for _, id := range fresh {
		check(counts[id] == e2egw.Count{Requests: 1, Charges: 1}, "%s: its copy never reached the gateway (%+v)", id, counts[id])
	}
	n, err := t.ledgerEntries(ctx, s, fresh)
	if err != nil {
		return err
	}
	check(n == len(fresh), "one ledger entry per charge: %d of %d", n, len(fresh))

	t.say("3. a crash after a charge: the switch on for %s, the payment sent, the switch off", crash)
	restore, err := t.setSwitch(ctx, s.function, crash)
	if err != nil {
		return err
	}
	err = t.publish(ctx, s.queue, "payment_id", []payment{t.payment(crash, 0)})
	if err == nil {
		err = t.waitFor(ctx, "the gateway to charge "+crash, func() (bool, error) {
			c, err := t.counts(ctx)
			return c[crash].Charges > 0, err
		})
	}
	// The switch fires on the first delivery only: it goes off as soon as
	// the charge is made, before the redelivery.
	if rerr := restore(ctx); err == nil {
		err = rerr
	}
	if err != nil {
		return err
	}
	if err := t.waitFor(ctx, crash+" recorded after its redelivery (the lease ran out, the retry took over)", func() (bool, error) {
		return t.allDone(ctx, s, []string{crash})
	}); err != nil {
		return err
	}
	if counts, err = t.counts(ctx); err != nil {
		return err
	}
	c := counts[crash]
	check(c.Charges == 1 && c.Requests >= 2, "%s: charged once, asked %d times: the crash lost the first answer, the retry got the same charge (%+v)", crash, c.Requests, c)

	t.say("4. what must not be")
	for _, q := range []struct{ name, url string }{{"the DLQ", s.dlq}, {"the events' DLQ", s.eventsDLQ}, {"the relay's failures", s.relayFailures}} {
		for _, id := range append(fresh, crash) {
			in, err := t.inQueue(ctx, q.url, id)
			if err != nil {
				return err
			}
			check(!in, "%s: not in %s", id, q.name)
		}
	}
	if failed {
		return errCheckFailed
	}
	return nil
}

// payment is a valid payment id; customers take turns, two FIFO groups.
func (t *target) payment(id string, i int) payment {
	return payment{PaymentID: id, OrderID: "ord-" + id, CustomerID: fmt.Sprintf("cus_e2e_%d", i%2), Amount: int64(1000 + i), Currency: "EUR"}
}

func (t *target) say(format string, args ...any) { fmt.Fprintf(t.out, format+"\n", args...) }

// readStack reads the stack's outputs through CloudFormation.
func (t *target) readStack(ctx context.Context) (stack, error) {
	out, err := cloudformation.NewFromConfig(t.cfg).DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(t.stackName)})
	if err != nil {
		return stack{}, fmt.Errorf("reading stack %s: %w", t.stackName, err)
	}
	if len(out.Stacks) != 1 {
		return stack{}, fmt.Errorf("stack %s: %d stacks", t.stackName, len(out.Stacks))
	}
	o := map[string]string{}
	for _, v := range out.Stacks[0].Outputs {
		o[aws.ToString(v.OutputKey)] = aws.ToString(v.OutputValue)
	}
	s := stack{payments: o["PaymentsTableName"], ledger: o["LedgerTableName"], function: o["PaymentFunctionName"]}
	var events string
	for _, q := range []struct {
		key string
		url *string
	}{{"PaymentQueueUrl", &s.queue}, {"PaymentDLQUrl", &s.dlq}, {"PaymentEventsQueueUrl", &events}, {"RelayFailureQueueUrl", &s.relayFailures}} {
		if o[q.key] == "" {
			return stack{}, fmt.Errorf("stack %s has no output %s: not the sample's stack?", t.stackName, q.key)
		}
		*q.url = path.Base(o[q.key])
	}
	// The events' DLQ is no output: its name is the events queue's with
	// -dlq (template.yaml).
	s.eventsDLQ = strings.TrimSuffix(events, ".fifo") + "-dlq.fifo"
	for _, name := range []*string{&s.queue, &s.dlq, &s.eventsDLQ, &s.relayFailures} {
		// The outputs name the queues; their URLs are asked of the
		// endpoint the story talks to (a local AWS writes its own host).
		u, err := sqs.NewFromConfig(t.cfg).GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(*name)})
		if err != nil {
			return stack{}, fmt.Errorf("queue %s of stack %s: %w", *name, t.stackName, err)
		}
		*name = aws.ToString(u.QueueUrl)
	}
	return s, nil
}

// functionEnv is one variable of the function's deployed environment.
func (t *target) functionEnv(ctx context.Context, function, name string) (string, error) {
	out, err := lambda.NewFromConfig(t.cfg).GetFunctionConfiguration(ctx, &lambda.GetFunctionConfigurationInput{FunctionName: aws.String(function)})
	if err != nil {
		return "", fmt.Errorf("function %s: %w", function, err)
	}
	if out.Environment == nil || out.Environment.Variables[name] == "" {
		return "", fmt.Errorf("function %s has no %s", function, name)
	}
	return out.Environment.Variables[name], nil
}

// setSwitch turns the payment function's fault switch on for paymentID,
// and returns what turns it off: the environment as it was.
func (t *target) setSwitch(ctx context.Context, function, paymentID string) (func(context.Context) error, error) {
	lc := lambda.NewFromConfig(t.cfg)
	out, err := lc.GetFunctionConfiguration(ctx, &lambda.GetFunctionConfigurationInput{FunctionName: aws.String(function)})
	if err != nil {
		return nil, fmt.Errorf("function %s: %w", function, err)
	}
	before := map[string]string{}
	if out.Environment != nil {
		before = out.Environment.Variables
	}
	update := func(ctx context.Context, vars map[string]string) error {
		if _, err := lc.UpdateFunctionConfiguration(ctx, &lambda.UpdateFunctionConfigurationInput{FunctionName: aws.String(function),
			Environment: &lambdatypes.Environment{Variables: vars}}); err != nil {
			return fmt.Errorf("updating %s's environment: %w", function, err)
		}
		// Lambda applies it to new invocations once the update is done.
		w := lambda.NewFunctionUpdatedV2Waiter(lc, func(o *lambda.FunctionUpdatedV2WaiterOptions) { o.MinDelay, o.MaxDelay = time.Second, 5*time.Second })
		return w.Wait(ctx, &lambda.GetFunctionInput{FunctionName: aws.String(function)}, 2*time.Minute)
	}
	on := maps.Clone(before)
	on[crashSwitch] = aws.ToString(out.FunctionName) + ":" + paymentID
	if err := update(ctx, on); err != nil {
		return nil, err
	}
	delete(before, crashSwitch)
	return func(ctx context.Context) error {
		// Off even when the story was interrupted.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
		defer cancel()
		return update(ctx, before)
	}, nil
}

// publish sends lines to queue with lambdakit publish, keyed by keyField.
func (t *target) publish(ctx context.Context, queue, keyField string, lines []payment) error {
	f, err := os.CreateTemp(t.dir, "payments-*.jsonl")
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	args := []string{"publish", "-queue", queue, "-key-field", keyField, "-group-field", "customer_id"}
	if t.live {
		args = append(args, "-live")
	}
	cmd := exec.CommandContext(ctx, t.cli, append(args, f.Name())...)
	cmd.Env = t.env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("lambdakit publish: %w\n%s", err, out)
	}
	t.say("   published %d payments (%s)", len(lines), filepath.Base(f.Name()))
	return nil
}

// waitFor polls cond until it holds, for t.wait at most.
func (t *target) waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, t.wait)
	defer cancel()
	for {
		ok, err := cond()
		if ok {
			t.say("   %s: after %s", what, time.Since(start).Round(100*time.Millisecond))
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		select {
		case <-ctx.Done():
			t.say("FAIL  %s: not within %v", what, t.wait)
			return errCheckFailed
		case <-time.After(t.poll):
		}
	}
}

// allDone reports whether each payment's ledger row is CHARGED and its
// ledger entry written.
func (t *target) allDone(ctx context.Context, s stack, ids []string) (bool, error) {
	db := dynamodb.NewFromConfig(t.cfg)
	for _, id := range ids {
		row, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.payments), ConsistentRead: aws.Bool(true),
			Key: map[string]ddbtypes.AttributeValue{"payment_id": &ddbtypes.AttributeValueMemberS{Value: "payment#" + id}}})
		if err != nil {
			return false, err
		}
		if st, _ := row.Item["status"].(*ddbtypes.AttributeValueMemberS); st == nil || st.Value != "CHARGED" {
			return false, nil
		}
	}
	n, err := t.ledgerEntries(ctx, s, ids)
	return n == len(ids), err
}

// ledgerEntries counts the ledger entries of ids ("entry#<payment_id>").
func (t *target) ledgerEntries(ctx context.Context, s stack, ids []string) (int, error) {
	db := dynamodb.NewFromConfig(t.cfg)
	n := 0
	for _, id := range ids {
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.ledger), ConsistentRead: aws.Bool(true),
			Key: map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: "entry#" + id}}})
		if err != nil {
			return 0, err
		}
		if out.Item != nil {
			n++
		}
	}
	return n, nil
}

// inQueue reports whether a message of queue names paymentID. It looks
// without taking: each message it receives is visible again at once.
func (t *target) inQueue(ctx context.Context, queue, paymentID string) (bool, error) {
	q := sqs.NewFromConfig(t.cfg)
	found := false
	for range 5 { // up to 50 messages: the story's queues hold a few
		out, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(queue), MaxNumberOfMessages: 10, VisibilityTimeout: 0, WaitTimeSeconds: 0})
		if err != nil {
			return false, err
		}
		for _, m := range out.Messages {
			found = found || strings.Contains(aws.ToString(m.Body), `"`+paymentID+`"`)
		}
		if len(out.Messages) == 0 || found {
			break
		}
	}
	return found, nil
}

// drained reports whether queue holds no message, visible or in flight.
func (t *target) drained(ctx context.Context, queue string) (bool, error) {
	out, err := sqs.NewFromConfig(t.cfg).GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(queue),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		return false, err
	}
	for _, v := range out.Attributes {
		if n, _ := strconv.Atoi(v); n > 0 {
			return false, nil
		}
	}
	return true, nil
}

// counts asks the gateway what it saw.
func (t *target) counts(ctx context.Context) (e2egw.Counts, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(t.gateway, "/")+"/charges", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the gateway's counts: %w", err)
	}
	defer resp.Body.Close()
	var c e2egw.Counts
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the gateway's counts: %s (a gateway of tools/e2e?)", resp.Status)
	}
	return c, json.NewDecoder(resp.Body).Decode(&c)
}
