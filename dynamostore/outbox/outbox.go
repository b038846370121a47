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
// An item's ID comes from the idempotency record's completion (its ID and
// lease) and the message's queue and name (or its place among the writes
// the handler stages), so a completion retried writes the same item, never
// a second one, and a new completion of the record (once it expired) a
// new item, with a message of its own. The
// SQS deduplication ID comes from the item's ID, so a relay that sends an
// item twice (it crashed after the send, before it answered) has the copy
// dropped by a FIFO queue within SQS's 5-minute window; the message
// carries the item's ID in the attribute IDAttribute, which a downstream
// consumer takes as its idempotency key to drop copies beyond it
// (lambdakit.KeyFromAttribute(outbox.IDAttribute)).
package outbox

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/awsrules"
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
	// MaxMessageSize is the largest message QueueURL's queue takes: its
	// MaximumMessageSize attribute, 1,024 to 1,048,576 bytes. 0 means
	// 1 MiB, SQS's most and the default of queues made since SQS raised
	// it in 2025. A queue set lower (one made before then has 256 KiB
	// unless changed) needs it: a message over the queue's limit would be
	// committed with the work and refused by SQS when the relay sends it
	// (the relay then dead-letters it), where with it the message is
	// refused before the work. The size is SQS's: the body, and each
	// attribute's name, type and value, IDAttribute's included.
	MaxMessageSize int
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
// lambdakit.Permanent) for a message Check refuses, a message that
// repeats another of this run (the same queue and name, published through
// this Outbox or one of another table: one item ID), or messages
// that, with the writes and item the handler staged before or stages
// after (in any order), would make a completion DynamoDB refuses (100
// writes, 4 MB; see dynamostore.Store.CheckStaging): found here, before
// any work commits, rather than by a completion DynamoDB refuses after it.
func (o *Outbox) Publish(ctx context.Context, msgs ...Message) error {
	recordID, ok := lambdakit.StagingRecord(ctx)
	if !ok {
		return fmt.Errorf("outbox: %w", lambdakit.ErrNotStaging)
	}
	lease, _ := lambdakit.StagingLease(ctx)
	now := o.opts.Now()
	err := lambdakit.StageFunc(ctx, func(staged []any) ([]any, error) {
		var seenBuf [4]sent
		seen := seenBuf[:0] // the messages an earlier call staged
		for _, op := range staged {
			if queueURL, name, ok := outboxMessage(recordID, lease, op); ok {
				seen = append(seen, sent{queueURL: queueURL, name: name})
			}
		}
		var one [1]string
		names := namesFor(msgs, one[:])
		if err := checkAll(len(staged), seen, msgs, names); err != nil {
			return nil, err
		}
		items := make([]any, 0, len(msgs))
		for i, m := range msgs {
			items = append(items, types.TransactWriteItem{Put: &types.Put{
				TableName: aws.String(o.table),
				Item:      o.item(recordID, ItemID(recordID, lease, m.QueueURL, names[i]), names[i], m, now),
				// A retried completion writes the same item, which must
				// not be an item of another record.
				ConditionExpression:       aws.String("attribute_not_exists(id) OR recordId = :rid"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":rid": &types.AttributeValueMemberS{Value: recordID}},
			}})
		}
		return items, nil
	})
	return refused(err, len(msgs))
}

// refused is the error of a Publish of n messages that staging them
// returned: a completion too large for them refuses them, and a refused
// message fails on every run (lambdakit.Permanent).
func refused(err error, n int) error {
	if errors.Is(err, lambdakit.ErrStagedTooLarge) {
		err = fmt.Errorf("%w: %d messages: %w", ErrInvalidMessage, n, err)
	}
	if errors.Is(err, ErrInvalidMessage) {
		return lambdakit.Permanent(err)
	}
	return err
}

// Check returns an error wrapping ErrInvalidMessage for the first of msgs
// that Publish would refuse on its own, as SQS would refuse to send it or
// DynamoDB to write its item: no QueueURL; a Name starting with #; a Name
// or QueueURL that is not UTF-8; on a FIFO queue (a URL ending .fifo) no
// GroupID; a GroupID, an attribute name, a body or an attribute value that
// breaks SQS's rules (see package awsrules); more than 9 attributes
// (IDAttribute is the tenth), or one named IDAttribute; a message larger
// than an outbox item holds. It needs no handler and sends nothing: call
// it before an external effect (a card charged), with the messages the
// handler will publish after it, so that a message that can never be
// published fails the work before the effect rather than after it. Two of
// msgs to one queue with one name are refused, as Publish refuses them. A
// message Name may be left empty, as Publish allows: Check then allows for
// the longest name its place among the run's writes can give it. What
// Check cannot see is the run's other writes (see Publish).
func Check(msgs ...Message) error {
	return checkAll(0, nil, msgs, nil)
}

// sent is a message an earlier call of one record's run staged, by what
// two of them must not share: a queue and a name, which make the ID of
// their item (ItemID) or of their message on the record
// (RecordMessageID). A run has a few messages: they are compared one by
// one, without building a key or a map for each call.
type sent struct{ queueURL, name string }

// namesFor is the slice checkAll fills with the names of msgs: one, the
// caller's array of one for the usual single message, so that publishing
// it allocates no slice.
func namesFor(msgs []Message, one []string) []string {
	if len(msgs) <= len(one) {
		return one[:len(msgs)]
	}
	return make([]string, len(msgs))
}

// checkAll checks msgs, the run's writes from place on, against each
// other and seen (the messages earlier calls staged), and puts their
// names in names, unless it is nil.
func checkAll(place int, seen []sent, msgs []Message, names []string) error {
	for i, m := range msgs {
		name := placeName(m.Name, place+i)
		if err := check(name, m); err != nil {
			return err
		}
		for _, prev := range seen {
			if prev.queueURL == m.QueueURL && prev.name == name {
				return repeats(name, m.QueueURL, "an earlier one")
			}
		}
		// Two messages of this call share a name only if both have it
		// as their own: a place name is the place's alone, and a Name
		// cannot start with # (check refuses it).
		for _, prev := range msgs[:i] {
			if m.Name != "" && prev.Name == m.Name && prev.QueueURL == m.QueueURL {
				return repeats(name, m.QueueURL, strconv.Quote(name))
			}
		}
		if names != nil {
			names[i] = name
		}
	}
	return nil
}

// repeats is the error of a message named name to queueURL that repeats
// which, another of the run.
func repeats(name, queueURL, which string) error {
	return fmt.Errorf("%w %q to %s: repeats %s of this run (give each message of a queue its own name)", ErrInvalidMessage, name, queueURL, which)
}

// placeName is the name of a message named name, at place in the run's
// writes: its own, or "#<place>" when it has none.
func placeName(name string, place int) string {
	if name == "" {
		return "#" + strconv.Itoa(place)
	}
	return name
}

// outboxMessage is the queue and name of the message op writes, if op is
// the Put of an outbox item of the record recordID's completion under
// lease: of this outbox's table
// or another's, since an item's ID (ItemID), which the relay sends, is the
// same in every table; and not a Put of another item, whatever its
// attributes.
func outboxMessage(recordID, lease string, op any) (queueURL, name string, ok bool) {
	w, ok := op.(types.TransactWriteItem)
	if !ok || w.Put == nil {
		return "", "", false
	}
	id := stringOf(w.Put.Item["id"])
	queueURL, name = stringOf(w.Put.Item["queueUrl"]), stringOf(w.Put.Item["name"])
	if !strings.HasPrefix(id, "outbox#") || id != ItemID(recordID, lease, queueURL, name) {
		return "", "", false
	}
	return queueURL, name, true
}

// itemOverhead bounds the outbox item's attribute names, numbers,
// partition key prefix and dedup ID; the record's ID, which the item
// holds, is bounded by DynamoDB's partition key limit, so that Check,
// which does not know it, refuses what Publish refuses.
const itemOverhead = 1024 + awsrules.MaxPartitionKeyBytes

// maxPlaceNameLen is the length of the longest name a message without one
// gets: "#" and its place among the run's writes, which is below the 100
// writes of a transaction (awsrules.MaxTransactionItems).
const maxPlaceNameLen = len("#") + 2

// ItemID is the ID of the outbox item for the message named name, to the
// queue queueURL, of the completion of the record recordID under the
// lease lease (lambdakit.StagingLease): the same for every retry of that
// completion and every relay of its item, and another for a new
// completion of the record once it expired, whose message is new work's.
// (Its fields are hashed in another order than RecordMessageID's, so
// that a message on the record and an outbox item never share an ID.)
func ItemID(recordID, lease, queueURL, name string) string {
	return "outbox#" + lambdakit.KeyHash(recordID+"\x00"+queueURL+"\x00"+name+"\x00"+lease)
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

// itemIDLen is the length of every ItemID and RecordMessageID.
const itemIDLen = len("outbox#") + 2*sha256.Size

// check returns ErrInvalidMessage when SQS would refuse to send m, named
// name, or DynamoDB to write its outbox item: the checks of lambdakit's
// producer, with the item's room as the largest message.
func check(name string, m Message) error {
	// An unnamed message's name depends on what the run staged before
	// it, which Check cannot see: its room is the longest name's.
	nameLen := len(name)
	if m.Name == "" {
		nameLen = maxPlaceNameLen
	}
	switch {
	case m.QueueURL == "":
		return fmt.Errorf("%w %q: no QueueURL", ErrInvalidMessage, name)
	case strings.HasPrefix(m.Name, "#"):
		return fmt.Errorf("%w %q: names starting with # are the outbox's, for messages named by their place", ErrInvalidMessage, name)
	case !utf8.ValidString(m.Name) || !utf8.ValidString(m.QueueURL):
		// The SDK sends each invalid byte as U+FFFD (three bytes): the
		// item grows past what is counted here, and two such names
		// become one, one message ID on the record.
		return fmt.Errorf("%w %q to %q: the name and the queue URL must be UTF-8", ErrInvalidMessage, name, m.QueueURL)
	}
	if _, clash := m.Attributes[IDAttribute]; clash {
		return fmt.Errorf("%w %q: attribute %s is the outbox's", ErrInvalidMessage, name, IDAttribute)
	}
	// The ID attribute the relay adds is the outbox's own (a name and a
	// hex value SQS takes): it is not built here, only counted, in the
	// attributes SQS allows and in the message's size.
	if len(m.Attributes)+1 > awsrules.MaxMessageAttributes {
		return fmt.Errorf("%w %q: %w: %d attributes; at most %d beside the outbox's %s", ErrInvalidMessage, name, producer.ErrInvalidAttribute, len(m.Attributes), awsrules.MaxMessageAttributes-1, IDAttribute)
	}
	if m.MaxMessageSize != 0 && (m.MaxMessageSize < awsrules.MinMaxMessageBytes || m.MaxMessageSize > awsrules.MaxMessageBytes) {
		return fmt.Errorf("%w %q: MaxMessageSize %d is no queue's: SQS's MaximumMessageSize is %d to %d bytes", ErrInvalidMessage, name, m.MaxMessageSize, awsrules.MinMaxMessageBytes, awsrules.MaxMessageBytes)
	}
	idSize := len(IDAttribute) + len("String") + itemIDLen
	// The message is an item first: DynamoDB's 400 KB, less the item's
	// other attributes, is its limit (below SQS's 1 MiB)...
	maxSize := awsrules.MaxItemBytes - itemOverhead - itemIDLen - nameLen - len(m.QueueURL) - len(m.GroupID) - idSize
	// ... or what its queue takes, with the relay's ID attribute.
	queueBound := m.MaxMessageSize != 0 && m.MaxMessageSize-idSize < maxSize
	if queueBound {
		maxSize = m.MaxMessageSize - idSize
	}
	r := producer.CheckStrings(m.Body, m.Attributes, strings.HasSuffix(m.QueueURL, ".fifo"), m.GroupID, maxSize)
	switch {
	case r.Err == nil:
		return nil
	case queueBound:
		return fmt.Errorf("%w %q to %s (MaxMessageSize %d, less %d bytes of the relay's %s attribute): %w",
			ErrInvalidMessage, name, m.QueueURL, m.MaxMessageSize, idSize, IDAttribute, r.Err)
	default:
		return fmt.Errorf("%w %q to %s: %w", ErrInvalidMessage, name, m.QueueURL, r.Err)
	}
}

// item is the outbox item of m, checked, whose ID is id.
func (o *Outbox) item(recordID, id, name string, m Message, now time.Time) map[string]types.AttributeValue {
	item := message(name, m, 6)
	item["pk"] = &types.AttributeValueMemberS{Value: PartitionKey(m.GroupID, id)}
	item["id"] = &types.AttributeValueMemberS{Value: id}
	item["recordId"] = &types.AttributeValueMemberS{Value: recordID}
	item["dedupId"] = &types.AttributeValueMemberS{Value: DedupID(id)}
	item["createdAt"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(now.UnixMilli(), 10)}
	item["expiration"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(o.opts.TTL).Unix(), 10)}
	return item
}

// message is what the relay sends of m, named name: its name, queue,
// body, group and attributes, as attributes of an outbox item or of an
// element of a record's messages, with room for extra more.
func message(name string, m Message, extra int) map[string]types.AttributeValue {
	n := 3 + extra
	if m.GroupID != "" {
		n++
	}
	if len(m.Attributes) > 0 {
		n++
	}
	// The string values are made together, one allocation rather than
	// one each: nothing writes to them once they are in the map.
	v := &[4]types.AttributeValueMemberS{{Value: name}, {Value: m.QueueURL}, {Value: m.Body}, {Value: m.GroupID}}
	item := make(map[string]types.AttributeValue, n)
	item["name"] = &v[0]
	item["queueUrl"] = &v[1]
	item["body"] = &v[2]
	if m.GroupID != "" {
		item["groupId"] = &v[3]
	}
	if len(m.Attributes) > 0 {
		item["attributes"] = attributesValue(m.Attributes)
	}
	return item
}

// attributesValue is attrs as a map attribute. Most functions publish the
// same attributes with every message (a "type", say): the last value made
// is kept and given again while the attributes are the same, rather than
// copied anew for each message. A value given out is never changed: the
// requests and items that hold it only read it.
func attributesValue(attrs map[string]string) types.AttributeValue {
	if last := lastAttributes.Load(); last != nil && maps.Equal(last.attrs, attrs) {
		return last.value
	}
	am := make(map[string]types.AttributeValue, len(attrs))
	for k, v := range attrs {
		am[k] = &types.AttributeValueMemberS{Value: v}
	}
	value := &types.AttributeValueMemberM{Value: am}
	// A copy of the caller's map: it may change it after the call.
	lastAttributes.Store(&keptAttributes{attrs: maps.Clone(attrs), value: value})
	return value
}

// keptAttributes is the last attributes value made, with the attributes it
// was made of.
type keptAttributes struct {
	attrs map[string]string
	value types.AttributeValue
}

var lastAttributes atomic.Pointer[keptAttributes]
