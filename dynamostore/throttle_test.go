package dynamostore_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// proxied is a Store whose client, configured with WithLambdaDefaults,
// talks to moto through a proxy that can throttle or hang chosen requests.
type proxied struct {
	*fixture
	proxy *testenv.Proxy
}

// quickBackoff keeps the retries' waits short, so that a test spends its
// time on what it checks; the number of attempts stays the default.
func quickBackoff(c *dynamostore.ClientOptions) {
	c.BaseBackoff = time.Millisecond
	c.MaxBackoff = 5 * time.Millisecond
}

func setupProxied(tb testing.TB, clientOpts ...func(*dynamostore.ClientOptions)) *proxied {
	tb.Helper()
	f := setup(tb)
	p := &proxied{fixture: f, proxy: testenv.NewProxy(tb, local(tb).URL)}
	client := dynamodb.NewFromConfig(local(tb).Config(), dynamostore.WithLambdaDefaults(clientOpts...), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(p.proxy.URL)
	})
	f.store = newStore(tb, client, f.table)
	return p
}

// ledgerPut is a write to stage with a completion: a row in the store's
// own table, under another key.
func ledgerPut(table, id string) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(table),
		Item:      map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "row#" + id}},
	}}
}

func isThrottleMessage(err error) bool {
	return strings.Contains(strings.ToLower(err.Error()), "throttl")
}

// Every way DynamoDB throttles each store call ends, once the configured
// attempts are spent, in an error that is lambdakit.ErrThrottled and still
// the SDK's error, and says so.
func TestThrottledCallFailsWithErrThrottledAfterMaxAttempts(t *testing.T) {
	const msg = "throttled by the test proxy"
	var (
		provisioned *types.ProvisionedThroughputExceededException
		throttling  *types.ThrottlingException
		limit       *types.RequestLimitExceeded
		canceled    *types.TransactionCanceledException
	)
	cases := []struct {
		name string
		op   string // the operation the proxy throttles
		body string
		// call makes the store call under test on a fresh record that the
		// proxy let through Acquire (for Complete and Release).
		call func(p *proxied, rec lambdakit.IdempotencyRecord) error
		// sdkErr is the SDK error the result must still unwrap to.
		sdkErr any
		// inProgress: the record must still be held after the failure.
		inProgress bool
	}{
		{"acquire with provisioned throughput exceeded", "PutItem",
			testenv.DynamoDBError("ProvisionedThroughputExceededException", msg), acquireCall, &provisioned, false},
		{"acquire with ThrottlingException", "PutItem",
			testenv.DynamoDBError("ThrottlingException", msg), acquireCall, &throttling, false},
		{"acquire with the account's request limit exceeded", "PutItem",
			testenv.DynamoDBError("RequestLimitExceeded", msg), acquireCall, &limit, false},
		{"complete with ThrottlingException", "UpdateItem",
			testenv.DynamoDBError("ThrottlingException", msg), completeCall(false), &throttling, true},
		{"release with provisioned throughput exceeded", "DeleteItem",
			testenv.DynamoDBError("ProvisionedThroughputExceededException", msg), releaseCall, &provisioned, true},
		{"staged completion whose record write is throttled", "TransactWriteItems",
			testenv.DynamoDBTransactionCanceled("ThrottlingError", "None"), completeCall(true), &canceled, true},
		{"staged completion whose staged write is throttled", "TransactWriteItems",
			testenv.DynamoDBTransactionCanceled("None", "ProvisionedThroughputExceeded"), completeCall(true), &canceled, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := setupProxied(t, quickBackoff)
			rec := record("throttle#"+c.op, now())
			if c.op != "PutItem" {
				p.mustAcquire(t, rec, time.Now())
			}
			p.proxy.Answer(c.op, -1, http.StatusBadRequest, c.body)

			err := c.call(p, rec)
			if !errors.Is(err, lambdakit.ErrThrottled) {
				t.Fatalf("got %v; want an error that is lambdakit.ErrThrottled", err)
			}
			if !errors.As(err, c.sdkErr) {
				t.Errorf("got %v; want it to unwrap to the SDK's %T", err, c.sdkErr)
			}
			if !isThrottleMessage(err) {
				t.Errorf("got message %q; want it to say throttled", err)
			}
			if got := p.proxy.Count(c.op); got != dynamostore.DefaultMaxAttempts {
				t.Errorf("got %d %s attempts at the proxy; want %d (DefaultMaxAttempts)", got, c.op, dynamostore.DefaultMaxAttempts)
			}
			item := p.record(t, rec.ID)
			switch {
			case c.inProgress && (item == nil || str(t, item, "status") != string(lambdakit.StatusInProgress)):
				t.Errorf("got item %v after a throttled %s; want the record still in progress", item, c.op)
			case !c.inProgress && item != nil:
				t.Errorf("got item %v after a throttled acquire; want none", item)
			}
		})
	}
}

func acquireCall(p *proxied, rec lambdakit.IdempotencyRecord) error {
	_, _, err := p.store.Acquire(context.Background(), rec, time.Now())
	return err
}

func completeCall(staged bool) func(p *proxied, rec lambdakit.IdempotencyRecord) error {
	return func(p *proxied, rec lambdakit.IdempotencyRecord) error {
		rec.Status = lambdakit.StatusCompleted
		rec.Data = []byte(`{"ok":true}`)
		if staged {
			rec.Staged = []any{ledgerPut(p.table, rec.ID)}
		}
		return p.store.Complete(context.Background(), rec)
	}
}

func releaseCall(p *proxied, rec lambdakit.IdempotencyRecord) error {
	return p.store.Release(context.Background(), rec.ID, rec.Lease)
}

// With the defaults untouched (their real backoff included), a call that
// keeps being throttled is sent exactly DefaultMaxAttempts times.
func TestDefaultClientOptionsBoundTheAttempts(t *testing.T) {
	p := setupProxied(t)
	p.proxy.Answer("PutItem", -1, http.StatusBadRequest, testenv.DynamoDBError("ProvisionedThroughputExceededException", "slow down"))
	err := acquireCall(p, record("bounded", now()))
	if !errors.Is(err, lambdakit.ErrThrottled) {
		t.Fatalf("got %v; want lambdakit.ErrThrottled", err)
	}
	if got := p.proxy.Count("PutItem"); got != dynamostore.DefaultMaxAttempts {
		t.Errorf("got %d attempts; want %d", got, dynamostore.DefaultMaxAttempts)
	}
	if dynamostore.DefaultMaxAttempts < 2 {
		t.Errorf("DefaultMaxAttempts = %d; want retries", dynamostore.DefaultMaxAttempts)
	}
}

// A throttle that clears before the attempts are spent costs nothing but
// the retries: the call succeeds.
func TestThrottleThatClearsIsRetriedThrough(t *testing.T) {
	cases := []struct {
		name, op, body string
		call           func(p *proxied, rec lambdakit.IdempotencyRecord) error
	}{
		{"acquire", "PutItem", testenv.DynamoDBError("ThrottlingException", "scaling"), acquireCall},
		{"staged completion", "TransactWriteItems", testenv.DynamoDBTransactionCanceled("None", "ThrottlingError"), completeCall(true)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := setupProxied(t, quickBackoff)
			rec := record("clears#"+c.op, now())
			if c.op != "PutItem" {
				p.mustAcquire(t, rec, time.Now())
			}
			throttles := dynamostore.DefaultMaxAttempts - 1
			p.proxy.Answer(c.op, throttles, http.StatusBadRequest, c.body)
			if err := c.call(p, rec); err != nil {
				t.Fatalf("got %v; want success on the last attempt", err)
			}
			if got := p.proxy.Count(c.op); got != throttles+1 {
				t.Errorf("got %d attempts; want %d", got, throttles+1)
			}
			if p.record(t, rec.ID) == nil {
				t.Error("got no record; want it written")
			}
		})
	}
}

// A transaction cancelled for a failed condition as well as for throttling
// is not throttled: it is not retried, and its real reason (the lease was
// lost) is what the caller sees.
func TestCancelledTransactionWithAnotherReasonIsNotThrottled(t *testing.T) {
	p := setupProxied(t, quickBackoff)
	rec := record("mixed", now())
	p.mustAcquire(t, rec, time.Now())
	p.proxy.Answer("TransactWriteItems", -1, http.StatusBadRequest,
		testenv.DynamoDBTransactionCanceled("ConditionalCheckFailed", "ThrottlingError"))
	err := completeCall(true)(p, rec)
	if errors.Is(err, lambdakit.ErrThrottled) || !errors.Is(err, lambdakit.ErrLeaseLost) {
		t.Errorf("got %v; want lambdakit.ErrLeaseLost, not ErrThrottled", err)
	}
	if got := p.proxy.Count("TransactWriteItems"); got != 1 {
		t.Errorf("got %d attempts; want 1 (not retried)", got)
	}
}

// No store call outlives its context's deadline, even against a DynamoDB
// that never answers: it returns by the deadline, with an error that says
// the deadline passed, and sends nothing after it.
func TestStoreCallReturnsByTheDeadline(t *testing.T) {
	ops := []struct {
		op   string
		call func(ctx context.Context, p *proxied, rec lambdakit.IdempotencyRecord) error
	}{
		{"PutItem", func(ctx context.Context, p *proxied, rec lambdakit.IdempotencyRecord) error {
			_, _, err := p.store.Acquire(ctx, rec, time.Now())
			return err
		}},
		{"TransactWriteItems", func(ctx context.Context, p *proxied, rec lambdakit.IdempotencyRecord) error {
			rec.Status, rec.Staged = lambdakit.StatusCompleted, []any{ledgerPut(p.table, rec.ID)}
			return p.store.Complete(ctx, rec)
		}},
		{"DeleteItem", func(ctx context.Context, p *proxied, rec lambdakit.IdempotencyRecord) error {
			return p.store.Release(ctx, rec.ID, rec.Lease)
		}},
	}
	for _, o := range ops {
		t.Run(o.op, func(t *testing.T) {
			p := setupProxied(t) // the default attempt timeout, 3 s, is longer than the deadline
			rec := record("deadline#"+o.op, now())
			if o.op != "PutItem" {
				p.mustAcquire(t, rec, time.Now())
			}
			p.proxy.Hang(o.op, -1)
			deadline := time.Now().Add(300 * time.Millisecond)
			ctx, cancel := context.WithDeadline(t.Context(), deadline)
			defer cancel()

			err := o.call(ctx, p, rec)
			late := time.Since(deadline)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("got %v; want an error that is context.DeadlineExceeded", err)
			}
			// A bound, not a speed: the call must end at the deadline, not
			// at the attempt timeout (3 s) or after retries.
			if late > 2*time.Second {
				t.Errorf("returned %v after the deadline; want at it", late)
			}
			if got := p.proxy.Count(o.op); got != 1 {
				t.Errorf("got %d attempts; want 1 (none after the deadline)", got)
			}
		})
	}
}

// Without a deadline (the middleware completes and releases records on a
// context without one), a call is still bounded: each attempt by the
// attempt timeout, and the attempts by MaxAttempts.
func TestAttemptTimeoutBoundsACallWithoutDeadline(t *testing.T) {
	p := setupProxied(t, quickBackoff, func(c *dynamostore.ClientOptions) {
		c.AttemptTimeout = 100 * time.Millisecond
		c.MaxAttempts = 3
	})
	p.proxy.Hang("PutItem", -1)
	done := make(chan error, 1)
	go func() { done <- acquireCall(p, record("no-deadline", now())) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Acquire without a deadline did not return within 30 s; want it bounded by 3 attempts of 100 ms")
	}
	var netErr net.Error
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Errorf("got %v; want a timeout error", err)
	}
	if got := p.proxy.Count("PutItem"); got != 3 {
		t.Errorf("got %d attempts; want 3 (each timed out, then retried)", got)
	}
}

// Through the middleware and the batch: a record whose store call is
// throttled fails, and its log line says it was throttled.
func TestThrottledRecordFailsWithItsOwnReason(t *testing.T) {
	p := setupProxied(t, quickBackoff)
	p.proxy.Answer("PutItem", -1, http.StatusBadRequest, testenv.DynamoDBError("ProvisionedThroughputExceededException", "slow down"))
	var logs lambdakittest.LogBuffer
	runs := 0
	h := lambdakit.Idempotent(p.store, lambdakit.KeyFromField("id"), func(o *lambdakit.Options) {
		o.Logger = logs.Logger()
	})(lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) {
		runs++
		return nil, nil
	}))
	batch := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) { o.Logger = logs.Logger() })
	throttledMsg := lambdakittest.Message(`{"id":"hot"}`)

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	resp, err := batch(ctx, lambdakittest.Event(throttledMsg))
	if !errors.Is(err, lambdakit.ErrAllFailed) || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != throttledMsg.MessageId {
		t.Fatalf("got %+v, %v; want the record reported failed", resp, err)
	}
	if runs != 0 {
		t.Errorf("handler ran %d times; want 0 without the lock", runs)
	}
	var reason string
	for _, line := range logs.Lines(t) {
		if line["msg"] == "message failed" && line["messageId"] == throttledMsg.MessageId {
			reason, _ = line["reason"].(string)
		}
	}
	if !strings.Contains(reason, "throttled") {
		t.Errorf("got reason %q; want it to say throttled", reason)
	}
}

// WithLambdaDefaults is deliberate: a retry setting of the aws.Config (as
// AWS_MAX_ATTEMPTS would make) does not change its bound.
func TestWithLambdaDefaultsOverridesTheConfigsRetrySettings(t *testing.T) {
	f := setup(t)
	proxy := testenv.NewProxy(t, local(t).URL)
	cfg := local(t).Config()
	cfg.RetryMaxAttempts = 9
	client := dynamodb.NewFromConfig(cfg, dynamostore.WithLambdaDefaults(quickBackoff), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(proxy.URL)
	})
	store := newStore(t, client, f.table)
	proxy.Answer("PutItem", -1, http.StatusBadRequest, testenv.DynamoDBError("ThrottlingException", "slow down"))
	if _, _, err := store.Acquire(t.Context(), record("config", now()), time.Now()); !errors.Is(err, lambdakit.ErrThrottled) {
		t.Fatalf("got %v; want lambdakit.ErrThrottled", err)
	}
	if got := proxy.Count("PutItem"); got != dynamostore.DefaultMaxAttempts {
		t.Errorf("got %d attempts; want %d, whatever the config says", got, dynamostore.DefaultMaxAttempts)
	}
}

// MaxConns bounds the connections: with every request hanging, no more
// than MaxConns reach DynamoDB; the others wait for a connection.
func TestMaxConnsBoundsTheConnections(t *testing.T) {
	const maxConns, calls = 2, 6
	p := setupProxied(t, func(c *dynamostore.ClientOptions) {
		c.MaxConns = maxConns
		c.MaxAttempts = 1
		c.AttemptTimeout = 20 * time.Second
	})
	p.proxy.Hang("PutItem", -1)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, calls)
	for i := range calls {
		go func() {
			_, _, err := p.store.Acquire(ctx, record("conns#"+string(rune('a'+i)), now()), time.Now())
			done <- err
		}()
	}
	// Wait (bounded) until the allowed connections carry their requests,
	// then give the others a moment in which they could pass the bound.
	for i := 0; p.proxy.Count("PutItem") < maxConns && i < 500; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	got := p.proxy.Count("PutItem")
	cancel()
	for range calls {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("got %v; want context.Canceled once the test gives up", err)
		}
	}
	if got != maxConns {
		t.Errorf("got %d requests in flight; want %d (MaxConns)", got, maxConns)
	}
}
