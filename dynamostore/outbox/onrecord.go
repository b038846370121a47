package outbox

import (
	"context"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/lambdakit"
)

// PublishOnRecord stages msgs on the idempotency record the handler runs
// for: the completion writes them as the list attribute
// dynamostore.Options.MessagesAttr of the record's own item, in the one
// request that completes the record, and writes nothing else for them (no
// outbox item, no transaction). The relay reads them from the record
// table's stream (see Relay) and sends them once the record is completed.
// A handler that fails publishes nothing; a completion that records a
// failure after the effect (lambdakit.EffectDone) drops them.
//
// It needs a dynamostore.Store (whose completion writes
// dynamostore.RecordMessage) on a table with a stream of new and old
// images (NEW_AND_OLD_IMAGES). It fails as Publish fails: with
// lambdakit.ErrNotStaging outside a handler run by lambdakit's idempotency
// middleware, and with ErrInvalidMessage (marked lambdakit.Permanent),
// before any work commits, for a message Check refuses, one that repeats
// another of this run on the record (the same queue and name), or
// messages that, with the item the handler sets (dynamostore.SetItem) and
// the messages and result it stages, make the record's item larger than
// DynamoDB's 400 KB, less the room kept for an effect declared after
// them (lambdakit.MaxEffectBytes; see dynamostore.Store.CheckStaging). A
// message without a Name is named by its place among the run's messages
// on the record ("#0", "#1", ...).
func PublishOnRecord(ctx context.Context, msgs ...Message) error {
	// Outside a handler's run StageFunc fails with lambdakit.ErrNotStaging.
	err := lambdakit.StageFunc(ctx, func(staged []any) ([]any, error) {
		var seenBuf [4]sent
		seen := seenBuf[:0] // the messages an earlier call staged
		for _, op := range staged {
			if m, ok := op.(dynamostore.RecordMessage); ok {
				seen = append(seen, sent{queueURL: stringOf(m["queueUrl"]), name: stringOf(m["name"])})
			}
		}
		var one [1]string
		names := namesFor(msgs, one[:])
		if err := checkAll(len(seen), seen, msgs, names); err != nil {
			return nil, err
		}
		ops := make([]any, len(msgs))
		for i, m := range msgs {
			ops[i] = dynamostore.RecordMessage(message(names[i], m, 0))
		}
		return ops, nil
	})
	return refused(err, len(msgs))
}

// stringOf is v's string, "" when v is no string.
func stringOf(v types.AttributeValue) string {
	if s, ok := v.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// ErrNoLease means a completed record carries messages but no lease: an
// item its store did not write (another writer, or an item older than
// leases), whose completions the relay cannot tell apart, nor give stable
// IDs (RecordMessageID): sent, each later write of the item could send
// its messages again under the same empty lease, or a new completion be
// dropped as a copy. It is an ErrBadItem: the relay sends the stream
// record to its dead-letter queue with the reason, or fails it without
// one; it never sends the messages.
var ErrNoLease = fmt.Errorf("%w: a completed record with messages has no lease", ErrBadItem)

// ErrNoRecordStatus means an item carries messages but its status
// attribute (RelayOptions.Record.StatusAttr) holds no record status
// (INPROGRESS, COMPLETED): most likely the relay names the business
// item's own status field (a payment's CHARGED, say) rather than the
// record's, and would otherwise skip every completion, its messages never
// sent and nothing said. It is an ErrBadItem: the relay sends the stream
// record to its dead-letter queue with the reason, or fails it without
// one; it never sends the messages.
var ErrNoRecordStatus = fmt.Errorf("%w: an item with messages has no record status", ErrBadItem)

// RecordMessageID is the ID of the message named name to queueURL that
// the completion of record recordID under the lease lease carries: the
// same for every stream record of that completion, and another for a new
// completion of the record (after it expired). The relay sends it in
// IDAttribute and derives the deduplication ID from it (DedupID).
func RecordMessageID(recordID, lease, queueURL, name string) string {
	return "outbox#" + lambdakit.KeyHash(recordID+"\x00"+lease+"\x00"+queueURL+"\x00"+name)
}

// completionSends is what the relay sends for rec, a stream record of a
// record table (names its attributes): the messages of a completion (an
// INSERT of a completed record, an in-progress record updated to
// completed, a completed record replaced by a completion under another
// lease), and nothing for every other change: a lock, a release, a TTL
// deletion, a record without messages, and a completed record written
// again under the same lease (a later update of the item; or a completion
// retried after a lost answer, which DynamoDB Streams does not record
// since it changes nothing, but moto does). A MODIFY without an old image
// is refused (ErrStreamView): it could be either.
func completionSends(rec *events.DynamoDBEventRecord, names dynamostore.Options) ([]*sqs.SendMessageInput, error) {
	img, old := rec.Change.NewImage, rec.Change.OldImage
	if rec.EventName == string(events.DynamoDBOperationTypeModify) && len(old) == 0 {
		return nil, fmt.Errorf("%w: MODIFY %s of a record has no old image", ErrStreamView, rec.EventID)
	}
	msgs, ok := img[names.MessagesAttr]
	if !ok {
		return nil, nil
	}
	status := stringAttr(img, names.StatusAttr)
	if !lambdakit.IdempotencyStatus(status).Known() {
		return nil, fmt.Errorf("%w: %s %s: %s is %q", ErrNoRecordStatus, rec.EventName, rec.EventID, names.StatusAttr, status)
	}
	if status != string(lambdakit.StatusCompleted) {
		return nil, nil
	}
	lease := stringAttr(img, names.LeaseAttr)
	if lease == "" {
		return nil, fmt.Errorf("%w: %s %s", ErrNoLease, rec.EventName, rec.EventID)
	}
	if stringAttr(old, names.StatusAttr) == string(lambdakit.StatusCompleted) && stringAttr(old, names.LeaseAttr) == lease {
		return nil, nil
	}
	if msgs.DataType() != events.DataTypeList {
		return nil, fmt.Errorf("%w: record attribute %s is not a list", ErrBadItem, names.MessagesAttr)
	}
	recordID := stringAttr(img, names.IDAttr())
	if recordID == "" {
		// Every record's image holds its ID: without it the attributes
		// are named otherwise than Record says, and the messages would
		// go under IDs that are not theirs (see RecordMessageID).
		return nil, fmt.Errorf("%w: %s %s: the record has no %s; RelayOptions.Record must name the store's attributes", ErrBadItem, rec.EventName, rec.EventID, names.IDAttr())
	}
	var out []*sqs.SendMessageInput
	for i, el := range msgs.List() {
		if el.DataType() != events.DataTypeMap {
			return nil, fmt.Errorf("%w: message %d on the record is not a map", ErrBadItem, i)
		}
		m := el.Map()
		id := RecordMessageID(recordID, lease, stringAttr(m, "queueUrl"), stringAttr(m, "name"))
		withID := map[string]events.DynamoDBAttributeValue{"id": events.NewStringAttribute(id), "dedupId": events.NewStringAttribute(DedupID(id))}
		for k, v := range m {
			if _, own := withID[k]; !own {
				withID[k] = v
			}
		}
		in, err := sendInput(withID)
		if err != nil {
			return nil, fmt.Errorf("message %d on the record: %w", i, err)
		}
		out = append(out, in)
	}
	return out, nil
}

// stringAttr is the string attribute name of img, "" when it has none.
func stringAttr(img map[string]events.DynamoDBAttributeValue, name string) string {
	if v, ok := img[name]; ok && v.DataType() == events.DataTypeString {
		return v.String()
	}
	return ""
}
