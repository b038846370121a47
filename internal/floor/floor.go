// Package floor is the floor the benchmark compares the payment function
// with: the same job done with aws-lambda-go and the AWS SDK alone, no
// lambdakit. It makes exactly the requests the design needs for each
// record of a batch, and no others:
//
//   - new payment: a conditional PutItem takes the lock on the payment's
//     ledger row (returning the old item if the condition fails), POST
//     {gateway}/charges with an Idempotency-Key, then one UpdateItem,
//     conditional on the lease, that completes the record and writes the
//     ledger fields onto the same row;
//   - payment completed elsewhere, in a batch SQS delivers again
//     (ApproximateReceiveCount above 1): one strongly consistent
//     BatchGetItem per 100 of the batch's redelivered records finds it
//     completed;
//   - payment completed elsewhere, delivered for the first time: the
//     conditional PutItem alone, whose failure returns the completed record;
//   - payment completed in this process: nothing, from memory.
//
// Records of a batch run concurrently, at most 64 at a time and with as
// many connections to DynamoDB, as the payment function runs them on a
// standard queue. It logs a JSON line per failed record and nothing per
// record that succeeded, as the sample does at Lambda's default level
// (INFO), and writes no metrics line. Its rows have the attributes of the
// sample's (functions/payment keeps its idempotency record on the ledger
// row: key payment_id = "payment#<payment_id>", record_status, kept
// forever), so that sizes, and so request units, compare. It skips what
// the floor need not do: validation beyond decoding, payload hashing,
// releasing a lock after a failure, FIFO ordering, deadline handling.
//
// With EVENTS_QUEUE_URL set it publishes payment.charged as the sample
// does on its record: the event rides on the completing UpdateItem, as the
// element of the row's "messages" list the sample's relay reads (name,
// queueUrl, body, groupId, attributes), so the same request and the same
// bytes are written. Its checks are those a careful hand-written function
// makes: the queue URL once at start, and a bound on each body's size
// before the charge (a body too large must not follow a charge).
//
// Command bare (tools/bench/bare) runs it as a Lambda function; the
// payment sample's in-process benchmark runs it beside the sample.
package floor

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

type payment struct {
	PaymentID  string `json:"payment_id"`
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
}

// chargedEvent is the body of a payment.charged message, as the sample
// writes it.
type chargedEvent struct {
	Type       string `json:"type"`
	PaymentID  string `json:"payment_id"`
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
	ChargeID   string `json:"charge_id"`
}

// DB is the part of the DynamoDB client the floor calls.
type DB interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
}

type fn struct {
	db      DB
	http    *http.Client
	ledger  string
	gateway string
	events  string // the payment.charged queue's URL; "" publishes nothing
	logger  *slog.Logger
	done    sync.Map // record id -> result, for payments completed in this process
}

// lockTTL is how long a lock of a dead owner stays: lambdakit's default
// TTL, which it gives in-progress records kept forever once completed.
const lockTTL = 7 * 24 * time.Hour

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func (f *fn) handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	f.readAhead(ctx, ev.Records)
	var resp events.SQSEventResponse
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxInFlight)
	for i := range ev.Records {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f.record(ctx, &ev.Records[i]); err != nil {
				f.logger.Error("message failed", "messageId", ev.Records[i].MessageId, "reason", err.Error())
				mu.Lock()
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: ev.Records[i].MessageId})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return resp, nil
}

// maxInFlight bounds the records running at once, and the connections to
// DynamoDB, as lambdakit bounds them (its DefaultConcurrency,
// dynamostore's DefaultMaxConns): a batch of 10 runs whole, one of 10,000
// does not open 10,000 connections.
const maxInFlight = MaxInFlight

// MaxInFlight bounds the records the floor runs at once, and so the
// connections it keeps to DynamoDB and the gateway.
const MaxInFlight = 64

// maxEventBody bounds a payment.charged body: what SQS takes (1 MiB) is
// more than the row holds, so the row's 400 KB less room for its other
// attributes. maxChargeID bounds the gateway's charge ID, which the body
// and the row carry.
const (
	maxEventBody = 300 << 10
	maxChargeID  = 1 << 10
	// eventOverhead bounds the body's field names, punctuation and amount.
	eventOverhead = 256
)

// maxBatchGet is how many keys one BatchGetItem may ask for.
const maxBatchGet = 100

// readAhead finds the batch's redelivered payments that are completed, in
// one BatchGetItem per 100 of them, one after the other.
func (f *fn) readAhead(ctx context.Context, recs []events.SQSMessage) {
	var keys []map[string]types.AttributeValue
	for i := range recs {
		if c := recs[i].Attributes["ApproximateReceiveCount"]; c == "" || c == "1" {
			continue
		}
		var p payment
		if json.Unmarshal([]byte(recs[i].Body), &p) != nil || p.PaymentID == "" {
			continue
		}
		id := recordID(p.PaymentID)
		if _, ok := f.done.Load(id); ok {
			continue // known here already
		}
		keys = append(keys, map[string]types.AttributeValue{"payment_id": s(id)})
	}
	for start := 0; start < len(keys); start += maxBatchGet {
		out, err := f.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{
			RequestItems: map[string]types.KeysAndAttributes{f.ledger: {Keys: keys[start:min(start+maxBatchGet, len(keys))], ConsistentRead: aws.Bool(true)}},
		})
		if err != nil {
			return // every record left takes the lock
		}
		for _, item := range out.Responses[f.ledger] {
			id, _ := item["payment_id"].(*types.AttributeValueMemberS)
			if st, ok := item["record_status"].(*types.AttributeValueMemberS); ok && st.Value == "COMPLETED" && id != nil {
				f.done.Store(id.Value, item["data"])
			}
		}
	}
}

// recordID is the ledger row's key, as the sample's: readable.
func recordID(paymentID string) string { return "payment#" + paymentID }

func (f *fn) record(ctx context.Context, msg *events.SQSMessage) error {
	var p payment
	if err := json.Unmarshal([]byte(msg.Body), &p); err != nil || p.PaymentID == "" {
		return fmt.Errorf("bad payment: %v", err)
	}
	// An event too large to publish fails before the charge, not after
	// it: its body is at most its strings escaped (6 bytes a byte at
	// worst, as \u00XX), the charge ID's included, and the rest.
	if f.events != "" && 6*(len(p.PaymentID)+len(p.OrderID)+len(p.CustomerID)+len(p.Currency)+maxChargeID)+eventOverhead > maxEventBody {
		return errors.New("payment.charged would be too large")
	}
	sum := sha256.Sum256([]byte(p.PaymentID))
	id := recordID(p.PaymentID)
	if _, ok := f.done.Load(id); ok {
		return nil
	}
	now := time.Now()
	lease := rand.Text()
	exp := now.Add(lockTTL).Unix()
	deadline, _ := ctx.Deadline()
	_, err := f.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(f.ledger),
		Item: map[string]types.AttributeValue{
			"payment_id": s(id), "record_status": s("INPROGRESS"), "expiration": n(exp),
			"in_progress_expiration": n(deadline.UnixMilli()), "lease": s(lease),
			"validation": s(hex.EncodeToString(sum[:])),
		},
		ConditionExpression:      aws.String("attribute_not_exists(#id) OR (#exp <= :now AND attribute_exists(#st)) OR (#st = :inprogress AND #ipe <= :now_ms)"),
		ExpressionAttributeNames: map[string]string{"#id": "payment_id", "#exp": "expiration", "#st": "record_status", "#ipe": "in_progress_expiration"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now": n(now.Unix()), ":now_ms": n(now.UnixMilli()), ":inprogress": s("INPROGRESS"),
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		if st, ok := failed.Item["record_status"].(*types.AttributeValueMemberS); ok && st.Value == "COMPLETED" {
			f.done.Store(id, failed.Item["data"])
			return nil
		}
		return errors.New("in progress elsewhere")
	}
	if err != nil {
		return err
	}
	chargeID, err := f.charge(ctx, p)
	if err != nil {
		return err
	}
	if len(chargeID) > maxChargeID {
		return errors.New("gateway: charge ID too long")
	}
	data := `{"status":"CHARGED","charge_id":"` + chargeID + `"}`
	// Completed and kept forever (no expiration), the ledger fields on
	// the same row.
	set := "SET #st = :completed, #data = :data, #status = :charged, #amount = :amount, #currency = :currency, " +
		"#order = :order, #customer = :customer, #recorded = :recorded, #charge = :charge"
	names := map[string]string{"#st": "record_status", "#exp": "expiration", "#data": "data", "#lease": "lease",
		"#status": "status", "#amount": "amount", "#currency": "currency", "#order": "order_id", "#customer": "customer_id",
		"#recorded": "recorded_at", "#charge": "charge_id"}
	values := map[string]types.AttributeValue{":completed": s("COMPLETED"), ":data": s(data), ":lease": s(lease),
		":charged": s("CHARGED"), ":amount": n(p.Amount), ":currency": s(p.Currency), ":order": s(p.OrderID),
		":customer": s(p.CustomerID), ":recorded": s(now.UTC().Format(time.RFC3339Nano)), ":charge": s(chargeID)}
	if f.events != "" {
		body, err := json.Marshal(chargedEvent{Type: "payment.charged", PaymentID: p.PaymentID, OrderID: p.OrderID,
			CustomerID: p.CustomerID, Amount: p.Amount, Currency: p.Currency, ChargeID: chargeID})
		if err != nil {
			return err
		}
		set += ", #msgs = :msgs"
		names["#msgs"] = "messages"
		values[":msgs"] = &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"name": s("payment.charged"), "queueUrl": s(f.events), "body": s(string(body)), "groupId": s(p.CustomerID),
			"attributes": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"type": s("payment.charged")}},
		}}}}
	}
	_, err = f.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(f.ledger),
		Key:                       map[string]types.AttributeValue{"payment_id": s(id)},
		UpdateExpression:          aws.String(set + " REMOVE #exp"),
		ConditionExpression:       aws.String("#lease = :lease"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	if err != nil {
		return err
	}
	f.done.Store(id, data)
	return nil
}

func (f *fn) charge(ctx context.Context, p payment) (string, error) {
	body, _ := json.Marshal(p)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.gateway+"/charges", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "payment-"+p.PaymentID)
	resp, err := f.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct {
		ChargeID string `json:"charge_id"`
	}
	if resp.StatusCode/100 != 2 || json.NewDecoder(resp.Body).Decode(&out) != nil {
		return "", fmt.Errorf("gateway: HTTP %d", resp.StatusCode)
	}
	return out.ChargeID, nil
}

// GatewayTransport keeps a connection to the gateway open for each record
// that runs at once, as the sample's does: with http.DefaultTransport's 2
// per host, every batch of 10 would open 8 new ones.
func GatewayTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = maxInFlight
	return t
}

// Config is what the floor works with: the DynamoDB client, the HTTP
// client for the gateway, the payments table, the gateway's base URL, and
// the payment.charged queue's URL ("" publishes nothing).
type Config struct {
	DB                           DB
	HTTP                         *http.Client
	Table, GatewayURL, EventsURL string
	Logger                       *slog.Logger
}

// New returns the floor's batch handler.
func New(c Config) func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	f := &fn{db: c.DB, http: c.HTTP, ledger: c.Table, gateway: c.GatewayURL, events: c.EventsURL, logger: c.Logger}
	return f.handle
}
