// Command payment is the sample function: it consumes a queue of payments,
// charges each one exactly once at a payment gateway, and records the
// outcome in a DynamoDB ledger together with its idempotency record.
//
// Environment:
//
//	IDEMPOTENCY_TABLE    DynamoDB table for idempotency records (required)
//	PAYMENTS_TABLE       DynamoDB table for the payment ledger (required)
//	PAYMENT_GATEWAY_URL  base URL of the gateway; POST {url}/charges (required)
//	IDEMPOTENCY_TTL      how long a payment is remembered, as a Go duration
//	                     (default 552h: longer than a copy can come back:
//	                     2 x the queue's 4 days + the DLQ's 14 days + 1 day)
//	DEAD_LETTER_QUEUE_URL  the DLQ's URL: an invalid payment is sent there on
//	                     its first delivery (optional; without it, an invalid
//	                     payment fails until the queue's maxReceiveCount
//	                     moves it there)
//	OUTBOX_TABLE, EVENTS_QUEUE_URL  with both set, a charged payment
//	                     publishes "payment.charged" to the events queue
//	                     through the outbox table (dynamostore/outbox), in
//	                     the transaction that records the charge; the relay
//	                     (functions/relay) sends it (optional)
//
// The AWS SDK's own AWS_ENDPOINT_URL selects a local DynamoDB endpoint.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/dynamostore/outbox"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
)

// config is what the function reads from its environment at start.
type config struct {
	IdempotencyTable string
	PaymentsTable    string
	GatewayURL       string
	TTL              time.Duration
	// DeadLetterQueueURL, if set, is where invalid payments go at once.
	DeadLetterQueueURL string
	// OutboxTable and EventsQueueURL, both set, publish payment.charged.
	OutboxTable, EventsQueueURL string
}

// defaultTTL outlives the longest way a copy of a completed payment can come
// back (template.yaml): the queue's 4-day retention, the DLQ's 14 days, and
// 4 days again after a redrive, plus a day; so a payment replayed from the
// DLQ is still recognised.
const defaultTTL = 552 * time.Hour

func configFromEnv(getenv func(string) string) (config, error) {
	c := config{
		IdempotencyTable:   getenv("IDEMPOTENCY_TABLE"),
		PaymentsTable:      getenv("PAYMENTS_TABLE"),
		GatewayURL:         getenv("PAYMENT_GATEWAY_URL"),
		TTL:                defaultTTL,
		DeadLetterQueueURL: getenv("DEAD_LETTER_QUEUE_URL"),
		OutboxTable:        getenv("OUTBOX_TABLE"),
		EventsQueueURL:     getenv("EVENTS_QUEUE_URL"),
	}
	var errs []error
	for name, v := range map[string]string{"IDEMPOTENCY_TABLE": c.IdempotencyTable, "PAYMENTS_TABLE": c.PaymentsTable, "PAYMENT_GATEWAY_URL": c.GatewayURL} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is not set", name))
		}
	}
	if c.GatewayURL != "" {
		if u, err := url.Parse(c.GatewayURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("PAYMENT_GATEWAY_URL %q is not an http(s) URL", c.GatewayURL))
		}
	}
	if c.DeadLetterQueueURL != "" {
		if u, err := url.Parse(c.DeadLetterQueueURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") == "" {
			errs = append(errs, fmt.Errorf("DEAD_LETTER_QUEUE_URL %q is not a queue URL", c.DeadLetterQueueURL))
		}
	}
	if (c.OutboxTable == "") != (c.EventsQueueURL == "") {
		errs = append(errs, errors.New("OUTBOX_TABLE and EVENTS_QUEUE_URL go together: set both to publish payment.charged, or neither"))
	}
	if v := getenv("IDEMPOTENCY_TTL"); v != "" {
		ttl, err := time.ParseDuration(v)
		if err != nil || ttl <= 0 {
			errs = append(errs, fmt.Errorf("IDEMPOTENCY_TTL %q is not a positive Go duration such as 360h", v))
		}
		c.TTL = ttl
	}
	return c, errors.Join(errs...)
}

// idempotencyPrefix names this function's records in the table. It is fixed
// rather than the function name, which changes when the stack replaces the
// function: a new name would forget every payment.
const idempotencyPrefix = "payment"

// newHandler wires the function: validation, then idempotency on
// payment_id, then the charge. batchOpts come after the function's own
// batch options (main sets the dead-letter queue there).
func newHandler(c config, db dynamostore.API, client *http.Client, logger *slog.Logger, batchOpts ...func(*lambdakit.BatchOptions)) (lambdakit.BatchFunc, error) {
	p := &payments{
		gateway: &gatewayClient{base: c.GatewayURL, http: client},
		table:   c.PaymentsTable,
		now:     time.Now,
	}
	store, err := dynamostore.New(db, c.IdempotencyTable)
	if err != nil {
		return nil, err
	}
	if c.OutboxTable != "" {
		if p.events, err = outbox.New(c.OutboxTable); err != nil {
			return nil, err
		}
		p.eventsQueue = c.EventsQueueURL
	}
	idem := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"),
		func(o *lambdakit.Options) {
			o.Prefix = idempotencyPrefix
			o.TTL = c.TTL
			// Only what defines the payment; other fields may differ.
			o.Payload = lambdakit.PayloadFields("payment_id", "order_id", "customer_id", "amount", "currency")
			o.CacheSize = 1000
			o.Logger = logger
		})
	// The batch's default IsPermanent tells the failures no redelivery can
	// mend: an invalid payment (marked Permanent by validate), and the
	// poison lambdakit finds itself (lambdakit.IsPoison), such as a
	// payment_id that cannot be read safely (named twice, or in other
	// case) or one reused for another payment. With a dead-letter queue
	// they go there at once, instead of holding their customer's FIFO
	// group back until maxReceiveCount.
	opts := append([]func(*lambdakit.BatchOptions){func(o *lambdakit.BatchOptions) {
		o.Logger = logger
	}}, batchOpts...)
	return lambdakit.Batch(lambdakit.Chain(p, validate, idem), opts...), nil
}

// withDeadLetterQueue sends the messages of invalid payments (permanent
// failures) to the queue at url through client, on their first delivery.
func withDeadLetterQueue(client producer.MessageSender, url string) func(*lambdakit.BatchOptions) {
	return func(o *lambdakit.BatchOptions) {
		o.DeadLetters = producer.NewDeadLetterQueue(client, url)
	}
}

func main() {
	// lambdakit's own lines and the function's alike: JSON, the request
	// ID on each, the level from AWS_LAMBDA_LOG_LEVEL.
	logger := lambdakit.NewLogger(os.Stdout)
	c, err := configFromEnv(os.Getenv)
	if err != nil {
		logger.Error("payment: configuration", "error", err.Error())
		os.Exit(1)
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		logger.Error("payment: AWS configuration", "error", err.Error())
		os.Exit(1)
	}
	// 5 s per gateway call: a FIFO batch of 10 runs them one after another
	// within the function's 60 s timeout.
	// Idle connections kept for as many charges as a batch runs at once
	// (lambdakit.DefaultConcurrency): net/http keeps 2 per host by
	// default, and a batch would reconnect for nearly every charge.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = lambdakit.DefaultConcurrency
	client := &http.Client{Timeout: 5 * time.Second, Transport: transport}
	// Bounded retries with short backoff, a timeout per attempt and a
	// bounded connection pool (see dynamostore.WithLambdaDefaults): a
	// throttled or stuck DynamoDB fails its record with a clear reason
	// instead of eating the invocation.
	db := dynamodb.NewFromConfig(awsCfg, dynamostore.WithLambdaDefaults())
	var batchOpts []func(*lambdakit.BatchOptions)
	if c.DeadLetterQueueURL != "" {
		// The SDK's default retries; the batch's deadline guard bounds
		// them, and a send that fails leaves the record to come back.
		batchOpts = append(batchOpts, withDeadLetterQueue(sqs.NewFromConfig(awsCfg), c.DeadLetterQueueURL))
	}
	handler, err := newHandler(c, db, client, logger, batchOpts...)
	if err != nil {
		logger.Error("payment: idempotency store", "error", err.Error())
		os.Exit(1)
	}
	lambda.Start(handler)
}
