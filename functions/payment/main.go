// Command payment is the sample function: it consumes a queue of payments,
// charges each one exactly once at a payment gateway, and records the
// outcome in a DynamoDB ledger whose row is the payment's idempotency
// record: "payment#<payment_id>", locked by a conditional PutItem, then
// completed with the ledger fields by one fenced UpdateItem (two requests,
// two write units per payment). A charged payment is never charged again:
// its record never expires (lambdakit.NeverExpire).
//
// Environment:
//
//	PAYMENTS_TABLE       DynamoDB table (name or ARN) for the payment
//	                     ledger and its idempotency records (required)
//	PAYMENT_GATEWAY_URL  base URL of the gateway; POST {url}/charges, the
//	                     query of url kept; no fragment, no credentials
//	                     (required)
//	DEAD_LETTER_QUEUE_URL  the DLQ's URL: an invalid payment is sent there on
//	                     its first delivery (optional; without it, an invalid
//	                     payment fails until the queue's maxReceiveCount
//	                     moves it there)
//	SOURCE_QUEUE_URL, QUEUE_VISIBILITY_TIMEOUT  the queue the function
//	                     consumes and its visibility timeout in seconds:
//	                     with both set, a payment that failed for a
//	                     transient reason (the gateway down) comes back
//	                     later at each receive (lambdakit.Backoff), so that
//	                     an outage does not drive payments into the DLQ
//	                     (optional; needs sqs:ChangeMessageVisibility)
//	EVENTS_QUEUE_URL     a charged payment publishes "payment.charged" to
//	                     this queue (optional). The message rides on the
//	                     completion's own write, as the attribute "messages"
//	                     of the payment's row (outbox.PublishOnRecord): no
//	                     other item, no transaction; the relay
//	                     (functions/relay) sends it from the payments
//	                     table's stream, which must be of new and old images
//	OUTBOX_TABLE         with EVENTS_QUEUE_URL: publish through this outbox
//	                     table instead (outbox.Publish), an item written in
//	                     a transaction with the completion, for events that
//	                     need one order across payments (optional)
//
//	E2E_CRASH_AFTER_CHARGE  "<function name>:<payment_id>": the end-to-end
//	                     story's fault switch (tools/e2e). The process exits
//	                     right after the gateway charged that payment, on its
//	                     first delivery only, as a crash would. It fires only
//	                     in the function it names (AWS_LAMBDA_FUNCTION_NAME);
//	                     naming another is a configuration error, so a value
//	                     copied to another stack stops that function at start
//	                     rather than crash a payment (optional; unset in
//	                     production)
//
//	IDEMPOTENCY_VALKEY_ADDR  the idempotency records go to Valkey or Redis
//	                     at these host:port addresses, comma-separated (one
//	                     address of a cluster is enough), through
//	                     valkeystore, instead of onto the ledger rows; the
//	                     ledger row is then written by the handler after the
//	                     charge, not with the completion, and no event is
//	                     published: EVENTS_QUEUE_URL and OUTBOX_TABLE are
//	                     refused (docs/valkey.md)
//	IDEMPOTENCY_VALKEY_TLS  "true": connect with TLS
//	IDEMPOTENCY_VALKEY_IAM_CACHE, IDEMPOTENCY_VALKEY_IAM_USER  both set:
//	                     ElastiCache IAM authentication as this user of
//	                     this cache (replication group ID); implies TLS
//
// The AWS SDK's own AWS_ENDPOINT_URL selects a local DynamoDB endpoint.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/dynamostore/outbox"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
	"github.com/lambdakit/lambdakit/valkeystore"
	"github.com/valkey-io/valkey-go"
)

// config is what the function reads from its environment at start.
type config struct {
	PaymentsTable string
	GatewayURL    string
	// DeadLetterQueueURL, if set, is where invalid payments go at once.
	DeadLetterQueueURL string
	// SourceQueueURL and Visibility, both set, turn on the backoff of
	// failed payments; Visibility is the source queue's timeout.
	SourceQueueURL string
	Visibility     time.Duration
	// EventsQueueURL, if set, publishes payment.charged there: on the
	// record, or through OutboxTable when that is set too.
	OutboxTable, EventsQueueURL string
	// ValkeyAddrs, if set, keep the idempotency records in Valkey or
	// Redis instead of on the ledger rows of PaymentsTable.
	ValkeyAddrs []string
	// ValkeyTLS connects with TLS; ValkeyIAMCache and ValkeyIAMUser,
	// both set, authenticate with IAM (and imply TLS).
	ValkeyTLS                     bool
	ValkeyIAMCache, ValkeyIAMUser string
	// CrashAfterCharge, if set, is the payment whose first delivery ends
	// the process right after its charge (E2E_CRASH_AFTER_CHARGE).
	CrashAfterCharge string
	// exit ends the process for CrashAfterCharge: os.Exit when nil.
	exit func(code int)
}

func configFromEnv(getenv func(string) string) (config, error) {
	c := config{
		PaymentsTable:      getenv("PAYMENTS_TABLE"),
		GatewayURL:         getenv("PAYMENT_GATEWAY_URL"),
		DeadLetterQueueURL: getenv("DEAD_LETTER_QUEUE_URL"),
		SourceQueueURL:     getenv("SOURCE_QUEUE_URL"),
		OutboxTable:        getenv("OUTBOX_TABLE"),
		EventsQueueURL:     getenv("EVENTS_QUEUE_URL"),
		ValkeyIAMCache:     getenv("IDEMPOTENCY_VALKEY_IAM_CACHE"),
		ValkeyIAMUser:      getenv("IDEMPOTENCY_VALKEY_IAM_USER"),
	}
	var errs []error
	if v := getenv("IDEMPOTENCY_VALKEY_ADDR"); v != "" {
		for _, a := range strings.Split(v, ",") {
			if _, _, err := net.SplitHostPort(strings.TrimSpace(a)); err != nil {
				errs = append(errs, fmt.Errorf("IDEMPOTENCY_VALKEY_ADDR: %q is not host:port", a))
			}
			c.ValkeyAddrs = append(c.ValkeyAddrs, strings.TrimSpace(a))
		}
	}
	required := map[string]string{"PAYMENTS_TABLE": c.PaymentsTable, "PAYMENT_GATEWAY_URL": c.GatewayURL}
	if c.ValkeyAddrs != nil && (c.OutboxTable != "" || c.EventsQueueURL != "") {
		errs = append(errs, errors.New("EVENTS_QUEUE_URL and OUTBOX_TABLE need the idempotency records on the ledger (no IDEMPOTENCY_VALKEY_ADDR): an event is committed with the completion, on the record or in the outbox table's transaction, which Valkey cannot do"))
	}
	for name, v := range required {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is not set", name))
		}
	}
	switch tls := getenv("IDEMPOTENCY_VALKEY_TLS"); tls {
	case "", "false":
	case "true":
		c.ValkeyTLS = true
	default:
		errs = append(errs, fmt.Errorf("IDEMPOTENCY_VALKEY_TLS %q: want true or false", tls))
	}
	if (c.ValkeyIAMCache == "") != (c.ValkeyIAMUser == "") {
		errs = append(errs, errors.New("IDEMPOTENCY_VALKEY_IAM_CACHE and IDEMPOTENCY_VALKEY_IAM_USER go together"))
	}
	if c.ValkeyIAMCache != "" {
		c.ValkeyTLS = true // ElastiCache takes IAM authentication over TLS only
	}
	for name, v := range map[string]string{"PAYMENTS_TABLE": c.PaymentsTable, "OUTBOX_TABLE": c.OutboxTable} {
		if v != "" && !validTableName(v) {
			errs = append(errs, fmt.Errorf("%s %q: want a DynamoDB table name, 3 to 255 letters, digits and _.-", name, v))
		}
	}
	if c.GatewayURL != "" {
		if _, err := chargesURL(c.GatewayURL); err != nil {
			errs = append(errs, err)
		}
	}
	for name, v := range map[string]string{"DEAD_LETTER_QUEUE_URL": c.DeadLetterQueueURL, "SOURCE_QUEUE_URL": c.SourceQueueURL, "EVENTS_QUEUE_URL": c.EventsQueueURL} {
		if v != "" && !isQueueURL(v) {
			errs = append(errs, fmt.Errorf("%s %q is not a queue URL", name, v))
		}
	}
	if v := getenv("QUEUE_VISIBILITY_TIMEOUT"); v != "" {
		secs, err := strconv.Atoi(v)
		if err != nil || secs < 0 || secs > 43200 {
			errs = append(errs, fmt.Errorf("QUEUE_VISIBILITY_TIMEOUT %q: want whole seconds, 0 to 43200", v))
		}
		c.Visibility = time.Duration(secs) * time.Second
	}
	if (c.SourceQueueURL == "") != (c.Visibility == 0) {
		errs = append(errs, errors.New("SOURCE_QUEUE_URL and QUEUE_VISIBILITY_TIMEOUT go together: set both to delay failed payments, or neither"))
	}
	if v := getenv(crashSwitch); v != "" {
		fn, id, ok := strings.Cut(v, ":")
		switch self := getenv("AWS_LAMBDA_FUNCTION_NAME"); {
		case !ok || !validPaymentID(id):
			errs = append(errs, fmt.Errorf("%s %q: want <function name>:<payment_id>", crashSwitch, v))
		case fn != self:
			errs = append(errs, fmt.Errorf("%s names function %q, not this one (%q): it fires only in the function it names", crashSwitch, fn, self))
		default:
			c.CrashAfterCharge = id
		}
	}
	if c.OutboxTable != "" && c.EventsQueueURL == "" {
		errs = append(errs, errors.New("OUTBOX_TABLE needs EVENTS_QUEUE_URL: the outbox table holds the events sent there"))
	}
	return c, errors.Join(errs...)
}

// chargesURL is the gateway's charge endpoint, POST {base}/charges, with
// base's query kept: "https://gw/v1/?region=eu" posts to
// "https://gw/v1/charges?region=eu". (Appending "/charges" to the text
// would post to "/v1?region=eu/charges", or to "/v1//charges".) A base
// with a fragment or with credentials is refused: the first is no part of
// a request, and credentials belong in no environment variable.
func chargesURL(base string) (string, error) {
	u, err := url.Parse(base)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "":
		return "", fmt.Errorf("PAYMENT_GATEWAY_URL %q is not an http(s) URL", base)
	case u.Fragment != "" || strings.Contains(base, "#"):
		return "", fmt.Errorf("PAYMENT_GATEWAY_URL %q has a fragment (#), which no request carries", base)
	case u.User != nil:
		return "", fmt.Errorf("PAYMENT_GATEWAY_URL %q carries credentials (user@): give the gateway's URL only", u.Redacted())
	}
	return u.JoinPath("charges").String(), nil
}

// isQueueURL reports whether v looks like an SQS queue URL: http(s), a
// host, and a path naming the queue. A value that is not one (a queue's
// name or ARN, a stray space) would be refused by SQS only when the first
// message goes there, after a charge.
func isQueueURL(v string) bool {
	u, err := url.Parse(v)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.User == nil &&
		strings.Trim(u.Path, "/") != "" && u.RawQuery == "" && u.Fragment == "" && strings.TrimSpace(v) == v
}

// validTableName reports whether name is a DynamoDB table name, 3 to 255
// letters, digits, underscores, dots and hyphens, or a table's ARN, which
// DynamoDB takes in its place. A name DynamoDB refuses (" payments", say)
// fails every write; with the records on Valkey the ledger row is written
// after the charge, so each payment would be charged and never recorded.
func validTableName(name string) bool {
	if strings.HasPrefix(name, "arn:") {
		return len(name) <= 1024 && strings.Contains(name, ":table/") && !strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r >= 0x7f })
	}
	if len(name) < 3 || len(name) > 255 {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '.', c == '-':
		default:
			return false
		}
	}
	return true
}

// crashSwitch is the end-to-end story's fault switch: see the package
// comment.
const crashSwitch = "E2E_CRASH_AFTER_CHARGE"

// valkeyTTL is how long the records on Valkey remember a payment: a
// cache's memory is not where a record should stay forever (NeverExpire
// would keep it, at the price of memory that only grows). It outlives the longest way a copy of a completed
// payment can come back (template.yaml): the queue's 4-day retention, the
// DLQ's 14 days, and 4 days again after a redrive, plus a day.
const valkeyTTL = 552 * time.Hour

// idempotencyPrefix names this function's records: with ReadableIDs a
// payment's record, and so its ledger row, is "payment#<payment_id>"
// (ledgerKey). It is fixed rather than the function name, which changes
// when the stack replaces the function: a new name would forget every
// payment.
const idempotencyPrefix = "payment"

// ledgerKey is the key of the ledger row of paymentID, which is its
// idempotency record's ID (lambdakit.Options.ReadableIDs).
func ledgerKey(paymentID string) string { return idempotencyPrefix + "#" + paymentID }

// Attribute names of the record on the ledger row. The partition key is
// the table's payment_id. The record's status gets its own name: the
// ledger's status (CHARGED, DECLINED) is what readers of the ledger know,
// and "record_status" says whose it is. The record's other attributes
// (expiration, in_progress_expiration, validation, data, lease, failure,
// effect) keep dynamostore's names: no ledger field has them, and
// expiration is the table's TTL attribute (template.yaml).
const (
	ledgerKeyAttr    = "payment_id"
	recordStatusAttr = "record_status"
)

// recordOnLedger names the record's attributes on the ledger row, for
// dynamostore.New and dynamostore.NewRecords.
func recordOnLedger(o *dynamostore.Options) {
	o.KeyAttr = ledgerKeyAttr
	o.StatusAttr = recordStatusAttr
}

// newHandler wires the function: validation, then idempotency on
// payment_id, then the charge. The records go to vk when it is set (see
// newValkey), else onto the ledger rows in DynamoDB through db. batchOpts come after the
// function's own batch options (main sets the dead-letter queue there).
func newHandler(c config, db dynamostore.API, vk valkey.Client, client *http.Client, logger *slog.Logger, batchOpts ...func(*lambdakit.BatchOptions)) (lambdakit.BatchFunc, error) {
	charges, err := chargesURL(c.GatewayURL)
	if err != nil {
		return nil, err
	}
	p := &payments{
		gateway: &gatewayClient{url: charges, http: noRedirects(client)},
		table:   c.PaymentsTable,
		now:     time.Now,
	}
	if c.CrashAfterCharge != "" {
		exit := c.exit
		if exit == nil {
			exit = os.Exit
		}
		p.crash = func(ctx context.Context, id string, msg *events.SQSMessage) {
			if id == c.CrashAfterCharge && msg.Attributes["ApproximateReceiveCount"] == "1" {
				logger.ErrorContext(ctx, "payment: crashing on purpose after the charge", "payment_id", id, "switch", crashSwitch)
				exit(crashExitCode)
			}
		}
	}
	var store lambdakit.Store
	// On DynamoDB the record is the ledger row, found by its payment_id,
	// and kept forever: a charged payment is never charged again, however
	// late a copy comes back and whatever the queues' retention, and the
	// ledger row must stay. An in-progress lock still expires.
	idemOpts := func(o *lambdakit.Options) { o.ReadableIDs, o.TTL = true, lambdakit.NeverExpire }
	if vk != nil {
		// Valkey cannot commit the ledger row with the completion: the
		// handler writes it itself.
		p.ledgerDB = db
		store, err = valkeystore.New(vk)
		idemOpts = func(o *lambdakit.Options) { o.TTL = valkeyTTL }
	} else {
		store, err = dynamostore.New(db, c.PaymentsTable, recordOnLedger)
	}
	if err != nil {
		return nil, err
	}
	switch {
	case c.OutboxTable != "":
		ob, err := outbox.New(c.OutboxTable)
		if err != nil {
			return nil, err
		}
		p.publish = func(ctx context.Context, m outbox.Message) error { return ob.Publish(ctx, m) }
	case c.EventsQueueURL != "":
		p.publish = func(ctx context.Context, m outbox.Message) error { return outbox.PublishOnRecord(ctx, m) }
	}
	if p.publish != nil {
		if err := checkEventsQueue(c.EventsQueueURL); err != nil {
			return nil, err
		}
		p.eventsQueue = c.EventsQueueURL
	}
	idem := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"),
		func(o *lambdakit.Options) {
			o.Prefix = idempotencyPrefix
			idemOpts(o)
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

// withBackoff makes a payment that failed for a transient reason come back
// later at each receive: never sooner than the queue's visibility timeout,
// at most an hour (lambdakit.Backoff).
func withBackoff(client producer.VisibilityClient, url string, visibility time.Duration) func(*lambdakit.BatchOptions) {
	return func(o *lambdakit.BatchOptions) {
		o.Backoff = &lambdakit.Backoff{Changer: producer.NewQueueVisibility(client, url), Floor: visibility, Cap: time.Hour,
			FunctionTimeout: time.Minute, MaxReceiveCount: 5, Retention: 4 * 24 * time.Hour}
	}
}

// newValkey connects to the Valkey or Redis of c, once per container, and
// refuses a server that may evict records (valkeystore.Check).
func newValkey(ctx context.Context, c config, awsCfg aws.Config) (valkey.Client, error) {
	o := valkey.ClientOption{InitAddress: c.ValkeyAddrs}
	if c.ValkeyTLS {
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if c.ValkeyIAMCache != "" {
		auth := &valkeystore.IAMAuth{Config: awsCfg, CacheName: c.ValkeyIAMCache, UserID: c.ValkeyIAMUser}
		o.AuthCredentialsFn = auth.Credentials
	}
	vk, err := valkey.NewClient(valkeystore.WithLambdaDefaults(o))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", strings.Join(c.ValkeyAddrs, ","), err)
	}
	store, err := valkeystore.New(vk)
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err = store.Check(ctx)
	}
	if err != nil {
		vk.Close()
		return nil, err
	}
	return vk, nil
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
	if awsCfg.Region == "" {
		// Every DynamoDB call would fail; with the records on Valkey the
		// ledger row is written after the charge, so refuse now.
		logger.Error("payment: AWS configuration", "error", "no AWS region: set AWS_REGION (Lambda sets it)")
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
	queues := sqs.NewFromConfig(awsCfg)
	if c.DeadLetterQueueURL != "" {
		// The SDK's default retries; the batch's deadline guard bounds
		// them, and a send that fails leaves the record to come back.
		batchOpts = append(batchOpts, withDeadLetterQueue(queues, c.DeadLetterQueueURL))
	}
	if c.SourceQueueURL != "" {
		batchOpts = append(batchOpts, withBackoff(queues, c.SourceQueueURL, c.Visibility))
	}
	var vk valkey.Client
	if c.ValkeyAddrs != nil {
		if vk, err = newValkey(context.Background(), c, awsCfg); err != nil {
			logger.Error("payment: idempotency store", "error", err.Error())
			os.Exit(1)
		}
	}
	handler, err := newHandler(c, db, vk, client, logger, batchOpts...)
	if err != nil {
		logger.Error("payment: idempotency store", "error", err.Error())
		os.Exit(1)
	}
	lambda.Start(handler)
}
