package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
)

// Defaults of ClientOptions, chosen for a store inside a Lambda function
// whose invocation lasts about a minute and whose failed records come back
// only after the queue's visibility timeout (minutes).
const (
	// DefaultMaxAttempts is how many times a call is sent, the first time
	// included. A throttled record that fails waits a whole visibility
	// timeout before it is retried, so a few quick retries are worth
	// their cost; more would only add load to a table that is already
	// refusing it.
	DefaultMaxAttempts = 4
	// DefaultBaseBackoff and DefaultMaxBackoff shape the wait before retry
	// n: a random time up to min(DefaultMaxBackoff, DefaultBaseBackoff ×
	// 2^n). With the defaults that is at most 200, 400 and 800 ms, 1.4 s
	// for a whole call: the SDK's own default (1 s base, 20 s cap) could
	// spend a third of the invocation on one record.
	DefaultBaseBackoff = 100 * time.Millisecond
	DefaultMaxBackoff  = time.Second
	// DefaultAttemptTimeout bounds one attempt, connection included.
	// DynamoDB answers in milliseconds; an attempt that takes seconds is
	// stuck on a bad connection, and a fresh attempt does better than
	// waiting for the invocation's deadline. A call without a deadline
	// therefore ends within MaxAttempts × AttemptTimeout plus the
	// backoffs (13.4 s with the defaults).
	DefaultAttemptTimeout = 3 * time.Second
	// DefaultMaxConns bounds the connections the client keeps open to
	// DynamoDB, busy and idle together. A Lambda function may hold 1,024
	// file descriptors, and each connection takes one; the SDK's own
	// bound (2,048 per host) would let a large batch run out of them,
	// failing the gateway calls and the Runtime API's connection as well.
	// 64 matches the records a batch runs at once by default
	// (lambdakit.DefaultConcurrency) and is far below the limit. A request
	// finding every connection busy waits for one, within its attempt
	// timeout.
	DefaultMaxConns = 64
)

// ClientOptions are the retry and connection settings that
// WithLambdaDefaults gives a DynamoDB client. A zero field means its
// default.
type ClientOptions struct {
	// MaxAttempts is how many times a call is sent, at most. Default
	// DefaultMaxAttempts.
	MaxAttempts int
	// BaseBackoff and MaxBackoff shape the random wait between attempts.
	// Defaults DefaultBaseBackoff and DefaultMaxBackoff.
	BaseBackoff, MaxBackoff time.Duration
	// AttemptTimeout bounds each phase of an attempt: connecting, the TLS
	// handshake, and waiting for the answer. Default DefaultAttemptTimeout.
	AttemptTimeout time.Duration
	// MaxConns bounds the open connections. Default DefaultMaxConns.
	MaxConns int
}

// WithLambdaDefaults returns an option for dynamodb.NewFromConfig (or
// dynamodb.New) that gives the client the retry and connection settings a
// Store needs in a Lambda function, so that every store call is bounded
// and ends in a clear failure:
//
//	db := dynamodb.NewFromConfig(cfg, dynamostore.WithLambdaDefaults())
//	store, err := dynamostore.New(db, table)
//
// It sets a standard retryer with ClientOptions' bounds. The retryer
// retries what the SDK retries by default (throttling, 5xx answers,
// connection errors and timeouts), and also a transaction that DynamoDB
// cancelled only because it throttled some of its items. It keeps the
// SDK's retry quota: a client whose retries keep failing stops retrying
// for a while, so that a throttled table is not hammered. It overrides the
// retry settings of the aws.Config (AWS_MAX_ATTEMPTS, AWS_RETRY_MODE): the
// bounds are part of the store's behaviour, not a deployment detail.
//
// When the client's HTTP client is the SDK's (an
// *awshttp.BuildableClient, which config.LoadDefaultConfig provides), it
// adds the attempt timeout and the connection bound to it; an HTTP client
// of another type is the caller's choice, and is left as it is.
//
// A context deadline always wins: no call outlives its context.
func WithLambdaDefaults(optFns ...func(*ClientOptions)) func(*dynamodb.Options) {
	c := ClientOptions{
		MaxAttempts:    DefaultMaxAttempts,
		BaseBackoff:    DefaultBaseBackoff,
		MaxBackoff:     DefaultMaxBackoff,
		AttemptTimeout: DefaultAttemptTimeout,
		MaxConns:       DefaultMaxConns,
	}
	for _, fn := range optFns {
		if fn != nil {
			fn(&c)
		}
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.BaseBackoff <= 0 {
		c.BaseBackoff = DefaultBaseBackoff
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.AttemptTimeout <= 0 {
		c.AttemptTimeout = DefaultAttemptTimeout
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	return func(o *dynamodb.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = c.MaxAttempts
			so.MaxBackoff = c.MaxBackoff
			so.Backoff = jitterBackoff{base: c.BaseBackoff, max: c.MaxBackoff}
			// An attempt that ran out of its own time is retried; the SDK
			// would otherwise take it for the call's context ending.
			so.Retryables = append([]retry.IsErrorRetryable{retry.IsErrorRetryableFunc(retryTimedOutAttempt)}, so.Retryables...)
			so.Retryables = append(so.Retryables, retry.IsErrorRetryableFunc(retryThrottledTransaction))
		})
		// A non-zero RetryMaxAttempts (from AWS_MAX_ATTEMPTS, say) would
		// wrap the retryer above with another bound.
		o.RetryMaxAttempts = 0
		o.APIOptions = append(o.APIOptions, attemptDeadline(c.AttemptTimeout))
		if b, ok := o.HTTPClient.(*awshttp.BuildableClient); ok || o.HTTPClient == nil {
			if b == nil {
				b = awshttp.NewBuildableClient()
			}
			// The attempt timeout is a deadline on each attempt's context
			// (attemptDeadline), not the http.Client's Timeout: a Client
			// timeout sends every request down net/http's slow path (a
			// goroutine, a timer and channels per request), the largest
			// CPU cost per record above a bare SDK call.
			o.HTTPClient = b.WithTransportOptions(func(t *http.Transport) {
				t.MaxConnsPerHost = c.MaxConns
				// Idle connections up to the same bound, so that a burst
				// of calls reuses its connections instead of closing all
				// but the SDK's default 10 after each call.
				t.MaxIdleConnsPerHost = c.MaxConns
				t.MaxIdleConns = c.MaxConns
			})
		}
	}
}

// attemptDeadline bounds each attempt, from connecting to reading the
// answer's body, with a deadline on the attempt's context. It runs after the
// retryer, so that a timed-out attempt is retried (context.DeadlineExceeded
// is a timeout error) while the call's own context keeps its deadline.
func attemptDeadline(d time.Duration) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		return stack.Finalize.Insert(middleware.FinalizeMiddlewareFunc("lambdakitAttemptDeadline",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				actx, cancel := context.WithTimeout(ctx, d)
				defer cancel() // after the answer is read: deserialising is further down this call
				out, md, err := next.HandleFinalize(actx, in)
				// Only an attempt the deadline cut short: an answer DynamoDB
				// gave in time (a failed condition, say) keeps its own
				// meaning, even if the deadline passed while it was read.
				var answered smithy.APIError
				if err != nil && ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded) && !errors.As(err, &answered) {
					err = &attemptTimeoutError{after: d, err: err}
				}
				return out, md, err
			}), "Retry", middleware.After)
	}
}

// attemptTimeoutError is an attempt that ran out of its own time while the
// call's context had time left: a timeout (a net.Error), to be retried.
type attemptTimeoutError struct {
	after time.Duration
	err   error
}

func (e *attemptTimeoutError) Error() string {
	return fmt.Sprintf("attempt timed out after %v: %v", e.after, e.err)
}
func (e *attemptTimeoutError) Unwrap() error   { return e.err }
func (e *attemptTimeoutError) Timeout() bool   { return true }
func (e *attemptTimeoutError) Temporary() bool { return true }

func retryTimedOutAttempt(err error) aws.Ternary {
	var te *attemptTimeoutError
	if errors.As(err, &te) {
		return aws.TrueTernary
	}
	return aws.UnknownTernary
}

// jitterBackoff waits a random time up to min(max, base × 2^attempt):
// "full jitter", so that the records of a batch throttled together do not
// retry together.
type jitterBackoff struct {
	base, max time.Duration
}

// BackoffDelay implements retry.BackoffDelayer. The SDK numbers the first
// retry 1 (0 under its AWS_NEW_RETRIES_2026 mode, which halves the waits;
// the bound is the same).
func (j jitterBackoff) BackoffDelay(attempt int, _ error) (time.Duration, error) {
	ceiling := j.max
	if attempt < 30 { // beyond that the shift overflows, and max rules anyway
		if d := j.base << attempt; d > 0 && d < ceiling {
			ceiling = d
		}
	}
	return rand.N(ceiling + 1), nil
}
