// Package outbox publishes messages exactly when a handler's work commits:
// a transactional outbox on DynamoDB, relayed to SQS.
//
// A handler run by lambdakit's idempotency middleware calls Publish; the
// message is written as an item of the outbox table in the same
// TransactWriteItems as the idempotency record's completion and the
// handler's other staged writes (dynamostore.Stage). No commit, no
// message; a commit always leaves the item. The relay (Relay), a Lambda
// function on the outbox table's DynamoDB stream, sends each new item to
// its queue.
//
// An item's ID comes from the idempotency record and the message's name
// (or its place among the writes the handler stages), so a handler run
// again for the same record writes the same item, never a second one. The
// SQS deduplication ID comes from the item's ID, so a relay that sends an
// item twice (it crashed after the send, before it answered) has the copy
// dropped by a FIFO queue within SQS's 5-minute window; the message
// carries the item's ID in the attribute IDAttribute, which a downstream
// consumer takes as its idempotency key to drop copies beyond it
// (lambdakit.KeyFromAttribute(outbox.IDAttribute)).
package outbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
)

// IDAttribute is the message attribute that carries the outbox item's ID
// to the downstream consumer: its idempotency key.
const IDAttribute = "lambdakit-outbox-id"

// DefaultTTL is how long an outbox item stays in the table. The relay reads
// the item from its stream record, which DynamoDB Streams keeps 24 hours
// whatever becomes of the item, so the item itself is only a record of
// what was published: two days outlive the stream's retention, DynamoDB's
// TTL deletion delay (usually within days, not guaranteed) aside.
const DefaultTTL = 48 * time.Hour

// Message is one message a handler publishes.
type Message struct {
	// QueueURL is the queue the relay sends it to.
	QueueURL string
	// Body is the message body.
	Body string
	// GroupID is the message group on a FIFO queue (required there).
	GroupID string
	// Attributes are string message attributes; IDAttribute is added.
	Attributes map[string]string
	// Name tells the message from the handler's others for the same
	// record, such as "payment.charged". Empty, the message is named by
	// its place: how many writes the handler had staged before it.
	Name string
}

// Options configures an Outbox.
type Options struct {
	// TTL is how long an item stays in the table. Default DefaultTTL.
	TTL time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Outbox writes messages to an outbox table.
type Outbox struct {
	table string
	opts  Options
}

// New returns the Outbox of table, which has a string partition key "pk"
// (see PartitionKey), a string sort key "id", and a stream with new images
// (NEW_IMAGE or NEW_AND_OLD_IMAGES).
func New(table string, optFns ...func(*Options)) (*Outbox, error) {
	o := Options{TTL: DefaultTTL, Now: time.Now}
	for _, fn := range optFns {
		fn(&o)
	}
	switch {
	case table == "":
		return nil, errors.New("outbox: no table")
	case o.TTL <= 0:
		return nil, fmt.Errorf("outbox: TTL %v: want a positive duration", o.TTL)
	}
	return &Outbox{table: table, opts: o}, nil
}

// ErrInvalidMessage means a message cannot be published as it is. Publish
// returns it wrapped with lambdakit.Permanent: a handler that returns it
// fails the same way on every run.
var ErrInvalidMessage = errors.New("outbox: invalid message")

// Publish stages msgs, to be written with the completion of the
// idempotency record the handler runs for. It fails with
// lambdakit.ErrNotStaging outside a handler run by lambdakit's idempotency
// middleware (or Once), and with ErrInvalidMessage (marked
// lambdakit.Permanent) for a message SQS would refuse, a message that
// repeats another of this run (the same queue and name), or more writes
// or bytes than one transaction holds (100 writes, 4 MB): found here,
// before any work commits, rather than by a completion DynamoDB refuses
// after it.
func (o *Outbox) Publish(ctx context.Context, msgs ...Message) error {
	recordID, ok := lambdakit.StagingRecord(ctx)
	if !ok {
		return fmt.Errorf("outbox: %w", lambdakit.ErrNotStaging)
	}
	now := o.opts.Now()
	err := lambdakit.StageFunc(ctx, func(staged []any) ([]any, error) {
		// The completion is one more write of the transaction.
		if n := len(staged) + len(msgs) + 1; n > maxTransactItems {
			return nil, fmt.Errorf("%w: %d messages, %d writes staged before and the completion make %d writes; a DynamoDB transaction holds %d",
				ErrInvalidMessage, len(msgs), len(staged), n, maxTransactItems)
		}
		ids := map[string]string{} // item ID → the message's name, for this run
		size := completionBytes    // of the whole transaction
		for _, op := range staged {
			if id, ok := o.itemIDOf(op); ok {
				ids[id] = "an earlier one"
			}
			if w, ok := op.(types.TransactWriteItem); ok {
				size += dynamostore.WriteSize(w)
			}
		}
		items := make([]any, 0, len(msgs))
		for i, m := range msgs {
			name := m.Name
			switch {
			case strings.HasPrefix(name, "#"):
				return nil, fmt.Errorf("%w %q: names starting with # are the outbox's, for messages named by their place", ErrInvalidMessage, name)
			case name == "":
				name = "#" + strconv.Itoa(len(staged)+i)
			}
			item, id, err := o.item(recordID, name, m, now)
			if err != nil {
				return nil, err
			}
			if prev, dup := ids[id]; dup {
				return nil, fmt.Errorf("%w %q to %s: repeats %s of this run (give each message of a queue its own name)", ErrInvalidMessage, name, m.QueueURL, prev)
			}
			ids[id] = fmt.Sprintf("%q", name)
			w := types.TransactWriteItem{Put: &types.Put{
				TableName: aws.String(o.table),
				Item:      item,
				// A retried completion writes the same item, which must
				// not be an item of another record.
				ConditionExpression:       aws.String("attribute_not_exists(id) OR recordId = :rid"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":rid": &types.AttributeValueMemberS{Value: recordID}},
			}}
			if size += dynamostore.WriteSize(w); size > dynamostore.MaxTransactionBytes {
				return nil, fmt.Errorf("%w %q: with the writes staged before it and the completion, the transaction is about %d bytes; DynamoDB takes %d",
					ErrInvalidMessage, name, size, dynamostore.MaxTransactionBytes)
			}
			items = append(items, w)
		}
		return items, nil
	})
	if errors.Is(err, ErrInvalidMessage) {
		return lambdakit.Permanent(err)
	}
	return err
}

// itemIDOf is the ID of the outbox item op writes, if op is a Put of this
// outbox's table.
func (o *Outbox) itemIDOf(op any) (string, bool) {
	w, ok := op.(types.TransactWriteItem)
	if !ok || w.Put == nil || aws.ToString(w.Put.TableName) != o.table {
		return "", false
	}
	id, ok := w.Put.Item["id"].(*types.AttributeValueMemberS)
	if !ok {
		return "", false
	}
	return id.Value, true
}

// maxItemBytes is DynamoDB's item size limit; itemOverhead bounds the
// outbox item's attribute names, numbers, partition key and dedup ID.
const (
	maxItemBytes = 400 * 1024
	itemOverhead = 1024
)

// maxTransactItems is how many writes one TransactWriteItems may hold.
const maxTransactItems = 100

// completionBytes is room for the idempotency record's completion in the
// transaction: its attributes without a result. A result so large that
// the transaction is still too big is refused by the store, which then
// completes the record without the staged writes.
const completionBytes = 2 * 1024

// ItemID is the ID of the outbox item for the message named name, to the
// queue queueURL, of the record recordID: stable across runs, relays and
// retries.
func ItemID(recordID, queueURL, name string) string {
	return "outbox#" + lambdakit.KeyHash(recordID+"\x00"+queueURL+"\x00"+name)
}

// DedupID is the SQS deduplication ID of the item itemID: 64 hex
// characters, within SQS's 128 and EventBridge Pipes' 100. It is what
// lambdakit's producer derives from the key itemID.
func DedupID(itemID string) string { return producer.DedupID(itemID) }

// PartitionKey is the outbox table's partition key for a message of group
// (its FIFO message group, or "" for none) and item itemID: the items of
// one group share it, so that they are in one partition, and their stream
// records in one shard, which the relay reads in order.
func PartitionKey(group, itemID string) string {
	if group == "" {
		return itemID
	}
	return "group#" + group
}

// item is the outbox item of m, and its ID, or ErrInvalidMessage when SQS
// would refuse to send m: the checks of lambdakit's producer.
func (o *Outbox) item(recordID, name string, m Message, now time.Time) (map[string]types.AttributeValue, string, error) {
	if m.QueueURL == "" {
		return nil, "", fmt.Errorf("%w %q: no QueueURL", ErrInvalidMessage, name)
	}
	if _, clash := m.Attributes[IDAttribute]; clash {
		return nil, "", fmt.Errorf("%w %q: attribute %s is the outbox's", ErrInvalidMessage, name, IDAttribute)
	}
	id := ItemID(recordID, m.QueueURL, name)
	attrs := map[string]sqstypes.MessageAttributeValue{IDAttribute: {DataType: aws.String("String"), StringValue: aws.String(id)}}
	for k, v := range m.Attributes {
		attrs[k] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	p, err := producer.New(nil, m.QueueURL, func(po *producer.Options) {
		// The message is an item first: DynamoDB's 400 KB, less the
		// item's other attributes, is its limit (below SQS's 1 MiB).
		po.MaxMessageSize = maxItemBytes - itemOverhead - len(id) - len(recordID) - len(name) - len(m.QueueURL) - len(m.GroupID)
		po.Key = func(*events.SQSMessage) (string, error) { return id, nil }
		if m.GroupID != "" || po.FIFO {
			po.Group = func(*events.SQSMessage) (string, error) { return m.GroupID, nil }
		}
	})
	if err != nil {
		return nil, "", fmt.Errorf("%w %q: %w", ErrInvalidMessage, name, err)
	}
	if r := p.Check(producer.Message{Body: m.Body, Attributes: attrs}); r.Err != nil {
		return nil, "", fmt.Errorf("%w %q to %s: %w", ErrInvalidMessage, name, m.QueueURL, r.Err)
	}
	item := map[string]types.AttributeValue{
		"pk":         &types.AttributeValueMemberS{Value: PartitionKey(m.GroupID, id)},
		"id":         &types.AttributeValueMemberS{Value: id},
		"recordId":   &types.AttributeValueMemberS{Value: recordID},
		"name":       &types.AttributeValueMemberS{Value: name},
		"queueUrl":   &types.AttributeValueMemberS{Value: m.QueueURL},
		"body":       &types.AttributeValueMemberS{Value: m.Body},
		"dedupId":    &types.AttributeValueMemberS{Value: DedupID(id)},
		"createdAt":  &types.AttributeValueMemberN{Value: strconv.FormatInt(now.UnixMilli(), 10)},
		"expiration": &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(o.opts.TTL).Unix(), 10)},
	}
	if m.GroupID != "" {
		item["groupId"] = &types.AttributeValueMemberS{Value: m.GroupID}
	}
	if len(m.Attributes) > 0 {
		am := map[string]types.AttributeValue{}
		for k, v := range m.Attributes {
			am[k] = &types.AttributeValueMemberS{Value: v}
		}
		item["attributes"] = &types.AttributeValueMemberM{Value: am}
	}
	return item, id, nil
}
