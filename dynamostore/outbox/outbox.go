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
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/lambdakit"
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

// New returns the Outbox of table, which has a string partition key "id"
// and a stream with new images (NEW_IMAGE or NEW_AND_OLD_IMAGES).
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

// maxItemBytes is DynamoDB's item size limit.
const maxItemBytes = 400 * 1024

// Publish stages msgs, to be written with the completion of the
// idempotency record the handler runs for. It fails with
// lambdakit.ErrNotStaging outside a handler run by lambdakit's idempotency
// middleware (or Once), and with ErrInvalidMessage for a message that
// cannot be sent.
func (o *Outbox) Publish(ctx context.Context, msgs ...Message) error {
	recordID, ok := lambdakit.StagingRecord(ctx)
	if !ok {
		return fmt.Errorf("outbox: %w", lambdakit.ErrNotStaging)
	}
	place := lambdakit.Staged(ctx)
	now := o.opts.Now()
	items := make([]types.TransactWriteItem, 0, len(msgs))
	for i, m := range msgs {
		name := m.Name
		if name == "" {
			name = "#" + strconv.Itoa(place+i)
		}
		item, err := o.item(recordID, name, m, now)
		if err != nil {
			return lambdakit.Permanent(err)
		}
		items = append(items, types.TransactWriteItem{Put: &types.Put{
			TableName: aws.String(o.table),
			Item:      item,
			// A retried completion writes the same item, which must
			// not be an item of another record.
			ConditionExpression:       aws.String("attribute_not_exists(id) OR recordId = :rid"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":rid": &types.AttributeValueMemberS{Value: recordID}},
		}})
	}
	return dynamostore.Stage(ctx, items...)
}

// ItemID is the outbox item's ID for the message named name of the record
// recordID: stable across runs, relays and retries.
func ItemID(recordID, name string) string {
	return "outbox#" + lambdakit.KeyHash(recordID+"\x00"+name)
}

// DedupID is the SQS deduplication ID of the item itemID: 64 hex
// characters, within SQS's 128 and EventBridge Pipes' 100.
func DedupID(itemID string) string { return lambdakit.KeyHash(itemID) }

func (o *Outbox) item(recordID, name string, m Message, now time.Time) (map[string]types.AttributeValue, error) {
	switch {
	case m.QueueURL == "":
		return nil, fmt.Errorf("%w %q: no QueueURL", ErrInvalidMessage, name)
	case m.Body == "":
		return nil, fmt.Errorf("%w %q: empty body (SQS takes 1 character or more)", ErrInvalidMessage, name)
	case len(m.Attributes) > 9:
		return nil, fmt.Errorf("%w %q: %d attributes; SQS takes 10, and the outbox adds %s", ErrInvalidMessage, name, len(m.Attributes), IDAttribute)
	}
	if _, clash := m.Attributes[IDAttribute]; clash {
		return nil, fmt.Errorf("%w %q: attribute %s is the outbox's", ErrInvalidMessage, name, IDAttribute)
	}
	id := ItemID(recordID, name)
	item := map[string]types.AttributeValue{
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
	size := len(id) + len(recordID) + len(name) + len(m.QueueURL) + len(m.Body) + len(m.GroupID) + 256
	if len(m.Attributes) > 0 {
		attrs := map[string]types.AttributeValue{}
		for k, v := range m.Attributes {
			attrs[k] = &types.AttributeValueMemberS{Value: v}
			size += len(k) + len(v)
		}
		item["attributes"] = &types.AttributeValueMemberM{Value: attrs}
	}
	if size > maxItemBytes {
		return nil, fmt.Errorf("%w %q: about %d bytes, over DynamoDB's 400 KB item", ErrInvalidMessage, name, size)
	}
	return item, nil
}
