package dynamostore

import (
	"maps"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/lambdakit"
)

// RecordMessage is a message staged (lambdakit.Stage) to ride on the
// record's own write: the completion writes the messages staged this way,
// in the order staged, as the list attribute Options.MessagesAttr of the
// record's item, in the one request that completes the record (the
// UpdateItem, or under lambdakit.Options.StagedOnly the PutItem). They
// are no write of their own: they count toward the record's item, whose
// 400 KB CheckStaging checks, not toward a transaction. What a message
// holds is its publisher's (outbox.PublishOnRecord stages them, and the
// outbox relay sends them from the table's stream).
type RecordMessage map[string]types.AttributeValue

// onRecord returns rec with the messages it stages (RecordMessage) taken
// out of its staged writes and put on its item, as the list attribute
// MessagesAttr: what the completion writes. A completion never appends
// to messages already on the item: the record it completes was written
// whole by the lock (Acquire's PutItem), without messages, or is written
// whole by Commit's PutItem; so a record kept forever holds the messages
// of its last completion only.
func (s *Store) onRecord(rec lambdakit.IdempotencyRecord) lambdakit.IdempotencyRecord {
	msgs, writes := splitStaged(rec.Staged)
	if msgs == nil {
		return rec
	}
	attrs, _ := rec.Item.(map[string]types.AttributeValue)
	item := make(map[string]types.AttributeValue, len(attrs)+1) // no growing, on every record
	maps.Copy(item, attrs)
	item[s.o.MessagesAttr] = msgs
	rec.Item, rec.Staged = item, writes
	return rec
}

// splitStaged parts staged into the messages staged on the record
// (RecordMessage), as the list attribute the completion writes (nil when
// there are none), and the other writes, in order.
func splitStaged(staged []any) (msgs *types.AttributeValueMemberL, writes []any) {
	var list []types.AttributeValue
	for _, op := range staged {
		if m, ok := op.(RecordMessage); ok {
			list = append(list, &types.AttributeValueMemberM{Value: m})
			continue
		}
		writes = append(writes, op)
	}
	if len(list) == 0 {
		return nil, staged
	}
	return &types.AttributeValueMemberL{Value: list}, writes
}
