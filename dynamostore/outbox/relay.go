package outbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
)

// ErrBadItem means a stream record of the outbox table is no outbox item
// the relay can send (a field missing, or not a string). Retrying cannot
// mend it: see RelayOptions.DeadLetterQueueURL.
var ErrBadItem = errors.New("outbox: not an outbox item")

// ErrStreamView means a stream record lacks an image the relay needs: the
// new image of an INSERT or MODIFY (a stream of keys or old images only),
// or the old image of a record's MODIFY (a record table's stream of new
// images only, where a completion looks like any later update of the
// completed record, and would be sent again for each). The stream's view
// type is the table's: give the table a stream of new and old images
// (NEW_AND_OLD_IMAGES) and the relay that stream. The relay fails the
// stream record (it never dead-letters it): no retry mends it.
var ErrStreamView = errors.New("outbox: the stream lacks the images the relay needs (NEW_AND_OLD_IMAGES)")

// RelayOptions configures Relay.
type RelayOptions struct {
	// Stream configures the batch: its deadline margin and logger (see
	// lambdakit.DynamoDBStreamBatch).
	Stream lambdakit.StreamOptions
	// DeadLetterQueueURL is where an item goes that can never be sent as
	// it is: not an outbox item (ErrBadItem), or one SQS refuses whatever
	// the retries (its queue does not exist; a body, group or attribute
	// SQS finds invalid). The relay sends the stream record there (see
	// DeadLetter) and goes on with the next one, so one such item holds up
	// nothing else. Without it, such an item fails its batch like any
	// other failure, and the shard waits on it until the mapping's
	// MaximumRetryAttempts give it up with the records after it in its
	// batch. A FIFO dead-letter queue gets the item's group (or "outbox")
	// and its deduplication ID. A failed send to it fails the record.
	DeadLetterQueueURL string
	// Record names the attributes of the record table's items, as the
	// dynamostore.Store that writes them does; zero fields are the
	// defaults (see dynamostore.ResolveOptions). Relay panics when they
	// give two attributes one name, as a misconfigured function should
	// fail when it starts.
	Record dynamostore.Options
}

// DeadLetter is the body of what the relay sends to its dead-letter queue:
// enough to see what went wrong and to write the item again once mended.
// Resend sends it once mended, writing no table. The relay sends only new
// items: an outbox item can also be sent by deleting it, then writing the
// mended image (writing over the item still in the table is a MODIFY,
// which the relay skips); never a record, which is the business item.
type DeadLetter struct {
	// Error says why the item could not be sent.
	Error string `json:"error"`
	// EventID and SequenceNumber name the stream record.
	EventID        string `json:"eventID"`
	SequenceNumber string `json:"sequenceNumber"`
	// NewImage is the item as the stream record holds it, in DynamoDB's
	// attribute-value JSON; without its body and attributes when they
	// would make the dead letter larger than MaxDeadLetterBytes
	// (Truncated).
	NewImage map[string]events.DynamoDBAttributeValue `json:"newImage"`
	// Truncated says the body and attributes were left out; BodyBytes and
	// BodySHA256 describe the body. The item itself stays in the outbox
	// table until it expires (DefaultTTL), under its pk and id.
	Truncated  bool   `json:"truncated,omitempty"`
	BodyBytes  int    `json:"bodyBytes,omitempty"`
	BodySHA256 string `json:"bodySha256,omitempty"`
}

// MaxDeadLetterBytes bounds a dead letter: 256 KiB, what every SQS queue
// takes (the default MaximumMessageSize of queues made before SQS raised
// its limit to 1 MiB). An outbox item's body may be larger; its dead
// letter then goes without it.
const MaxDeadLetterBytes = 256 * 1024

// Relay returns the handler of the outbox table's stream: for each new
// item (an INSERT; the writes a retried completion repeats are MODIFY, and
// TTL deletions are REMOVE, both skipped) it sends the message to its
// queue, with its group and, on a FIFO queue, the item's deduplication ID,
// and IDAttribute. Records run in order, and the first that fails ends the
// batch: see lambdakit.DynamoDBStreamBatch.
//
// The same relay reads a record table's stream (NEW_AND_OLD_IMAGES), for
// the messages published on records (PublishOnRecord): an item with the
// record's status attribute (RelayOptions.Record) is a record, whose
// messages it sends when the stream record is a completion — an INSERT of
// a completed record, an update from in progress to completed, a
// completed record replaced under another lease — each with the ID
// RecordMessageID (in IDAttribute, and, on a FIFO queue, as
// DedupID) and in the order of the list. It ignores every other change
// of a record: a lock, a release, a TTL deletion, a completion without
// messages, and a completed record written again under the same lease (a
// later update of the item, or a retried completion). One stream record's messages are sent
// in order; a failed send fails the stream record, and its retry sends
// them all again, with the same IDs. A message that can never be sent
// sends the whole stream record to the dead-letter queue, the messages
// sent before it included: Resend sends them again, with their IDs.
//
// A stream record without the images this takes fails with
// ErrStreamView: the record table's stream must be of new and old images.
// A completed record with messages and no lease (an item its store did
// not write) is refused with ErrNoLease, and an item with messages whose
// status attribute holds no record status (RelayOptions.Record naming
// another attribute than the store's) with ErrNoRecordStatus, both
// ErrBadItem: none of its messages is sent.
//
// Its event source mapping needs FunctionResponseTypes
// [ReportBatchItemFailures], StartingPosition TRIM_HORIZON (so that no item
// written before the mapping is missed), and, so that a failure is never
// silent, MaximumRetryAttempts, BisectBatchOnFunctionError and an
// on-failure destination; give the relay that destination's queue as its
// DeadLetterQueueURL too.
func Relay(client producer.MessageSender, optFns ...func(*RelayOptions)) lambdakit.DynamoDBStreamBatchFunc {
	o, names, err := relayOptions(optFns)
	if err != nil {
		panic(err.Error())
	}
	return lambdakit.DynamoDBStreamBatch(func(ctx context.Context, rec *events.DynamoDBEventRecord) error {
		err := relay(ctx, client, names, rec)
		if err == nil || o.DeadLetterQueueURL == "" || !undeliverable(err) {
			return err
		}
		return deadLetter(ctx, client, o.DeadLetterQueueURL, rec, err)
	}, func(so *lambdakit.StreamOptions) { *so = o.Stream })
}

// relayOptions applies optFns, and resolves the record's attribute names.
func relayOptions(optFns []func(*RelayOptions)) (RelayOptions, dynamostore.Options, error) {
	var o RelayOptions
	for _, fn := range optFns {
		if fn != nil {
			fn(&o)
		}
	}
	names, err := dynamostore.ResolveOptions(func(r *dynamostore.Options) { *r = o.Record })
	if err != nil {
		return o, names, fmt.Errorf("outbox: RelayOptions.Record: %w", err)
	}
	return o, names, nil
}

// relay sends what rec brings: the messages of a record's completion on
// a record table (an item with a status attribute), or on the outbox
// table a new item's message.
func relay(ctx context.Context, client producer.MessageSender, names dynamostore.Options, rec *events.DynamoDBEventRecord) error {
	ins, err := sendsOf(names, rec)
	if err != nil {
		return err
	}
	return sendAll(ctx, client, ins)
}

// sendsOf is what the relay sends for the stream record rec: an outbox
// item's message, a record's completion's messages, or nothing.
func sendsOf(names dynamostore.Options, rec *events.DynamoDBEventRecord) ([]*sqs.SendMessageInput, error) {
	if len(rec.Change.NewImage) == 0 && rec.EventName != string(events.DynamoDBOperationTypeRemove) {
		return nil, fmt.Errorf("%w: %s %s has no new image", ErrStreamView, rec.EventName, rec.EventID)
	}
	switch _, isRecord := rec.Change.NewImage[names.StatusAttr]; {
	case isRecord:
		return completionSends(rec, names)
	case rec.EventName == string(events.DynamoDBOperationTypeInsert):
		in, err := sendInput(rec.Change.NewImage)
		if err != nil {
			return nil, err
		}
		return []*sqs.SendMessageInput{in}, nil
	}
	return nil, nil
}

// sendAll sends ins in order, stopping at the first failure.
func sendAll(ctx context.Context, client producer.MessageSender, ins []*sqs.SendMessageInput) error {
	for _, in := range ins {
		if err := send(ctx, client, in); err != nil {
			return err
		}
	}
	return nil
}

// send sends one message.
func send(ctx context.Context, client producer.MessageSender, in *sqs.SendMessageInput) error {
	if _, err := client.SendMessage(ctx, in, producer.WithTraceHeader(ctx)); err != nil {
		return fmt.Errorf("outbox: send %s to %s: %w", aws.ToString(in.MessageAttributes[IDAttribute].StringValue), aws.ToString(in.QueueUrl), err)
	}
	return nil
}

// undeliverable reports whether err means the item can never be sent as it
// is. Throttling, server errors, timeouts and access denied (a role can be
// mended without touching the item) are not: they are retried.
func undeliverable(err error) bool {
	if errors.Is(err, ErrBadItem) {
		return true
	}
	var gone *sqstypes.QueueDoesNotExist
	var invalid *sqstypes.InvalidMessageContents
	if errors.As(err, &gone) || errors.As(err, &invalid) {
		return true
	}
	var api smithy.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode() {
	case "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist",
		"InvalidParameterValue", "InvalidAttributeName", "InvalidAttributeValue",
		"MissingParameter", "UnsupportedOperation":
		return true
	}
	return false
}

// deadLetter sends rec to the dead-letter queue, with why it could not be
// sent. It returns nil once the dead-letter queue has it, and the send's
// error otherwise, so the record fails and comes back.
func deadLetter(ctx context.Context, client producer.MessageSender, queueURL string, rec *events.DynamoDBEventRecord, cause error) error {
	body, err := deadLetterBody(rec, cause)
	if err != nil {
		return errors.Join(cause, fmt.Errorf("outbox: dead letter of %s: %w", rec.EventID, err))
	}
	in := &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String(body)}
	if strings.HasSuffix(queueURL, ".fifo") {
		group, dedup := "outbox", rec.EventID
		if v, ok := rec.Change.NewImage["groupId"]; ok && v.DataType() == events.DataTypeString && v.String() != "" {
			group = v.String()
		}
		if v, ok := rec.Change.NewImage["dedupId"]; ok && v.DataType() == events.DataTypeString && v.String() != "" {
			dedup = v.String()
		}
		in.MessageGroupId, in.MessageDeduplicationId = aws.String(group), aws.String(dedup)
	}
	if _, err := client.SendMessage(ctx, in, producer.WithTraceHeader(ctx)); err != nil {
		return errors.Join(cause, fmt.Errorf("outbox: dead letter of %s to %s: %w", rec.EventID, queueURL, err))
	}
	return nil
}

// sendInput is the SendMessage call for an outbox item's new image.
func sendInput(img map[string]events.DynamoDBAttributeValue) (*sqs.SendMessageInput, error) {
	str := func(name string, required bool) (string, error) {
		v, ok := img[name]
		switch {
		case !ok && !required:
			return "", nil
		case !ok:
			return "", fmt.Errorf("%w: no %s", ErrBadItem, name)
		case v.DataType() != events.DataTypeString:
			return "", fmt.Errorf("%w: %s is not a string", ErrBadItem, name)
		}
		return v.String(), nil
	}
	var id, queue, body, group, dedup string
	var err error
	for _, f := range []struct {
		dst      *string
		name     string
		required bool
	}{{&id, "id", true}, {&queue, "queueUrl", true}, {&body, "body", true}, {&group, "groupId", false}, {&dedup, "dedupId", true}} {
		if *f.dst, err = str(f.name, f.required); err != nil {
			return nil, err
		}
	}
	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(queue),
		MessageBody:       aws.String(body),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{IDAttribute: {DataType: aws.String("String"), StringValue: aws.String(id)}},
	}
	if group != "" {
		in.MessageGroupId = aws.String(group)
	}
	if strings.HasSuffix(queue, ".fifo") {
		in.MessageDeduplicationId = aws.String(dedup)
	}
	if a, ok := img["attributes"]; ok {
		if a.DataType() != events.DataTypeMap {
			return nil, fmt.Errorf("%w: attributes is not a map", ErrBadItem)
		}
		for k, v := range a.Map() {
			if v.DataType() != events.DataTypeString {
				return nil, fmt.Errorf("%w: attribute %s is not a string", ErrBadItem, k)
			}
			in.MessageAttributes[k] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v.String())}
		}
	}
	return in, nil
}

// deadLetterBody is the JSON of rec's dead letter, at most
// MaxDeadLetterBytes: with the item's body and attributes when they fit,
// else without them (a body of '<' characters, say, which JSON escapes to
// six bytes each, would otherwise grow past what SQS takes, and the
// poison item would hold up its shard after all).
func deadLetterBody(rec *events.DynamoDBEventRecord, cause error) (string, error) {
	dl := DeadLetter{
		Error:          truncateText(cause.Error(), 4096),
		EventID:        rec.EventID,
		SequenceNumber: rec.Change.SequenceNumber,
		NewImage:       rec.Change.NewImage,
	}
	encode := func() (string, error) {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		err := enc.Encode(dl)
		return strings.TrimSuffix(b.String(), "\n"), err
	}
	out, err := encode()
	if err != nil || len(out) <= MaxDeadLetterBytes {
		return out, err
	}
	img := make(map[string]events.DynamoDBAttributeValue, len(rec.Change.NewImage))
	for k, v := range rec.Change.NewImage {
		if k != "body" && k != "attributes" {
			img[k] = v
		}
	}
	dl.NewImage, dl.Truncated = img, true
	if b, ok := rec.Change.NewImage["body"]; ok && b.DataType() == events.DataTypeString {
		sum := sha256.Sum256([]byte(b.String()))
		dl.BodyBytes, dl.BodySHA256 = len(b.String()), hex.EncodeToString(sum[:])
	}
	if out, err = encode(); err == nil && len(out) > MaxDeadLetterBytes {
		err = fmt.Errorf("%d bytes without the body, over %d", len(out), MaxDeadLetterBytes)
	}
	return out, err
}

// truncateText cuts s to at most n bytes, on a rune boundary.
func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// ErrTruncatedDeadLetter means a dead letter lacks its item's body and
// attributes (DeadLetter.Truncated): Resend cannot send it; the item is in
// the outbox table until it expires, to be read there.
var ErrTruncatedDeadLetter = errors.New("outbox: the dead letter was truncated")

// Resend sends again what the relay could not send when it dead-lettered
// dl: it reads dl.NewImage as the relay reads a new item (an INSERT) and
// sends its messages as the relay would have, in order, each with its
// ID and deduplication ID. For a record's completion these are the IDs
// RecordMessageID gives (the record, its lease, the queue URL and the
// message's name), so the messages the relay sent before the failure go
// again with the IDs they had: a FIFO queue drops them within its 5
// minutes, a consumer keyed on IDAttribute beyond them or on a standard
// queue. It writes nothing to any table: the record's item stays as it
// is. Mend the cause first (create the queue, or correct a queueUrl in
// dl.NewImage; a corrected message gets another ID, which is right since
// it was never sent). RelayOptions.Record names the record's attributes
// as for Relay; its other options are not used. A dead letter that reads
// as nothing to send, or as a record without its ID, under those names
// fails with ErrBadItem, nothing sent. A send that fails
// returns its error, after the messages before it were sent: call Resend
// again once mended. A truncated dead letter fails with
// ErrTruncatedDeadLetter.
func Resend(ctx context.Context, client producer.MessageSender, dl DeadLetter, optFns ...func(*RelayOptions)) error {
	if dl.Truncated {
		return fmt.Errorf("%w: %s: read the item from the outbox table", ErrTruncatedDeadLetter, dl.EventID)
	}
	_, names, err := relayOptions(optFns)
	if err != nil {
		return err
	}
	rec := &events.DynamoDBEventRecord{EventID: dl.EventID, EventName: string(events.DynamoDBOperationTypeInsert)}
	rec.Change.NewImage, rec.Change.SequenceNumber = dl.NewImage, dl.SequenceNumber
	ins, err := sendsOf(names, rec)
	if err != nil {
		return err
	}
	if len(ins) == 0 {
		// The relay dead-letters only what has a message to send: read
		// as nothing, the image's attributes are named otherwise (a
		// store that renamed its messages attribute, and no
		// RelayOptions.Record), and a nil would have the caller delete
		// a dead letter whose messages were never sent.
		return fmt.Errorf("%w: dead letter %s: no message to send under these attribute names (%s); give RelayOptions.Record the store's", ErrBadItem, dl.EventID, names.MessagesAttr)
	}
	return sendAll(ctx, client, ins)
}
